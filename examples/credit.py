"""Train two credit models on the German credit data and audit both for bias.

    python -m examples.credit --out sample_runs/credit-audit

The Statlog German Credit data (UCI, Hofmann 1994, CC BY 4.0; ``examples/data/``) holds
1,000 applicants and whether their credit turned out good or bad. The script trains

- a small torch MLP on one-hot and standardised features, recorded with
  ``debugkit.Recorder`` (so the run is a real debugkit run), its weights saved as
  ``models/mlp.safetensors``;
- a sklearn gradient-boosting pipeline (one-hot encoding + GradientBoostingClassifier)
  on the same split;

then audits each on the held-out 40 % with ``debugkit.audit.audit_model``: SHAP
attributions, and fairness on ``age_in_years`` (binned), ``sex`` (from
``personal_status_and_sex``) and ``foreign_worker``, with "good" credit the favourable
outcome. The Audit page can recompute either audit (``audit_targets.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "german_credit.csv"
TARGET = "creditability"
POSITIVE = "good"
SENSITIVE = ["age_in_years", "sex", "foreign_worker"]
TEST_SHARE = 0.4


def load_credit():
    """(features DataFrame, outcome Series of "good"/"bad") of the 1,000 applicants."""
    import pandas as pd

    df = pd.read_csv(DATA)
    y = df.pop(TARGET)
    return df, y


def split(y, seed: int = 0):
    """Stratified (train, test) row positions: 60 % / 40 %."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    return train_test_split(idx, test_size=TEST_SHARE, random_state=seed, stratify=y)


def categorical_columns(X) -> list[str]:
    return [c for c in X.columns if X[c].dtype.kind not in "fiub"]


def build_gbm(X, seed: int = 0):
    """One-hot encoding of the categorical columns, then gradient boosting."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    cat = categorical_columns(X)
    prep = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), cat)],
                             remainder="passthrough")
    gbm = GradientBoostingClassifier(n_estimators=150, max_depth=3, learning_rate=0.05,
                                     subsample=0.8, random_state=seed)
    return Pipeline([("prep", prep), ("gbm", gbm)])


def train_gbm(seed: int = 0):
    X, y = load_credit()
    tr, te = split(y, seed)
    model = build_gbm(X, seed).fit(X.iloc[tr], y.iloc[tr])
    return model, X, y, tr, te


# ----------------------------------------------------------------------------- the MLP
def fit_encoder(X) -> dict:
    """One-hot categories (``column=value`` columns) and numeric means/stds, from X."""
    cat = categorical_columns(X)
    return {"categorical": {c: sorted(X[c].astype(str).unique()) for c in cat},
            "numeric": {c: [float(X[c].mean()), float(X[c].std())] for c in X.columns if c not in cat}}


def encode(X, enc: dict):
    """The MLP's input: standardised numeric columns, then one-hot ``column=value``."""
    import pandas as pd

    cols = {}
    for c, (mu, sd) in enc["numeric"].items():
        cols[c] = (X[c].to_numpy(dtype=float) - mu) / (sd or 1.0)
    for c, cats in enc["categorical"].items():
        v = X[c].astype(str).to_numpy()
        for k in cats:
            cols[f"{c}={k}"] = (v == k).astype(float)
    return pd.DataFrame(cols, index=X.index)


#: What ``audit_target`` lets a run's ``models/mlp.json`` ask for (the recorded MLP has 61
#: features and 32 hidden units); ``$DEBUGKIT_AUDIT_BOUNDS`` changes them.
MLP_BOUNDS = {"n_features": (1, 10_000), "hidden": (1, 1024)}


def build_mlp(n_features: int, hidden: int = 32):
    """A two-hidden-layer ReLU MLP giving the logit of good credit."""
    import torch.nn as nn

    return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2),
                         nn.ReLU(), nn.Linear(hidden // 2, 1))


def train_mlp(out: Path, X, y, tr, te, *, epochs: int, seed: int) -> tuple:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    from torch.utils.data import DataLoader, TensorDataset

    from debugkit import Recorder

    torch.manual_seed(seed)
    enc = fit_encoder(X.iloc[tr])
    Xe = encode(X, enc)
    target = (y == POSITIVE).to_numpy(dtype=np.float32)
    xt = torch.tensor(Xe.to_numpy(dtype=np.float32))
    yt = torch.tensor(target)
    model = build_mlp(xt.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-3)
    rec = Recorder(out, model, optimizer=opt, name="credit-audit",
                   config={"epochs": epochs, "lr": 3e-3, "weight_decay": 1e-3, "hidden": 32,
                           "batch_size": 64, "seed": seed, "data": "Statlog German Credit (UCI)",
                           "train_rows": len(tr), "test_rows": len(te)},
                   model_factory="examples.credit:build_mlp",
                   factory_kwargs={"n_features": int(xt.shape[1])}, num_classes=2, flush_every_s=0.5)
    g = torch.Generator().manual_seed(seed)
    loader = DataLoader(TensorDataset(xt[tr], yt[tr]), batch_size=64, shuffle=True, generator=g)
    with rec:
        for epoch in range(epochs):
            for batch in loader:
                with rec.step(batch):
                    xb, yb = batch
                    loss = F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()
            with torch.no_grad():
                acc = ((model(xt[te]).squeeze(1) > 0).float() == yt[te]).float().mean().item()
            rec.log(test_accuracy=acc)
    model.eval()
    models = out / "models"
    models.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(models / "mlp.safetensors"))
    (models / "mlp.json").write_text(json.dumps({"factory": "examples.credit:build_mlp",
                                                 "factory_kwargs": {"n_features": int(xt.shape[1])},
                                                 "encoder": enc, "split_seed": seed}, indent=2))
    return model, Xe


