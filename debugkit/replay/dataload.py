"""Replay of a failure raised while the DataLoader fetched or collated a batch
(``data_loading`` captures), in a child process (:mod:`debugkit.replay.collate_child`).

When the run named the dataset's factory (``rec.track(loader, dataset_factory=...)``),
the dataset is rebuilt from that code (verified by its SHA-256 and allowed by the
viewer's code roots, exactly as a model factory: :mod:`debugkit.replay.code`,
:mod:`debugkit.replay.policy`), the batch's dataset indices are fetched from it again and
compared with the captured samples (a difference is itself a finding: the dataset changed
since the run), and the re-fetched batch is collated again. Without a factory (or when
its code may not run), the captured samples are collated instead, and the report says
what to pass. The collate function is torch's own, or the run's module-level
``collate_fn`` when its file's SHA-256 was recorded and verifies. The samples that cannot
be batched with the others are named, with their dataset indices and shapes; a sample
whose read raised is named from the capture (or from the re-fetch).
"""

from __future__ import annotations

import os
from typing import Any

from ..analysis.findings import Check
from ..child_harness import run_child
from ..recorder.dataload import describe_leaves
from .code import default_search_path, identify
from .collate_child import TORCH_COLLATE
from .policy import check_plain_kwargs, cli_code_roots

#: Said when a capture names no dataset factory: how to get a re-fetch.
MSG_NO_DATASET_FACTORY = (
    "the samples were not fetched again: the capture records no dataset_factory, so the replay "
    "collated the samples re-read from the dataset when the failure was captured; to have replay "
    "rebuild the dataset and fetch these indices again, record with "
    "rec.track(loader, dataset_factory='module:callable', dataset_kwargs={...}) (dataset_factory= "
    "of the Lightning and Hugging Face callbacks)")
MSG_DATASET_REFUSED = ("the dataset was not rebuilt ({message}): the replay collated the samples "
                       "captured at the failure instead")
MSG_REFETCH_CHANGED = ("the dataset changed since the run: {n} of {total} re-fetched samples differ "
                       "from the captured ones ({listed}); the replay collated the re-fetched samples")
MSG_REFETCH_SAME = ("the {n} samples fetched again from {spec} (dataset indices {indices}) equal the "
                    "captured ones")


def _short(indices: list) -> str:
    return ", ".join(str(i) for i in indices[:8]) + (f" ... ({len(indices)})" if len(indices) > 8 else "")


def plan_code(record: dict, *, code_roots=None, allow_code: bool = False, search_path=None,
              import_roots=(), hint: str | None = None, refetch: bool = True):
    """The code a data-loading replay would run: ``(dataset, collate, notes, why_not)``,
    the :class:`~debugkit.replay.code.CodeIdentity` of the dataset factory and of the
    collate function when they may run (else None), notes on the dataset, and why the
    collate function may not run (None when it may, or is torch's own)."""
    code = record.get("code") or {}
    info = record.get("data_loading") or {}
    roots = cli_code_roots() if code_roots is None else list(code_roots)
    if search_path is None:
        search_path = default_search_path(code, [os.path.abspath(p) for p in import_roots])
    notes: list[str] = []
    dataset = collate = why_not = None
    if not code.get("dataset_factory"):
        notes.append(MSG_NO_DATASET_FACTORY)
    elif refetch:
        ident = identify("dataset_factory", code["dataset_factory"], None, search_path, roots, hint)
        if ident.may_run(allow_code):
            dataset = ident
        else:
            notes.append(MSG_DATASET_REFUSED.format(message=ident.message))
    spec = info.get("collate_fn")
    if code.get("collate_fn") and spec not in TORCH_COLLATE:
        ident = identify("collate_fn", code["collate_fn"], None, search_path, roots, hint)
        if ident.may_run(allow_code):
            collate = ident
        else:
            why_not = ident.message
    return dataset, collate, notes, why_not


