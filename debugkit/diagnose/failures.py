"""``step_failure`` findings: one per failure capture."""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.lost_ranks import describe_collective_error, parse_collective_error


def collect(run, config: dict) -> list[Finding]:
    out = []
    for f in run.failures():
        kind = f.get("kind")
        etype = f.get("error_type") or ("non-finite values" if kind == "nonfinite" else kind)
        msg = (f.get("message") or "").strip().splitlines()
        first = msg[0] if msg else ""
        coll = parse_collective_error(f.get("message"), f.get("traceback"))
        if coll is not None:
            first += f" [{describe_collective_error(coll)}]"
        out.append(Finding(
            kind="step_failure", step=f.get("step"), rank=f.get("rank"), layer=None,
            severity="error" if kind != "nonfinite" else "warning",
            message=f"Step {f.get('step')} on rank {f.get('rank')} failed with {etype}: {first} "
                    f"(capture {f['id']}; replay it with `debugkit replay`).",
            evidence={"failure": f["id"], "capture_kind": kind, "error_type": f.get("error_type"),
                      "dataset_indices": f.get("dataset_indices"), "collective": coll},
        ))
    return out
