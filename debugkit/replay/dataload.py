"""Replay of a failure raised while the DataLoader fetched or collated a batch
(``data_loading`` captures): the captured samples are collated again in a child process
(:mod:`debugkit.replay.collate_child`) and the samples that cannot be batched with the
others are named, with their dataset indices and shapes; a sample whose re-read raised
at capture time is named from the capture."""

from __future__ import annotations

import os
from typing import Any

from ..analysis.findings import Check
from ..child_harness import run_child
from ..recorder.dataload import describe_leaves


def replay_data_loading(record: dict, *, timeout_s: float, cap: int | None, progress=None) -> dict:
    """The replay report of a ``data_loading`` capture (the shape of
    :func:`debugkit.replay.report.build_report`, plus ``data_loading``)."""
    info = record.get("data_loading") or {}
    samples = info.get("samples") or []
    usual = next((s["position"] for s in samples
                  if "leaves" in s and s["position"] not in (info.get("odd") or [])), 0)
    original = {"type": record.get("error_type"), "message": record.get("message"),
                "step": record.get("step")}
    notes, raw = [], None
    if (record.get("files") or {}).get("batch"):
        req = {"failure_dir": os.path.abspath(record["path"]), "collate_fn": info.get("collate_fn"),
               "usual_position": usual}
        outcome = run_child(req, timeout_s=timeout_s, memory_cap_bytes=cap,
                            on_progress=progress, module="debugkit.replay.collate_child")
        raw = outcome.raw
        if raw is None:
            notes.append(f"the collation child did not finish: {outcome.status}: {outcome.message}")
    else:
        notes.append("the capture holds no samples: " + str((record.get("capture_errors") or {})
                                                             .get("batch", "not captured")))
    by_pos = {s["position"]: s for s in samples}

    def name(pos):
        s = by_pos.get(pos) or {}
        return (f"sample {pos}" + (f" (dataset index {s['dataset_index']})"
                                   if s.get("dataset_index") is not None else ""))

    culprit: dict[str, Any] = {k: None for k in (
        "module", "op", "input", "sample_index", "dataset_index", "detail")}
    replay, checks, positions = None, [], []
    if info.get("phase") == "fetch":
        bad = by_pos.get((info.get("odd") or [None])[0]) or {}
        detail = (f"reading {name(bad.get('position'))} from the dataset raised {bad.get('error')} "
                  "(re-read when the failure was captured)")
        checks.append(Check("fetch", False, detail))
        culprit.update(op="dataset.__getitem__", sample_index=bad.get("position"),
                       dataset_index=bad.get("dataset_index"), detail=detail)
        positions = list(info.get("odd") or [])
    if raw and raw.get("ran"):
        err = raw.get("error")
        replay = dict(err, seconds=round(float(raw.get("seconds") or 0.0), 4)) if err else None
        odd = [o["position"] for o in raw.get("odd") or []]
        positions = positions or odd
        usual_s = by_pos.get(raw.get("usual")) or {}
        if err and odd:
            first = by_pos.get(odd[0]) or {}
            listed = "; ".join(f"{name(p)}: {describe_leaves((by_pos.get(p) or {}).get('leaves'))}"
                               for p in odd[:5]) + (f"; {len(odd) - 5} more" if len(odd) > 5 else "")
            detail = (f"{len(odd)} of {raw['n']} samples cannot be collated with {name(raw.get('usual'))} "
                      f"({describe_leaves(usual_s.get('leaves'))}): {listed}")
            checks.append(Check("collate", False, detail))
            culprit.update(op="collate", sample_index=first.get("position"),
                           dataset_index=first.get("dataset_index"), detail=detail)
        elif err:
            checks.append(Check("collate", False, f"collating the {raw['n']} samples raised "
                                                  f"{err['type']}: {err['message'].splitlines()[0]}; "
                                                  "every pair of samples collates"))
        else:
            checks.append(Check("collate", True, f"the {raw['n']} captured samples collate without "
                                                 "error: the failure came from elsewhere in the loader"))
    elif raw is not None:
        checks.append(Check("collate", None, f"not run: {raw.get('why')}"))
    ran = {"mode": "collate", "detail": f"the {len(samples)} captured samples collated again with "
                                        f"{info.get('collate_fn')}"}
    same = bool(replay and replay["type"] == original["type"])
    return {
        "failure": record.get("id"), "device": "cpu",
        "reproduced": bool(replay) or info.get("phase") == "fetch", "same_error": same,
        "original": original, "replay": replay, "culprit": culprit,
        "checks": [c.to_dict() for c in checks], "culprit_positions": positions, "ran": ran,
        "cross_check": None, "code": [], "notes": notes, "weights": {"from": "capture"},
        "data_loading": {"phase": info.get("phase"), "advice": info.get("advice"),
                         "collate_fn": info.get("collate_fn"), "odd_positions": positions,
                         "odd_dataset_indices": [(by_pos.get(p) or {}).get("dataset_index")
                                                 for p in positions]},
    }
