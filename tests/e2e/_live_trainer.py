"""A training script for the live-page browser tests: a real Recorder (per-layer gradient
norms, losses, memory, layer statistics, checkpoints) on a tiny model, trained in phases.

``python -m tests.e2e._live_trainer RUN_DIR GATE_DIR PHASES``: 10 steps, then for each of
the PHASES gates, waits until ``GATE_DIR/go<k>`` exists and trains 5 more steps
(a checkpoint after each phase); then waits for ``GATE_DIR/stop`` and closes the run.
Started once per rank with ``RANK``/``WORLD_SIZE`` set, as torchrun would.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from debugkit import Recorder


def _wait(path: Path, limit_s: float = 900) -> bool:
    """Wait for ``path``; False when ``stop`` appeared first (the test is over)."""
    deadline = time.time() + limit_s
    while not path.exists():
        if (path.parent / "stop").exists():
            return False
        if time.time() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.1)
    return True


def main(run_dir: str, gate_dir: str, phases: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gates = Path(gate_dir)
    with Recorder(run_dir, model, optimizer=opt, flush_every_s=0.3, layer_stats_every=1,
                  tags=["live"]) as rec:
        def train(n):
            for _ in range(n):
                x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
                with rec.step((x, y)):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    rec.log(loss=loss)
            rec.checkpoint()

        train(10)
        for k in range(1, phases + 1):
            if not _wait(gates / f"go{k}"):
                return
            train(5)
        _wait(gates / "stop")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
