"""A LightningModule classifying wine measurements into 4 quality bands, written the way
the Lightning docs write one: ``save_hyperparameters()`` in ``__init__``, the training
code under ``if __name__ == "__main__"``, run as a script (``python lit_wine.py``), with
``DebugkitCallback(run_dir)`` and nothing else. A relabelling bug gave dataset index 45
the band 7: ``F.cross_entropy`` raises at step 4 (sample 5 of batches of 10, in order).

    python tests/scenarios/jobs/lit_wine.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

BAD_ROW = 45


class LitWine(pl.LightningModule):
    def __init__(self, features: int, hidden: int, num_classes: int, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def make_data(n: int = 120):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, 11, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    y[BAD_ROW] = 7  # a band that does not exist
    return TensorDataset(x, y)


def main(argv=None) -> None:
    from debugkit.integrations.lightning import DebugkitCallback

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    model = LitWine(features=11, hidden=16, num_classes=4)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[DebugkitCallback(a.out)])
    trainer.fit(model, DataLoader(make_data(), batch_size=10, shuffle=False))


if __name__ == "__main__":
    main()
