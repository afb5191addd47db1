"""The Recorder's step cost, attributed end to end by switching its parts off one at a time.

``bench/recorder_overhead.py --breakdown`` times each part in place, with wrappers that
cost too. This script instead runs copies of the same training loop (the small model of
``bench/recorder_overhead.py``: 24 x Linear(128)+ReLU, batch 32, one torch thread),
interleaved, and reports each one's median step against the bare loop and against the
bare loop plus the fused norm alone:

- ``bare``: forward, backward, SGD step
- ``norms``: bare + ``torch.stack(torch._foreach_norm(grads)).tolist()``
- ``dk``: bare inside ``rec.step`` with ``rec.log(loss=...)`` (the Recorder as shipped)
- ``dk_barenorm``: ``dk`` with the Recorder's ``GradNormComputer`` replaced by the bare fused norm
- ``dk_norng``: ``dk`` without the RNG state taken at the step's start
- ``dk_nolog``: ``dk`` without ``rec.log(loss=...)``
- ``dk_nonorm``: ``dk`` with no norms at all (the Recorder's own bookkeeping)

The switched-off variants are for attribution only: they patch the Recorder's internals.
Use 10 rounds or more: a new Recorder does its start-of-run work (the pip check, the
environment record) on a background thread during its first seconds, which a 2-round run
charges to the Recorder variants (6 ms steps instead of 2 ms here).

    python bench/recorder_parts.py [ROUNDS]
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch.nn.functional as F

torch.set_num_threads(1)
from recorder_overhead import build  # the same small model (this folder is on sys.path)

import debugkit.recorder.recorder as R
from debugkit import Recorder

x = torch.randn(32, 128); y = torch.randint(0, 10, (32,))
names = ["bare", "norms", "dk", "dk_barenorm", "dk_norng", "dk_nolog", "dk_nonorm"]
models = {k: build() for k in names}; opts = {k: torch.optim.SGD(models[k].parameters(), lr=1e-3) for k in names}
params = {k: list(models[k].parameters()) for k in names}
tmp = tempfile.mkdtemp()
recs = {k: Recorder(f"{tmp}/{k}", models[k], optimizer=opts[k]) for k in names if k.startswith("dk")}
recs["dk_barenorm"]._norms.compute = lambda p=params["dk_barenorm"]: torch.stack(torch._foreach_norm([q.grad for q in p])).tolist() + [0.0]
_n_nonorm = len(params["dk_nonorm"]) + 1
recs["dk_nonorm"]._norms.compute = lambda: [0.0] * _n_nonorm
orig_rng = R.take_rng_state
def step(k):
    m, o = models[k], opts[k]
    if k == "bare" or k == "norms":
        loss = F.cross_entropy(m(x), y); o.zero_grad(); loss.backward()
        if k == "norms": torch.stack(torch._foreach_norm([p.grad for p in params[k]])).tolist()
        o.step(); return
    rec = recs[k]
    R.take_rng_state = (lambda: None) if k == "dk_norng" else orig_rng
    with rec.step((x, y)):
        loss = F.cross_entropy(m(x), y); o.zero_grad(); loss.backward()
        if k != "dk_nolog": rec.log(loss=loss)
        o.step()
for k in names:
    for _ in range(20): step(k)
times = {k: [] for k in names}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 10):
    for k in (names if r % 2 == 0 else names[::-1]):
        t = time.perf_counter()
        for _ in range(50): step(k)
        times[k].append((time.perf_counter() - t) / 50)
base = statistics.median(times["bare"]); nb = statistics.median(times["norms"])
for k in names:
    md = statistics.median(times[k])
    print(f"{k:12s} {md*1e3:.3f} ms  +{(md/base-1)*100:5.1f}%  vs norms {(md-nb)*1e6:+6.1f} us")
for r in recs.values(): r.close()
