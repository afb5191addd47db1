"""Support tickets (token id sequences of 8 to 31 tokens) routed to 4 queues by a tiny
BertForSequenceClassification (built from a config, no download) under the Hugging Face
Trainer (shuffled batches of 8), with the script's own ``collate_tickets`` padding each
batch, and ``DebugkitCallback(run_dir, dataset_factory=...)``; the loop is the
Trainer's, so nothing is wrapped with ``w.track``. Ticket 57 came from a multi-queue
export: its ``queue`` is a list ``[2, 0]`` where every other ticket has one int, and
``collate_tickets`` raises ``ValueError`` while the Trainer's loader builds the batch that
serves it. The error leaves ``trainer.train()`` and ends the script: the callback's
``sys.excepthook`` captures it.

    python tests/scenarios/jobs/hf_tickets.py --out RUN
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

VOCAB, QUEUES, MAX_LEN = 40, 4, 32
MULTI_QUEUE = 57


class Tickets(Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.lengths = torch.randint(8, MAX_LEN, (n,), generator=g).tolist()
        self.ids = [torch.randint(1, VOCAB, (k,), generator=g) for k in self.lengths]

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        queue = [2, 0] if i == MULTI_QUEUE else int(self.ids[i][0]) % QUEUES
        return {"input_ids": self.ids[i], "queue": queue}


def make_dataset(n: int, seed: int) -> Tickets:
    return Tickets(n, seed)


def collate_tickets(samples):
    ids = pad_sequence([s["input_ids"] for s in samples], batch_first=True)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(),
            "labels": torch.tensor([s["queue"] for s in samples])}


def main(argv=None) -> None:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

    from debugkit.integrations.transformers import DebugkitCallback

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    set_seed(5)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=MAX_LEN + 2, num_labels=QUEUES))
    kwargs = {"n": 96, "seed": 4}
    with tempfile.TemporaryDirectory(prefix="hf-out-") as tmp:
        args = TrainingArguments(output_dir=os.path.join(tmp, "t"), use_cpu=True, report_to=[],
                                 per_device_train_batch_size=8, num_train_epochs=1,
                                 learning_rate=1e-3, logging_steps=1, save_strategy="no", seed=5,
                                 dataloader_num_workers=0, disable_tqdm=True,
                                 remove_unused_columns=False)
        Trainer(model=model, args=args, train_dataset=make_dataset(**kwargs),
                data_collator=collate_tickets,
                callbacks=[DebugkitCallback(a.out, flush_every_s=0.5,
                                            dataset_factory="hf_tickets:make_dataset",
                                            dataset_kwargs=kwargs)]).train()


if __name__ == "__main__":
    main()
