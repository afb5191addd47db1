"""How much a debugkit replay costs next to re-running the failing step by hand.

Two measurements, side by side in this one script:

1. End to end, on the sample ``digits-bad-label``: ``debugkit.replay.replay()`` (checks
   the capture and its code, starts a child process, runs the step with probes and
   anomaly detection, builds the report) against what a user would otherwise do:
   run a plain script that rebuilds the model, loads the captured state and batch and
   runs the step (the exported ``repro.py``, plain torch, in a fresh interpreter).
2. The step alone, in this process, on a mid-sized transformer encoder: a plain
   forward + backward against the same step under debugkit's probes, with and
   without anomaly detection.

    python bench/replay_overhead.py [--repeats 5]

Prints medians and ratios. Wall-clock numbers on a shared machine are noisy: compare
the ratios.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def end_to_end(repeats: int) -> None:
    from debugkit.io.run import open_run
    from debugkit.replay import plan_identities, replay
    from debugkit.replay.repro import build_repro

    sample = ROOT / "sample_runs" / "digits-bad-label"
    run = open_run(sample)
    rec = run.failures()[0]
    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-"))
    zipfile.ZipFile(io.BytesIO(build_repro(run, rec, plan_identities(run, rec)))).extractall(tmp)
    script = tmp / f"{rec['id']}-repro" / "repro.py"

    def by_hand():
        subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True,
                       timeout=600, cwd=script.parent)

    def with_debugkit():
        rep = replay(run, device="cpu")
        assert rep["culprit"]["sample_index"] == 6

    by_hand()  # warm the file cache for both
    t_hand = median_time(by_hand, repeats)
    t_dk = median_time(with_debugkit, repeats)
    print(f"end to end, digits-bad-label, {repeats} runs each:")
    print(f"  re-run the step by hand (plain repro.py): median {t_hand:.2f} s")
    print(f"  debugkit replay (child + probes + report): median {t_dk:.2f} s")
    print(f"  ratio debugkit / by hand: {t_dk / t_hand:.2f}x")


def step_overhead(repeats: int) -> None:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from debugkit.replay.child import run_pass
    from debugkit.replay.probes import Probe

    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(1000, 128)
            layer = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(128, 10)

        def forward(self, ids):
            return self.head(self.encoder(self.embed(ids)).mean(dim=1))

    model = Classifier()
    batch = (torch.randint(0, 1000, (16, 64)), torch.randint(0, 10, (16,)))
    n_modules = sum(1 for _ in model.modules())

    def plain():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(batch[0]), batch[1]).backward()

    refs = {t.untyped_storage().data_ptr(): (i,) for i, t in enumerate(batch)}
    probe = Probe(model, refs, 16)

    def probed(anomaly):
        probe.install()
        out = run_pass(model, batch, "cross_entropy", None, probe, torch.device("cpu"), anomaly=anomaly)
        probe.remove()
        assert out["error"] is None

    plain()
    t_plain = median_time(plain, repeats * 2)
    t_probe = median_time(lambda: probed(False), repeats * 2)
    t_anom = median_time(lambda: probed(True), repeats * 2)
    print(f"one step, 2-layer transformer encoder ({n_modules} modules), batch 16x64, 1 thread, "
          f"{repeats * 2} runs each:")
    print(f"  plain forward + backward:            median {t_plain * 1000:.1f} ms")
    print(f"  with debugkit's probes:              median {t_probe * 1000:.1f} ms "
          f"({t_probe / t_plain:.2f}x)")
    print(f"  with probes and anomaly detection:   median {t_anom * 1000:.1f} ms "
          f"({t_anom / t_plain:.2f}x)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    step_overhead(a.repeats)
    end_to_end(a.repeats)


if __name__ == "__main__":
    main()
