"""Credit-risk model with entity embeddings; later applications bring an unseen category.

The German credit data (examples/data/german_credit.csv: UCI Statlog, CC BY 4.0, see
examples/data/README.md; 1000 applications, 13 categorical and 7 numeric attributes) is encoded
the way many tabular models are: each categorical column gets a vocabulary built from
the applications available when the model was set up (the first 800), unseen values
map to an "unknown" id, ``len(vocab)``, and each column has an ``nn.Embedding`` of
``len(vocab)`` rows: one too few. In epoch 2 the 200 newer applications join the
training set; some carry ``personal_status_and_sex = "male : married/widowed"``, which
none of the first 800 had, and the embedding raises ``IndexError: index out of range
in self`` (on a GPU: ``CUDA error: device-side assert triggered``)::

    python -m examples.credit_categories --out sample_runs/credit-unseen-category
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import ConcatDataset, DataLoader, Dataset

DATA = Path(os.environ.get("DEBUGKIT_GERMAN_CREDIT",
                           Path(__file__).resolve().parent / "data" / "german_credit.csv"))
TARGET = "creditability"
FIRST_STAGE = 800


class CategoricalEncoder(nn.Module):
    """One embedding per categorical column, concatenated."""

    def __init__(self, vocab_sizes: dict[str, int], dim: int = 4):
        super().__init__()
        self.columns = list(vocab_sizes)
        self.embeds = nn.ModuleDict({c: nn.Embedding(n, dim) for c, n in vocab_sizes.items()})

    def forward(self, codes):
        return torch.cat([self.embeds[c](codes[:, j]) for j, c in enumerate(self.columns)], dim=1)


class CreditNet(nn.Module):
    def __init__(self, vocab_sizes: dict[str, int], n_numeric: int, dim: int = 4, hidden: int = 32):
        super().__init__()
        self.encoder = CategoricalEncoder(vocab_sizes, dim)
        self.head = nn.Sequential(nn.Linear(len(vocab_sizes) * dim + n_numeric, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 2))

    def forward(self, categorical, numeric):
        return self.head(torch.cat([self.encoder(categorical), numeric], dim=1))


def build_model(vocab_sizes: dict, n_numeric: int, dim: int = 4, hidden: int = 32) -> nn.Module:
    return CreditNet({str(k): int(v) for k, v in vocab_sizes.items()}, int(n_numeric), dim, hidden)


def train_step(model, batch):
    """The loss of one batch (a dict of categorical codes, numeric features and labels)."""
    logits = model(batch["categorical"], batch["numeric"])
    return F.cross_entropy(logits, batch["label"])


class Applications(Dataset):
    def __init__(self, frame, vocab: dict[str, list], numeric: list[str], mean, std):
        cols = list(vocab)
        codes = np.stack([frame[c].map({v: i for i, v in enumerate(vocab[c])})
                          .fillna(len(vocab[c])).to_numpy(dtype=np.int64) for c in cols], axis=1)
        self.categorical = torch.tensor(codes)           # unseen values -> len(vocab[c])
        self.numeric = torch.tensor(((frame[numeric] - mean) / std).to_numpy(dtype=np.float32))
        self.label = torch.tensor((frame[TARGET] == "bad").to_numpy(dtype=np.int64))

    def __len__(self):
        return len(self.label)

    def __getitem__(self, i):
        return {"categorical": self.categorical[i], "numeric": self.numeric[i], "label": self.label[i]}


def load(path: Path = DATA):
    import pandas as pd

    frame = pd.read_csv(path)
    numeric = [c for c in frame.columns if c != TARGET and pd.api.types.is_numeric_dtype(frame[c])]
    categorical = [c for c in frame.columns if c != TARGET and c not in numeric]
    first, later = frame.iloc[:FIRST_STAGE], frame.iloc[FIRST_STAGE:]
    vocab = {c: sorted(first[c].unique()) for c in categorical}  # built from the first stage only
    mean, std = first[numeric].mean(), first[numeric].std()
    return (Applications(first, vocab, numeric, mean, std),
            Applications(later, vocab, numeric, mean, std), vocab, numeric)


def train(out: str, *, epochs: int = 3, lr: float = 0.01, batch_size: int = 32, seed: int = 0) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    first, later, vocab, numeric = load()
    sizes = {c: len(v) for c, v in vocab.items()}  # no row for the "unknown" id
    kwargs = {"vocab_sizes": sizes, "n_numeric": len(numeric), "dim": 4, "hidden": 32}
    model = build_model(**kwargs)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rec = Recorder(out, model, optimizer=opt, name="credit-embeddings",
                   config={"lr": lr, "batch_size": batch_size, "epochs": epochs, "seed": seed,
                           "first_stage": FIRST_STAGE},
                   model_factory="examples.credit_categories:build_model", factory_kwargs=kwargs,
                   step_fn="examples.credit_categories:train_step", num_classes=2,
                   flush_every_s=0.5)
    g = torch.Generator().manual_seed(seed)
    with rec:
        for epoch in range(epochs):
            data = first if epoch == 0 else ConcatDataset([first, later])
            loader = rec.track(DataLoader(data, batch_size=batch_size, shuffle=True, generator=g))
            for batch in loader:
                with rec.step(batch):
                    loss = train_step(model, batch)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs)


if __name__ == "__main__":
    main()
