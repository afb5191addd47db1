"""A travel-mode classifier over GPS tracks of different lengths, read from a JSON-lines
file (``tracks.jsonl`` in the working directory, written on the first run). The loader
pads the tracks with its own ``collate_tracks`` (``pad_sequence``), so lengths may
differ; but the export of track 93 carried an altitude column: its points are
``[length, 3]`` where every other track's are ``[length, 2]``, and ``collate_tracks``
raises ``RuntimeError`` while building batch 5 (sample 13 of batches of 16, in order),
in the main process, before that step starts.

The run names the dataset's factory, ``rec.track(loader, dataset_factory=
"gps_tracks:make_dataset", dataset_kwargs={"path": "tracks.jsonl"})`` (this script's own
module, as replay imports it from ``--code-root``), so replay can fetch the batch again.

    python tests/scenarios/jobs/gps_tracks.py --out RUN
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from debugkit import Recorder  # noqa: E402

N, MODES, BATCH = 128, 3, 16
WITH_ALTITUDE = 93


class Tracks(Dataset):
    """``(points [length, 2] float32, mode)`` per track of a JSON-lines file."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as fh:
            self.rows = [json.loads(line) for line in fh if line.strip()]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return torch.tensor(row["points"], dtype=torch.float32), int(row["mode"])


def make_dataset(path: str) -> Tracks:
    return Tracks(path)


def collate_tracks(samples):
    """Pad the tracks to the longest one; the lengths let the model mask the padding."""
    points = pad_sequence([p for p, _ in samples], batch_first=True)
    lengths = torch.tensor([len(p) for p, _ in samples])
    modes = torch.tensor([m for _, m in samples])
    return points, lengths, modes


def write_tracks(path: Path) -> None:
    g = torch.Generator().manual_seed(7)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(N):
            length = 5 + int(torch.randint(0, 20, (1,), generator=g))
            cols = 3 if i == WITH_ALTITUDE else 2
            pts = torch.randn(length, cols, generator=g).cumsum(0).round(decimals=4).tolist()
            fh.write(json.dumps({"points": pts, "mode": i % MODES}) + "\n")


class TrackNet(nn.Module):
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.step = nn.Linear(2, hidden)
        self.head = nn.Linear(hidden, MODES)

    def forward(self, points, lengths):
        h = torch.relu(self.step(points))  # [batch, length, hidden]
        mask = torch.arange(points.shape[1])[None, :] < lengths[:, None]
        pooled = (h * mask[..., None]).sum(1) / lengths[:, None]
        return self.head(pooled)


def build_model() -> nn.Module:
    return TrackNet()


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if not Path("tracks.jsonl").exists():
        write_tracks(Path("tracks.jsonl"))
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-gps-tracks", num_classes=MODES,
                   model_factory="gps_tracks:build_model", flush_every_s=0.5)
    loader = rec.track(DataLoader(make_dataset("tracks.jsonl"), batch_size=BATCH, shuffle=False,
                                  collate_fn=collate_tracks),
                       dataset_factory="gps_tracks:make_dataset",
                       dataset_kwargs={"path": "tracks.jsonl"})
    with rec:
        for points, lengths, modes in loader:
            with rec.step((points, lengths, modes)):
                loss = nn.functional.cross_entropy(model(points, lengths), modes)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
