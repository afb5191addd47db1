"""Child process for the crash-safety tests: records steps, reporting progress.

``_crash_child.py RUN_DIR FLUSH_S [MODE]``

- ``flushes`` (default): records forever; after every step it prints ``step N``, and
  every 5th step it forces a flush and prints ``flushed N`` (every row up to step N is
  on disk from then on).
- ``no-flushes``: records forever, printing ``step N``, with no forced flush (the rows
  reach disk every FLUSH_S, or when the process ends cleanly or by SIGTERM).
- ``own-handler``: as ``no-flushes``, with the program's own SIGTERM handler installed
  before the Recorder (it prints ``own handler`` and exits with status 3).
- ``torn-flush``: 5 steps, a flush, 5 more steps, then a flush during which the process
  dies (``os._exit(9)``) right after the first table's rows are written.
- ``term-in-flush``: 10 steps, then a flush of the training thread during which SIGTERM
  arrives, right after the first table's rows are written.
- ``term-in-close``: 10 steps, then ``rec.close()``, during whose last flush SIGTERM
  arrives, right after the first table's rows are written (torchrun stopping a rank that
  is closing its Recorder).
"""

import os
import signal
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from debugkit import Recorder

run_dir, flush_s = sys.argv[1], float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "flushes"
if mode == "own-handler":
    def own(signum, frame):
        print("own handler", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, own)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rec = Recorder(run_dir, model, optimizer=opt, flush_every_s=flush_s)
print("started", flush=True)


def train(first: int, last: int | None = None, *, flush_every: int | None = None) -> None:
    step = first
    while last is None or step < last:
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        with rec.step((x, y)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            opt.step()
        print(f"step {step}", flush=True)
        if flush_every and step % flush_every == flush_every - 1:
            rec._writer.flush()
            print(f"flushed {step}", flush=True)
        step += 1


if mode == "torn-flush":
    from debugkit.recorder import writer

    train(0, 5)
    rec._writer.flush()
    train(5, 10)
    original = writer.RankWriter._write_rows

    def write_one_table_then_die(self, table, rows):
        original(self, table, rows)
        os._exit(9)  # the process dies between two tables' writes of one flush

    writer.RankWriter._write_rows = write_one_table_then_die
    rec._writer.flush()
elif mode in ("term-in-flush", "term-in-close"):
    from debugkit.recorder import writer

    train(0, 10)
    original = writer.RankWriter._write_rows
    sent = []

    def write_one_table_then_term(self, table, rows):
        original(self, table, rows)
        if not sent:
            sent.append(table)
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, inside the flush

    writer.RankWriter._write_rows = write_one_table_then_term
    if mode == "term-in-flush":
        rec._writer.flush()
    else:
        rec.close()
    print("returned", flush=True)
else:
    train(0, flush_every=5 if mode == "flushes" else None)
