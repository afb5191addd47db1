"""A keyword-spotting model over 1 s audio clips (dicts of ``audio`` and ``label``),
read by two DataLoader worker processes. One clip, dataset index 77, was never
annotated: its ``label`` is None, and the default collate raises ``RuntimeError: Could
not infer dtype of NoneType`` in a worker while building batch 9 (sample 5 of batches
of 8, in order), before any training step of that batch starts.

    python tests/scenarios/jobs/audio_unlabelled.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from debugkit import Recorder  # noqa: E402

N, SAMPLES, KEYWORDS, BATCH = 160, 400, 4, 8
UNLABELLED = 77


class Clips(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        label = None if i == UNLABELLED else i % KEYWORDS
        return {"audio": torch.randn(SAMPLES, generator=g), "label": label}


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(SAMPLES, 32), nn.ReLU(), nn.Linear(32, KEYWORDS))


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-audio-unlabelled", num_classes=KEYWORDS,
                   model_factory="tests.scenarios.jobs.audio_unlabelled:build_model", flush_every_s=0.5)
    loader = rec.track(DataLoader(Clips(), batch_size=BATCH, shuffle=False, num_workers=2))
    with rec:
        for batch in loader:
            with rec.step(batch):
                loss = nn.functional.cross_entropy(model(batch["audio"]), batch["label"])
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
