"""A tiny BertForSequenceClassification (built from a config, no download) classifying
token sequences ("reviews") into 3 sentiments with the Hugging Face Trainer (shuffled
batches of 16, no warmup) and ``DebugkitCallback(run_dir)``. One review, dataset index
BAD_ROW, was annotated 3 (a "mixed" sentiment the model does not have); the model's own
CrossEntropyLoss raises ``IndexError: Target 3 is out of bounds.`` when the shuffled
sampler serves it. Attention's query and key gradients are tiny from step 0 on, as at
any initialisation: not a vanishing gradient.

    python tests/scenarios/jobs/hf_reviews.py --out RUN
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

N, SEQ, VOCAB, LABELS = 320, 24, 50, 3
BAD_ROW = 302


class Reviews(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(8)
        self.ids = torch.randint(1, VOCAB, (N, SEQ), generator=g)
        self.labels = self.ids[:, 1] % LABELS
        self.labels[BAD_ROW] = 3

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.labels[i]}


def main(argv=None) -> None:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

    from debugkit.integrations.transformers import DebugkitCallback

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    set_seed(3)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ + 2, num_labels=LABELS))
    with tempfile.TemporaryDirectory(prefix="hf-out-") as tmp:
        args = TrainingArguments(output_dir=os.path.join(tmp, "t"), use_cpu=True, report_to=[],
                                 per_device_train_batch_size=16, num_train_epochs=1,
                                 learning_rate=1e-3, logging_steps=1, save_strategy="no", seed=3,
                                 dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=Reviews(),
                callbacks=[DebugkitCallback(a.out, flush_every_s=0.5)]).train()


if __name__ == "__main__":
    main()
