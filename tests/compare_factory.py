"""Pairs of real runs for the comparison tests, recorded by examples/digits_compare.py.

``record_pairs(folder)`` trains (in this process, single-threaded, 60 steps each):
``base`` (lr 0.1, seed 0), ``same`` (the same arguments again: bit-identical), ``lr`` (lr
0.5) and ``unlabelled`` (a quarter of the labels exported as ignore_index -100).
"""

from __future__ import annotations

from pathlib import Path

RUNS = {
    "base": {},
    "same": {},
    "lr": {"lr": 0.5},
    "unlabelled": {"unlabelled": 0.25},
}


def record_pairs(folder: Path) -> dict[str, Path]:
    import torch

    from examples.digits_compare import train

    threads = torch.get_num_threads()
    out = {}
    try:
        for name, kwargs in RUNS.items():
            out[name] = Path(folder) / name
            train(str(out[name]), **kwargs)
    finally:
        torch.set_num_threads(threads)
    return out


def facts(path, findings=True) -> dict:
    """What compare_runs reads from one run (with its findings)."""
    from debugkit.diagnose import diagnose
    from debugkit.io.compare_facts import read_compare_facts
    from debugkit.io.run import open_run

    r = open_run(path)
    f = read_compare_facts(r)
    f["findings"] = diagnose(r) if findings else []
    return f
