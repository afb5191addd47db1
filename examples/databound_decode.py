"""A data-bound training job: its DataLoader workers decode every sample in pure Python.

The dataset keeps sklearn's wine table (178 rows, 13 features) as run-length-encoded
text records, and each ``__getitem__`` decodes one by hand, character by character, and
repeats the decode to stand in for a heavy parser. Two worker processes cannot keep up with
a small MLP, so the training loop spends most of its time in ``DataLoader.__next__``
waiting for them: the profile's hot function is in the workers, not the model.

    debugkit profile runs/databound -- python -m examples.databound_decode --steps 60
"""

from __future__ import annotations

import argparse


def encode_row(values) -> str:
    """A row as ``digit*count`` runs of its fixed-point text: '1423,171,...' -> '1*1,4*1,...'."""
    text = ",".join(str(int(round(v * 100))) for v in values)
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{text[i]}*{j - i}")
        i = j
    return ";".join(out)


def decode_row(record: str, repeat: int) -> list[float]:
    """Decode a record ``repeat`` times (the same pure-Python work a real parser does)."""
    values: list[float] = []
    for _ in range(repeat):
        chars = []
        for run in record.split(";"):
            ch, _, count = run.partition("*")
            for _ in range(int(count)):
                chars.append(ch)
        values = [int(tok) / 100.0 for tok in "".join(chars).split(",")]
    return values


class EncodedWine:
    def __init__(self, repeat: int):
        from sklearn.datasets import load_wine

        data = load_wine()
        self.records = [encode_row(row) for row in data.data]
        self.labels = [int(y) for y in data.target]
        self.repeat = repeat

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        import torch

        x = decode_row(self.records[i], self.repeat)
        return torch.tensor(x, dtype=torch.float32), self.labels[i]


def main(argv=None) -> int:
    import torch
    from torch import nn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=120, help="decodes per sample (the parser's cost)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = EncodedWine(args.repeat)
    loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=args.workers,
                                         persistent_workers=args.workers > 0)
    model = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x / 100.0), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
    print(f"done: {step} steps, loss {loss.item():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
