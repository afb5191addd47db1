"""Chart builders: ``build_<x>_figure(df, ...) -> plotly Figure``. Never ``st.*``."""
