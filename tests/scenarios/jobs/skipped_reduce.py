"""Two ranks (torchrun, gloo, 20 s collective timeout) train replicas of a small
classifier on the same batches. Every step each rank reduces its loss and accuracy with
``all_reduce`` (inside ``rec.comm()``), then reduces its precision and recall for the log
with a second ``all_reduce``. At step 9, rank 0's predictions hold no positive class,
and its metric code returns early ("precision is undefined"): rank 0 skips the second
``all_reduce`` of step 9 only. gloo pairs collectives by order, so nothing fails there;
the ranks run on out of step, and at the last step (19) rank 1 waits for an
``all_reduce`` that rank 0 never calls, until rank 0 exits (or the timeout).

    torchrun --nproc_per_node 2 tests/scenarios/jobs/skipped_reduce.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from debugkit import Recorder  # noqa: E402

STEPS, NO_POSITIVES_AT = 20, 9


def precision_recall(pred, y, rank, step):
    """Precision and recall of class 1, or None when they are undefined (no positive
    prediction); on rank 0 at step 9 the predictions hold none."""
    if rank == 0 and step == NO_POSITIVES_AT:
        pred = torch.zeros_like(pred)
    tp = ((pred == 1) & (y == 1)).sum()
    if (pred == 1).sum() == 0:
        return None
    return torch.stack([tp / (pred == 1).sum(), tp / (y == 1).sum().clamp(min=1)]).float()


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-skipped-reduce", flush_every_s=0.5)
    g = torch.Generator().manual_seed(11)  # both ranks draw the same batches: replicas agree
    with rec:
        for step in range(STEPS):
            x = torch.randn(64, 6, generator=g)
            y = (x[:, 1] + x[:, 2] > 0).long()
            with rec.step((x, y)):
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                stats = torch.stack([loss.detach(), (out.argmax(1) == y).float().mean()])
                with rec.comm():
                    dist.all_reduce(stats)
                pr = precision_recall(out.argmax(1), y, rank, step)
                if pr is not None:  # the metric is skipped when undefined: on one rank only
                    with rec.comm():
                        dist.all_reduce(pr)
                rec.log(loss=loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
