"""Benchmark: reading and viewing a large PyTorch memory snapshot.

debugkit's way: the restricted unpickler, the columnar parse, and the aggregated views
(active memory by site, largest at the peak, alive at the end by site, segments at the
end), turned into the plotly figures the page sends to the browser.

A second open of the same file reads the parsed tables from debugkit's cache.

The usual way: ``pickle.load`` (unrestricted: it runs whatever the file asks) and
``torch.cuda._memory_viz.trace_plot``, the offline form of pytorch.org/memory_viz, which
re-encodes the whole snapshot into an HTML page for its JavaScript viewer to parse in
the browser.

Both run side by side in this process on the same synthetic snapshot (PyTorch's layout,
see tests/memsnap_factory.py), repeated; the script prints medians and ratios, and the
bytes each way hands to the browser.

    python bench/memory_snapshot.py                 # 1,000,000 trace events
    python bench/memory_snapshot.py --events 3000000 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def debugkit_way(path: Path, cache: bool = False) -> tuple[int, dict]:
    from debugkit.analysis import memsnap as ms
    from debugkit.charts.memory import (
        build_largest_allocations_figure,
        build_leaked_sites_figure,
        build_segments_figure,
        build_snapshot_timeline_figure,
    )
    from debugkit.io.memsnap import read_snapshot

    t = {}
    t0 = time.perf_counter()
    snap = read_snapshot(path, cache=cache)
    t["read+parse"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    sites = ms.site_labels(snap.stacks)
    allocs = ms.compute_allocations(snap, 0)
    tl = ms.compute_active_timeline(snap, 0, sites=sites, allocs=allocs)
    peak, largest = ms.compute_largest_at_peak(snap, 0, sites=sites, allocs=allocs)
    leaked = ms.compute_leaked_by_site(snap, 0, sites=sites, allocs=allocs)
    segs, blocks = ms.compute_segments_at(snap, 0, sites=sites)
    rows, z = ms.compute_segment_occupancy(segs, blocks)
    t["aggregate"] = time.perf_counter() - t1
    figs = [build_snapshot_timeline_figure(tl, peak=peak), build_largest_allocations_figure(largest),
            build_leaked_sites_figure(leaked), build_segments_figure(rows, z)]
    payload = sum(len(f.to_json()) for f in figs)
    t["total"] = time.perf_counter() - t0
    return payload, t


def torch_way(path: Path) -> tuple[int, dict]:
    from torch.cuda import _memory_viz

    t = {}
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = pickle.load(f)  # what the usual tools do: an unrestricted load
    t["read"] = time.perf_counter() - t0
    html = _memory_viz.trace_plot(data)
    t["total"] = time.perf_counter() - t0
    return len(html), t


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--sites", type=int, default=60)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    from tests.memsnap_factory import leaky_training, synthetic_large_snapshot

    # Warm up both ways on a small snapshot so neither pays first imports in the timing.
    with tempfile.TemporaryDirectory() as d:
        small = Path(d) / "small.pickle"
        leaky_training(5).dump(small)
        debugkit_way(small)
        torch_way(small)

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "snapshot.pickle"
        data = synthetic_large_snapshot(events=a.events, sites=a.sites)
        with open(path, "wb") as f:
            pickle.dump(data, f)
        del data
        gc.collect()
        size = path.stat().st_size
        print(f"snapshot: {a.events:,} trace events, {size / 2**20:.1f} MiB pickle "
              f"(PyTorch's layout); {a.repeat} repeats, medians")
        os.environ["DEBUGKIT_CACHE"] = str(Path(d) / "cache")
        dk, tw, warm = [], [], []
        for _ in range(a.repeat):
            gc.collect()
            dk.append(debugkit_way(path))
            gc.collect()
            tw.append(torch_way(path))
        debugkit_way(path, cache=True)  # fills the parsed-table cache
        for _ in range(a.repeat):
            gc.collect()
            warm.append(debugkit_way(path, cache=True))
        med = lambda runs, k: statistics.median(r[1][k] for r in runs)  # noqa: E731
        dk_total, tw_total = med(dk, "total"), med(tw, "total")
        print(f"debugkit  read+parse {med(dk, 'read+parse'):7.2f} s   aggregate {med(dk, 'aggregate'):6.2f} s"
              f"   total {dk_total:7.2f} s   to the browser {dk[0][0] / 2**10:9.1f} KiB (4 figures)")
        print(f"torch     pickle.load {med(tw, 'read'):6.2f} s   trace_plot               "
              f"   total {tw_total:7.2f} s   to the browser {tw[0][0] / 2**10:9.1f} KiB (HTML + JS viewer)")
        print(f"debugkit  reopened: read {med(warm, 'read+parse'):7.2f} s (parsed tables from the cache)"
              f"   total {med(warm, 'total'):7.2f} s")
        print(f"ratio     time debugkit/torch {dk_total / tw_total:.2f}x first open, "
              f"{med(warm, 'total') / tw_total:.2f}x reopened   "
              f"browser payload torch/debugkit {tw[0][0] / max(dk[0][0], 1):.0f}x smaller with debugkit")
        print("note: the torch page's JavaScript then parses the whole snapshot in the browser; "
              "debugkit's figures are already aggregated. Machine: shared, 2 cores.")


if __name__ == "__main__":
    main()
