"""Every section of a comparison of two runs: :func:`compare_runs`, the entry point.
"""

from __future__ import annotations

from .code import diff_code
from .config import diff_config
from .data import diff_batch_spec, diff_datasets, diff_topology
from .divergence import compute_divergence, divergence_finding, following_event
from .environment import diff_environment
from .only_in import findings_only_in


def compare_runs(run: dict, base: dict, config: dict | None = None) -> dict:
    """The whole comparison, its sections in the order the page and command show them.

    Parameters
    ----------
    run, base : dict
        What :func:`debugkit.io.compare_facts.read_compare_facts` returns for each run, with
        ``findings`` (list of Finding) added.

    Returns
    -------
    dict ``{"run", "base", "before_step_0": {"config", "environment", "code", "data":
    {"datasets", "batch_spec"}, "topology"}, "divergence": {... of
    :func:`compute_divergence` without ``series``, "series": list of row dicts,
    "following", "finding"}, "findings": {"run": [...], "base": [...]}}``.
    """
    before = {
        "config": diff_config(run.get("config"), base.get("config")),
        "environment": diff_environment(run.get("env"), base.get("env")),
        "code": diff_code(run.get("code"), base.get("code"), run.get("code_text"),
                          base.get("code_text")),
        "data": {"datasets": diff_datasets(run.get("datasets"), base.get("datasets")),
                 "batch_spec": diff_batch_spec(run.get("batch_spec"), base.get("batch_spec"))},
        "topology": diff_topology(run.get("topology") or {}, base.get("topology") or {}),
    }
    div = compute_divergence(run["scalars"], run["grad_norms"], base["scalars"], base["grad_norms"],
                             config, layer_order=run.get("layers"))
    following = following_event(div["step"], run.get("failures") or [], run.get("findings") or [])
    finding = divergence_finding(div, following)
    series = div.pop("series")
    div["series"] = _records(series)
    div["following"] = following
    div["finding"] = finding.to_dict() if finding else None
    only = findings_only_in(run.get("findings") or [], base.get("findings") or [])
    return {"run": run.get("name"), "base": base.get("name"), "before_step_0": before,
            "divergence": div,
            "findings": {k: [f.to_dict() for f in v] for k, v in only.items()}}


def _records(df) -> list[dict]:
    out = []
    for r in df.to_dict("records"):
        out.append({k: (None if v is None or (not isinstance(v, str) and _isna(v)) else
                        (int(v) if k in ("step", "common_steps") else v)) for k, v in r.items()})
    return out


def _isna(v) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
