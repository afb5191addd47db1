"""Pure analysis functions: DataFrames in, DataFrames or findings out. No I/O, no plots."""