def mlp_sensitive(X) -> dict:
    """The MLP sees encoded columns, so the sensitive attributes come from the raw ones."""
    from debugkit.audit import Attribute

    return {"age_in_years": Attribute(values=X["age_in_years"].to_numpy(), feature="age_in_years"),
            "sex": Attribute(values=X["personal_status_and_sex"].to_numpy(), derive="sex",
                             feature="personal_status_and_sex"),
            "foreign_worker": Attribute(values=X["foreign_worker"].to_numpy(), feature="foreign_worker")}


# ----------------------------------------------------------------------------- targets
def audit_target(run_dir, model: str = "gbm", seed: int = 0) -> dict:
    """The ``audit_model`` arguments for the Audit page (see ``audit_targets.json``).

    ``gbm`` is retrained (deterministic, about a second); ``mlp`` is loaded from the
    run's ``models/mlp.safetensors``.
    """
    X, y = load_credit()
    tr, te = split(y, seed)
    if model == "gbm":
        gbm = build_gbm(X, seed).fit(X.iloc[tr], y.iloc[tr])
        return {"model": gbm, "X": X.iloc[te].reset_index(drop=True), "y": y.iloc[te].reset_index(drop=True),
                "sensitive": list(SENSITIVE), "positive_label": POSITIVE,
                "name": "Gradient boosting (sklearn), held-out 40 %",
                "candidates": ["age_in_years", "sex", "foreign_worker", "job", "housing"]}
    if model == "mlp":
        from safetensors.torch import load_file

        from debugkit._fsutil import read_json
        from debugkit.audit.targets import check_bounds

        meta = read_json(Path(run_dir) / "models" / "mlp.json", max_bytes=1 << 20)
        # The run's file sizes the model: keep it inside the bounds the server allows.
        kwargs = check_bounds(meta["factory_kwargs"], MLP_BOUNDS,
                              what=f"{Path(run_dir).name}/models/mlp.json factory_kwargs")
        net = build_mlp(**kwargs)
        net.load_state_dict(load_file(str(Path(run_dir) / "models" / "mlp.safetensors")))
        net.eval()
        Xte = X.iloc[te].reset_index(drop=True)
        return {"model": net, "X": encode(Xte, meta["encoder"]), "y": y.iloc[te].reset_index(drop=True),
                "sensitive": mlp_sensitive(Xte), "positive_label": POSITIVE,
                "name": "Torch MLP (recorded run), held-out 40 %"}
    raise ValueError(f"model={model!r}: expected 'gbm' or 'mlp'")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of each audit")
    a = p.parse_args(argv)
    out = Path(a.out)

    from debugkit.audit import Auditor
    from debugkit.audit.targets import write_targets

    X, y = load_credit()
    tr, te = split(y, a.seed)
    net, _ = train_mlp(out, X, y, tr, te, epochs=a.epochs, seed=a.seed)
    write_targets(out, [
        {"name": "gbm", "title": "Gradient boosting (sklearn pipeline, retrained with seed 0)",
         "loader": "examples.credit:audit_target", "kwargs": {"model": "gbm", "seed": a.seed}},
        {"name": "mlp", "title": "Torch MLP (this run's models/mlp.safetensors)",
         "loader": "examples.credit:audit_target", "kwargs": {"model": "mlp", "seed": a.seed}},
    ])
    auditor = Auditor({"n_boot": a.n_boot, "seed": a.seed})
    for which in ("gbm", "mlp"):
        args = audit_target(out, which, a.seed)
        args.pop("candidates", None)
        audit = auditor.audit_model(args.pop("model"), args.pop("X"), args.pop("y"), run_dir=out, **args)
        print(f"{which}: audit {audit.id}: {audit.verdict} "
              f"(SHAP {audit.doc['shap']['explainer']}, additivity error "
              f"{audit.doc['shap']['additivity_max_error']:.2e})")


if __name__ == "__main__":
    main()
