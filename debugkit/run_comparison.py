"""Open two runs and compare them: the engine behind ``debugkit compare`` and the Compare page.

Reading is :mod:`debugkit.io.compare_facts`, the comparison :mod:`debugkit.analysis.run_diff`,
the findings of each run :func:`debugkit.diagnose.diagnose`.
"""

from __future__ import annotations


def compare_paths(run_path: str, base_path: str, config: dict | None = None) -> dict:
    """Open both runs and compare them (the result of
    :func:`debugkit.analysis.run_diff.compare_runs`, plus both paths and statuses)."""
    from .analysis.run_diff import compare_runs
    from .diagnose import diagnose
    from .io.compare_facts import read_compare_facts
    from .io.run import open_run

    facts = []
    for p in (run_path, base_path):
        r = open_run(p)
        f = read_compare_facts(r)
        f["findings"] = diagnose(r)
        facts.append(f)
    out = compare_runs(facts[0], facts[1], config)
    out["paths"] = {"run": facts[0]["path"], "base": facts[1]["path"]}
    out["statuses"] = {"run": facts[0]["status"], "base": facts[1]["status"]}
    return out