def replay_data_loading(record: dict, *, timeout_s: float, cap: int | None, progress=None,
                        code_roots=None, allow_code: bool = False, search_path=None,
                        import_roots=(), hint: str | None = None, refetch: bool = True) -> dict:
    """The replay report of a ``data_loading`` capture (the shape of
    :func:`debugkit.replay.report.build_report`, plus ``data_loading``).

    ``code_roots``, ``allow_code``, ``search_path``, ``import_roots`` and ``hint`` decide
    whether the capture's dataset factory and collate function may run, as for a model
    replay (:func:`debugkit.replay.replay`); ``refetch=False`` never rebuilds the dataset
    (the dashboard, where a visitor has not trusted the run's code).
    """
    info = record.get("data_loading") or {}
    samples = info.get("samples") or []
    usual = next((s["position"] for s in samples
                  if "leaves" in s and s["position"] not in (info.get("odd") or [])), 0)
    original = {"type": record.get("error_type"), "message": record.get("message"),
                "step": record.get("step")}
    raw = None
    ds_ident, col_ident, notes, col_refused = plan_code(record, code_roots=code_roots, allow_code=allow_code,
                                           search_path=search_path, import_roots=import_roots,
                                           hint=hint, refetch=refetch)
    roots = cli_code_roots() if code_roots is None else list(code_roots)
    if (record.get("files") or {}).get("batch"):
        idents = [i for i in (ds_ident, col_ident) if i is not None]
        req = {"failure_dir": os.path.abspath(record["path"]), "collate_fn": info.get("collate_fn"),
               "usual_position": usual, "collate_why_not": col_refused or info.get("collate_fn_not_replayable"),
               "dataset": ds_ident.to_dict() if ds_ident else None,
               "collate": col_ident.to_dict() if col_ident else None,
               "dataset_kwargs": check_plain_kwargs(info.get("dataset_kwargs") or {}, record["path"]),
               "indices": record.get("dataset_indices") or [],
               "code_roots": [str(r) for r in roots], "allow_code": bool(allow_code),
               "sys_path": list(dict.fromkeys([i.search_root for i in idents if i.search_root]
                                              + [os.path.abspath(p) for p in import_roots]
                                              + [os.getcwd()]))}
        # The working directory is the command's, so that a dataset's relative paths
        # resolve as they did for a run started from the same folder.
        outcome = run_child(req, timeout_s=timeout_s, memory_cap_bytes=cap, on_progress=progress,
                            module="debugkit.replay.collate_child",
                            cwd=os.getcwd() if ds_ident else None)
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
    rf = (raw or {}).get("refetch")
    which = "re-fetched" if rf and rf.get("ran") else "captured"
    if rf and not rf.get("ran"):
        notes.append(f"the dataset was not rebuilt: {rf.get('why')}")
    elif rf:
        listed = "; ".join(f"{name(m['position'])}: {m['what']}" for m in rf["mismatched"][:3]) + \
            (f"; {len(rf['mismatched']) - 3} more" if len(rf["mismatched"]) > 3 else "")
        checks.append(Check("refetch", not rf["mismatched"],
                            MSG_REFETCH_CHANGED.format(n=len(rf["mismatched"]), total=rf["n"], listed=listed)
                            if rf["mismatched"] else
                            MSG_REFETCH_SAME.format(n=rf["n"], spec=rf["spec"],
                                                    indices=_short(record.get("dataset_indices") or []))))
        if rf["errors"]:
            bad = rf["errors"][0]
            detail = (f"reading {name(bad['position'])} from the rebuilt dataset raised "
                      f"{bad['type']}: {bad['message'].splitlines()[0] if bad['message'] else ''}")
            checks[:] = [c for c in checks if c.name != "fetch"]
            checks.append(Check("fetch", False, detail))
            culprit.update(op="dataset.__getitem__", sample_index=bad["position"],
                           dataset_index=bad["dataset_index"], detail=detail)
            positions = [e["position"] for e in rf["errors"]]
    if raw and raw.get("ran"):
        err = raw.get("error")
        replay = dict(err, seconds=round(float(raw.get("seconds") or 0.0), 4)) if err else None
        odd = [o["position"] for o in raw.get("odd") or []]
        positions = positions or odd
        # the leaves of the samples that were collated (the re-fetched ones, when fetched again)
        leaves = {o["position"]: o.get("leaves") for o in raw.get("odd") or []} if rf else \
            {p: (by_pos.get(p) or {}).get("leaves") for p in odd}
        usual_leaves = raw.get("usual_leaves") if rf else (by_pos.get(raw.get("usual")) or {}).get("leaves")
        if err and odd:
            first = by_pos.get(odd[0]) or {}
            listed = "; ".join(f"{name(p)}: {describe_leaves(leaves.get(p))}"
                               for p in odd[:5]) + (f"; {len(odd) - 5} more" if len(odd) > 5 else "")
            detail = (f"{len(odd)} of {raw['n']} samples cannot be collated with {name(raw.get('usual'))} "
                      f"({describe_leaves(usual_leaves)}): {listed}")
            checks.append(Check("collate", False, detail))
            culprit.update(op="collate", sample_index=first.get("position"),
                           dataset_index=first.get("dataset_index"), detail=detail)
        elif err:
            checks.append(Check("collate", False, f"collating the {raw['n']} samples raised "
                                                  f"{err['type']}: {err['message'].splitlines()[0]}; "
                                                  "every pair of samples collates"))
        else:
            checks.append(Check("collate", True, f"the {raw['n']} {which} samples collate without "
                                                 "error: " + ("the batch the dataset serves now is fine"
                                                              if rf and rf["mismatched"] else
                                                              "the failure came from elsewhere in the loader")))
    elif raw is not None and not (rf and rf.get("errors")):
        checks.append(Check("collate", None, f"not run: {raw.get('why')}"))
    if rf and rf.get("ran"):
        kw = ", ".join(f"{k}={v!r}" for k, v in (rf.get("kwargs") or {}).items())
        ran = {"mode": "refetch", "detail": f"dataset indices {_short(record.get('dataset_indices') or [])} "
                                            f"fetched again from {rf['spec']}({kw}) and collated with "
                                            f"{info.get('collate_fn')}"}
    else:
        ran = {"mode": "collate", "detail": f"the {len(samples)} captured samples collated again with "
                                            f"{info.get('collate_fn')}"}
    same = bool(replay and replay["type"] == original["type"])
    fetch_failed = bool(rf["errors"]) if rf and rf.get("ran") else info.get("phase") == "fetch"
    return {
        "failure": record.get("id"), "device": "cpu",
        "reproduced": bool(replay) or fetch_failed, "same_error": same,
        "original": original, "replay": replay, "culprit": culprit,
        "checks": [c.to_dict() for c in checks], "culprit_positions": positions, "ran": ran,
        "cross_check": None, "code": [], "notes": notes, "weights": {"from": "capture"},
        "data_loading": {"phase": info.get("phase"), "advice": info.get("advice"),
                         "collate_fn": info.get("collate_fn"), "odd_positions": positions,
                         "odd_dataset_indices": [(by_pos.get(p) or {}).get("dataset_index")
                                                 for p in positions],
                         "refetch": rf, "dataset_factory": (ds_ident.spec if ds_ident else None),
                         "collate_fn_run": bool(raw and raw.get("ran"))},
    }
