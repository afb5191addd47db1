"""Benchmark: what recording the facts ``debugkit compare`` needs costs a run, once, at start.

    python bench/compare_record_cost.py [--repeat 15]

Interleaved in one process, ``--repeat`` times each, medians printed:

- the new start-of-run facts: every installed distribution (importlib.metadata), the
  hardware (/proc/cpuinfo, the NVIDIA driver file), the OS (/etc/os-release), NCCL's
  version; and the dataset fingerprint of ``rec.track`` (16 sampled items of the digits
  training set);
- what they are measured against: the short package list debugkit recorded before
  (``package_versions()``, 14 names), the usual way of listing every distribution
  (``importlib.metadata.distributions()`` parsing each METADATA file), the whole
  ``collect_env()`` a Recorder start calls, and one training step of the digits MLP
  (batch 32).

Times are wall-clock on whatever machine runs this; a shared machine makes them noisy,
so compare the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=15)
    a = p.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from debugkit.recorder import env
    from debugkit.recorder.datafp import describe_dataset
    from examples.digits import DigitsDataset, build_model, load_splits

    (x, y), _ = load_splits(0)
    data = DigitsDataset(x, y)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xb, yb = data.x[:32], data.y[:32]

    def step():
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def metadata_parse():  # the usual way: parse every distribution's METADATA
        import re
        from importlib import metadata

        out = {}
        for d in metadata.distributions():
            out.setdefault(re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(), d.version)
        return out

    cases = {
        "all distributions": env.all_distributions,
        "hardware + os + nccl": lambda: (env.hardware(), env.os_info(), env.nccl_version()),
        "dataset fingerprint (16 items)": lambda: describe_dataset(data),
        "usual: importlib.metadata parse": metadata_parse,
        "old: package_versions() (14)": env.package_versions,
        "collect_env() (all of the env)": env.collect_env,
        "one training step": step,
    }
    for fn in cases.values():  # warm-up: imports, page cache
        fn()
    times = {k: [] for k in cases}
    for _ in range(a.repeat):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'what':34s} {'median ms':>10s}")
    for k, v in med.items():
        print(f"{k:34s} {v * 1e3:10.2f}")
    new = med["all distributions"] + med["hardware + os + nccl"] + med["dataset fingerprint (16 items)"]
    print(f"\nnew facts, once per run: {new * 1e3:.1f} ms = "
          f"{new / med['one training step']:.2f} training steps of the digits MLP")
    print(f"all distributions, read from folder names vs parsing METADATA: "
          f"{med['usual: importlib.metadata parse'] / med['all distributions']:.1f}x faster "
          f"(same {len(env.all_distributions())} names and versions: "
          f"{env.all_distributions() == metadata_parse()})")


if __name__ == "__main__":
    main()
