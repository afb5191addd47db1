"""A tiny BERT trained with the Hugging Face ``Trainer`` and debugkit's callback.

No download: the model is ``BertForSequenceClassification(BertConfig(...))`` with two
layers of width 32, and the "text" is sklearn's digits read as a sequence of 64 tokens
(each pixel's intensity 0-16 is a token id, after a [CLS] token), 640 images.

Healthy run (20 optimizer steps)::

    python -m examples.hf_bert_digits --out sample_runs/hf-bert-digits

The corrupted-label run: row 37 is annotated 12 for 10 classes, and the model's own
``CrossEntropyLoss`` raises ``IndexError: Target 12 is out of bounds.`` inside its
forward, where the callback captures it::

    python -m examples.hf_bert_digits --out runs/hf-bad-label --corrupt-label 12

The NaN run: the same model as a regressor of the digit's value (``num_labels=1``,
MSE loss), where row 37's annotation is missing and stored as NaN; the batch holding it
gives NaN gradients, captured before the optimizer step::

    python -m examples.hf_bert_digits --out runs/hf-nan --missing-target
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from torch.utils.data import Dataset

N_DIGITS = 640
CORRUPT_ROW = 37
CLS, VOCAB = 17, 18  # pixel intensities 0..16, then [CLS]


class DigitTokens(Dataset):
    """Digits as token sequences: ``{"input_ids", "attention_mask", "labels"}``."""

    def __init__(self, corrupt_label=None, missing_target=False):
        from sklearn.datasets import load_digits

        d = load_digits()
        pix = torch.tensor(d.data[:N_DIGITS], dtype=torch.long)
        self.input_ids = torch.cat([torch.full((len(pix), 1), CLS), pix], dim=1)
        if missing_target:  # regression of the digit's value, one annotation missing
            self.labels = torch.tensor(d.target[:N_DIGITS], dtype=torch.float32)
            self.labels[CORRUPT_ROW] = float("nan")
        else:
            self.labels = torch.tensor(d.target[:N_DIGITS], dtype=torch.long)
            if corrupt_label is not None:
                self.labels[CORRUPT_ROW] = corrupt_label

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "attention_mask": torch.ones(65, dtype=torch.long),
                "labels": self.labels[i]}


def build_model(num_labels: int = 10):
    """A 2-layer, 32-wide BERT classifier (regressor when ``num_labels == 1``)."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=80,
                        num_labels=num_labels,
                        problem_type="regression" if num_labels == 1 else None)
    return BertForSequenceClassification(config)


def train(out: str, *, corrupt_label=None, missing_target=False, epochs: int = 1,
          batch_size: int = 32, seed: int = 0, accumulation: int = 1) -> None:
    from transformers import Trainer, TrainingArguments, set_seed

    from debugkit.integrations.transformers import DebugkitCallback

    set_seed(seed)
    ds = DigitTokens(corrupt_label, missing_target)
    model = build_model(1 if missing_target else 10)
    with tempfile.TemporaryDirectory(prefix="hf-out-") as tmp:
        args = TrainingArguments(
            output_dir=os.path.join(tmp, "trainer"), use_cpu=True, report_to=[],
            per_device_train_batch_size=batch_size, num_train_epochs=epochs,
            gradient_accumulation_steps=accumulation, learning_rate=1e-3,
            logging_steps=1, save_strategy="no", seed=seed, dataloader_num_workers=0,
            disable_tqdm=True)
        cb = DebugkitCallback(out, name="hf-bert-digits", flush_every_s=0.5,
                              halt_on_nonfinite=True)
        Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb]).train()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--corrupt-label", type=int, default=None)
    p.add_argument("--missing-target", action="store_true",
                   help="regress the digit's value with row 37's target missing (NaN)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--accumulation", type=int, default=1)
    a = p.parse_args(argv)
    train(a.out, corrupt_label=a.corrupt_label, missing_target=a.missing_target,
          epochs=a.epochs, accumulation=a.accumulation)


if __name__ == "__main__":
    main()
