"""A small transformer encoder classifying token sequences (vocabulary of 40 tokens).
The tokenizer gained an end-of-sequence token (id 40) that the embedding was never
resized for; the sequences that carry it arrive at step 7 and ``nn.Embedding`` raises
``IndexError: index out of range in self``.

    python tests/scenarios/jobs/token_transformer.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from debugkit import Recorder  # noqa: E402

VOCAB, SEQ, BATCH = 40, 10, 8
EOS = VOCAB  # the new token: one past the embedding
BAD_ROW = 61  # dataset index of the first sequence that ends with EOS (batch 7, sample 5)


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 16, n_classes: int = 3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=2, dim_feedforward=32, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def build_model() -> nn.Module:
    return TinyTransformer()


def make_data(n: int = 160):
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    labels = tokens[:, 0] % 3
    tokens[BAD_ROW:, -1] = EOS  # every sequence from BAD_ROW on was re-tokenized with EOS
    return TensorDataset(tokens, labels)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-token-transformer", num_classes=3,
                   model_factory="tests.scenarios.jobs.token_transformer:build_model", flush_every_s=0.5)
    loader = rec.track(DataLoader(make_data(), batch_size=BATCH, shuffle=False))
    with rec:
        for tokens, labels in loader:
            with rec.step((tokens, labels)):
                loss = nn.functional.cross_entropy(model(tokens), labels)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
