"""A LightningModule classifying token sequences (a bag of embeddings), trained with
``DebugkitCallback(run_dir)`` and the loader wrapped as the callback's warning asks
(``trainer.fit(model, cb.track(loader))``). Every sequence was cut to 12 tokens, except
dataset index 53, which the tokenizer left at 17: the default collate raises ``stack
expects each tensor to be equal size`` while Lightning fetches batch 6 (sample 5 of
batches of 8, in order), before any hook of that step runs.

    python tests/scenarios/jobs/lit_tokens.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

LONG = 53


class Sequences(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 30, (17 if i == LONG else 12,), generator=g)
        return ids, int(ids[0]) % 2


class LitBag(pl.LightningModule):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.EmbeddingBag(vocab, dim)
        self.head = nn.Linear(dim, 2)

    def training_step(self, batch, batch_idx):
        ids, y = batch
        return nn.functional.cross_entropy(self.head(self.embed(ids)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(argv=None) -> None:
    from debugkit.integrations.lightning import DebugkitCallback

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    cb = DebugkitCallback(a.out)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[cb])
    trainer.fit(LitBag(vocab=30, dim=8), cb.track(DataLoader(Sequences(), batch_size=8)))


if __name__ == "__main__":
    main()
