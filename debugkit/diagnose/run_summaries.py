"""A persisted index of what each run's analyses found, for run lists (the Home page).

Diagnosing a run reads its tables and runs every detector: fine for one run, too slow to
redo for every run of a store at every page view (or in every new server process). The
index keeps, per run, the row a run list shows (status, steps, failures, finding counts,
the most severe finding) in one small JSON file under the cache folder
(``$DEBUGKIT_CACHE/index/``), keyed on a digest of the run's own files (relative path,
size, modification stamp of each): a run that changes (a live run's appends, a new
failure capture, an edited manifest) is analysed again; one that does not is read back.
Nothing is written into the run folders. Each entry also keeps what every diagnose source
found (:func:`cached_findings`), so a dashboard page opened on a new server shows a run's
findings without running the detectors (or importing torch for a capture's batch) again.

The signatures of all the runs under a root come from one listing of the root
(:func:`store_signatures`): on an object store (an fsspec URL) that is one ``find``
instead of one per run.

Only ``running`` depends on more than the files (a writer that stops beating its
heartbeat becomes ``crashed`` without changing a file), so a row cached as running has
its status read again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from .. import format as fmt
from .._fsutil import atomic_write_json
from .._version import __version__
from ..errors import MSG_RUN_UNEXPECTED, DebugkitError
from ..io.fs import as_path, is_local, list_tree, stamp_of, stat_files
from ..objcache import prefetch_many

log = logging.getLogger(__name__)

INDEX_VERSION = 4  # 2: rows carry started, duration_s, tags and top_kind/_step/_layer;
#                    3: kind, requests and error_rate (inference runs);
#                    4: entries carry each source's findings (:func:`cached_findings`)
INDEX_DIR = "index"
# The columns of a run-list row (see :func:`summarize_run`).
ROW_FIELDS = ("id", "name", "status", "steps", "failures", "path", "error", "errors",
              "warnings", "top", "top_kind", "top_step", "top_layer", "started", "duration_s", "tags",
              "kind", "requests", "error_rate")


def index_dir() -> Path:
    """``$DEBUGKIT_CACHE/index`` (created if missing)."""
    from .._fsutil import cache_dir

    d = cache_dir() / INDEX_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def signature_digest(sig: tuple) -> str:
    """A short digest of a files signature (:func:`debugkit.io.fs.files_signature`)."""
    return hashlib.sha256(repr(tuple(tuple(x) for x in sig)).encode()).hexdigest()[:32]


def store_signatures(root) -> dict[str, tuple]:
    """``{folder name: files signature}`` of every folder directly under ``root``, from
    one listing of ``root`` (the same entries :func:`debugkit.io.fs.files_signature`
    gives for each folder on its own)."""
    root = as_path(root) if isinstance(root, str) else root
    out: dict[str, list] = {}
    if is_local(root):
        base = str(root)
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, base)
            if rel_dir == ".":
                continue
            top, _, rest = rel_dir.partition(os.sep)
            out.setdefault(top, []).extend((os.path.join(rest, name) if rest else name, size, ns)
                                           for name, size, ns in stat_files(dirpath, files))
        return {k: tuple(v) for k, v in out.items()}
    for rel, info in sorted(list_tree(root).items()):  # the listing find_runs made
        top, _, rest = rel.partition("/")
        if not rest:
            continue
        out.setdefault(top, []).append((rest, int(info.get("size") or 0), stamp_of(info)))
    return {k: tuple(v) for k, v in out.items()}


def _entry_file(folder: Path, path: str) -> Path:
    return folder / (hashlib.sha256(str(path).encode()).hexdigest()[:32] + ".json")


def _read_data(file: Path, path: str, digest: str) -> dict | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # missing or torn: analyse again
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION \
            or data.get("debugkit") != __version__ or data.get("path") != str(path) \
            or data.get("signature") != digest or not isinstance(data.get("row"), dict):
        return None
    return data


def _read_entry(file: Path, path: str, digest: str) -> dict | None:
    data = _read_data(file, path, digest)
    return data["row"] if data is not None else None


def findings_counts(found) -> dict:
    """``{errors, warnings, top, top_kind}`` of a list of findings (``top``: the most
    severe one's ``"kind: message"``, "" when there is none; ``top_kind``, ``top_step``,
    ``top_layer``: its kind, step and layer, or None)."""
    worst = next((f for sev in ("error", "warning") for f in found if f.severity == sev), None)
    return {"errors": sum(f.severity == "error" for f in found),
            "warnings": sum(f.severity == "warning" for f in found),
            "top": f"{worst.kind}: {worst.message}" if worst else "",
            "top_kind": worst.kind if worst else None,
            "top_step": worst.step if worst else None,
            "top_layer": worst.layer if worst else None}


def serving_counts(run, started: float | None = None) -> dict:
    """``{kind, requests, error_rate}`` of a run (``requests`` and ``error_rate``, the
    share of requests that raised or returned NaN/Inf, are None for a training run), and
    for an inference run ``duration_s`` from its start to its last request."""
    import math

    if run.kind != fmt.KIND_INFERENCE:
        return {"kind": run.kind, "requests": None, "error_rate": None}
    from ..analysis.serving import summarize_requests

    req = run.requests()
    s = summarize_requests(req)
    n, by = s["requests"], s["by_outcome"]
    out = {"kind": run.kind, "requests": n,
           "error_rate": (by.get("error", 0) + by.get("nonfinite", 0)) / n if n else None}
    last = float(req["wall_time"].max()) if n else None
    if started is not None and last is not None and math.isfinite(last) and last >= started:
        out["duration_s"] = round(last - started, 3)
    return out


def _analyse(entry) -> tuple[dict, dict | None]:
    """The run-list row of a run and what each diagnose source found (None when the run
    cannot be analysed)."""
    from ..io import served_runs
    from ..io.run import open_run
    from . import arrange, collect_by_source

    row = served_runs.summarize(entry)
    row.update({"errors": None, "warnings": None, "top": "", "top_kind": None, "top_step": None,
                "top_layer": None, "kind": None, "requests": None, "error_rate": None})
    if row["error"] is not None:
        row["top"] = f"cannot analyse: {row['error']}"
        return row, None
    by_source = None
    try:
        run = open_run(entry.path)
        row.update(serving_counts(run, row.get("started")))
        by_source = collect_by_source(run)
        row.update(findings_counts(arrange([f for fs in by_source.values() for f in fs])))
    except DebugkitError as exc:
        row["top"] = f"cannot analyse: {exc}"
    except Exception as exc:  # noqa: BLE001 - one bad run is one row, never the whole list
        log.exception("analysing run %s for the run list", entry.id)
        row["top"] = "cannot analyse: " + MSG_RUN_UNEXPECTED.format(
            run=entry.id, type=type(exc).__name__, detail=exc)
        by_source = None
    return row, by_source


def _storable(by_source: dict) -> dict:
    """``{source: [finding dicts]}`` of the sources whose findings read back from JSON
    exactly as they are (a tuple, a non-string key or an array in the evidence would not:
    that source is left out, and a page runs it itself)."""
    out = {}
    for name, found in by_source.items():
        dicts = [f.to_dict() for f in found]
        try:
            if json.loads(json.dumps(dicts)) == dicts:
                out[name] = dicts
        except (TypeError, ValueError):
            continue
    return out


def cached_findings(path: str, sig: tuple, sources=None, *, folder: Path | None = None) -> list | None:
    """What ``diagnose(run, sources=sources)`` gives for the run at ``path`` whose files
    signature is ``sig`` (default thresholds), from the index, or None when the index
    does not hold the run as it is now."""
    from ..analysis.findings import Finding
    from . import SOURCES, arrange

    folder = index_dir() if folder is None else folder
    data = _read_data(_entry_file(folder, str(path)), str(path), signature_digest(sig))
    stored = data.get("findings") if data is not None else None
    if not isinstance(stored, dict):
        return None
    names = [s for s in SOURCES if sources is None or s in sources]
    if any(not isinstance(stored.get(n), list) for n in names):
        return None
    try:
        return arrange([Finding(**d) for n in names for d in stored[n]])
    except (TypeError, ValueError):
        return None  # an entry this version cannot read: analyse again


def summarize_run(entry, sig: tuple | None = None, *, folder: Path | None = None) -> dict:
    """The run-list row of one run, from the index when the run's files are unchanged.

    Parameters
    ----------
    entry : debugkit.io.served_runs.RunEntry
        The run.
    sig : tuple, optional
        Its files signature (default: read now); :func:`store_signatures` gives them
        for a whole root at once.
    folder : Path, optional
        The index folder (default: :func:`index_dir`).

    Returns
    -------
    dict with keys ``id, name, status, steps, failures, path, error`` (as
    :func:`debugkit.io.served_runs.summarize`), ``errors, warnings`` (finding counts by
    severity; None when the run cannot be analysed), ``top`` (the most severe finding,
    or why the run cannot be analysed) and ``cached`` (True when read from the index).
    """
    from ..io.fs import files_signature

    if sig is None:
        sig = files_signature(entry.path)
    folder = index_dir() if folder is None else folder
    digest = signature_digest(sig)
    file = _entry_file(folder, str(entry.path))
    row = _read_entry(file, str(entry.path), digest)
    if row is not None:
        row = {**row, "id": entry.id, "cached": True}
        if row.get("status") == fmt.STATE_RUNNING:
            row["status"] = _live_status(entry, row["status"])
        return row
    row, by_source = _analyse(entry)
    data = {"version": INDEX_VERSION, "debugkit": __version__, "path": str(entry.path),
            "signature": digest, "row": {k: row.get(k) for k in ROW_FIELDS}}
    if by_source is not None:
        data["findings"] = _storable(by_source)
    try:
        atomic_write_json(file, data)
    except (OSError, TypeError, ValueError):
        try:  # findings whose evidence JSON cannot hold: the row alone
            data.pop("findings", None)
            atomic_write_json(file, data)
        except (OSError, TypeError, ValueError):
            pass  # a read-only cache folder: the list still shows, just not faster next time
    return {**row, "cached": False}


def _run_listings(entries) -> dict[str, dict]:
    """``{run url: {relative name: info}}`` of runs in an object store, from the one
    listing of their root (:func:`debugkit.io.fs.list_tree`)."""
    by_root: dict[str, dict[str, dict]] = {}
    for e in entries:
        if e.root is None or str(e.path) == str(e.root):
            continue
        if str(e.root) not in by_root:
            runs: dict[str, dict] = {}
            for rel, info in list_tree(e.root).items():
                top, _, rest = rel.partition("/")
                if rest:
                    runs.setdefault(top, {})[rest] = info
            by_root[str(e.root)] = runs
    return {str(e.path): by_root[str(e.root)][e.path.name] for e in entries
            if e.root is not None and e.path.name in by_root.get(str(e.root), {})}


def _live_status(entry, cached: str) -> str:
    from ..io.run import open_run

    try:
        return open_run(entry.path).status
    except DebugkitError:
        return cached


def summarize_runs(entries, *, folder: Path | None = None) -> list[dict]:
    """:func:`summarize_run` for each of ``entries`` (``RunEntry`` objects, as
    :func:`debugkit.io.served_runs.find_runs` returns), reading each root's signatures once."""
    by_root: dict[str, dict] = {}
    rows = []
    sigs: dict[str, tuple] = {}
    for e in entries:
        root = e.root
        # a run directly under its root (not the root itself, not a TensorBoard run a
        # level further down): its signature comes from the root's one listing
        if root is not None and str(e.path.parent).rstrip("/") == str(root).rstrip("/"):
            key = str(root)
            if key not in by_root:
                by_root[key] = store_signatures(root)
            sig = by_root[key].get(e.path.name if hasattr(e.path, "name") else str(e.path))
            if sig is not None:
                sigs[str(e.path)] = sig
    # runs in an object store that the index does not hold as they are now: the small
    # files of all of them fetched at once, concurrently, into the cache (one batch, not a
    # round trip per file); each is then analysed in place, its reads answered from there
    index = index_dir() if folder is None else folder
    stale = [e for e in entries if not is_local(e.path) and str(e.path) in sigs
             and _read_entry(_entry_file(index, str(e.path)), str(e.path),
                             signature_digest(sigs[str(e.path)])) is None]
    listings = _run_listings(stale)
    if listings:
        prefetch_many([(e.path, listings[str(e.path)]) for e in stale if str(e.path) in listings])
    for e in entries:
        sig = sigs.get(str(e.path))
        try:
            if str(e.path) in listings:  # the listing the batch came from answers its reads
                prefetch_many([(e.path, listings[str(e.path)])])
            rows.append(summarize_run(e, sig, folder=folder))
        except Exception as exc:  # noqa: BLE001 - one bad run is one error row
            log.exception("listing run %s", e.id)
            msg = MSG_RUN_UNEXPECTED.format(run=e.id, type=type(exc).__name__, detail=exc)
            rows.append({"id": e.id, "name": e.id, "status": "unreadable", "steps": None,
                         "failures": None, "path": str(e.path), "error": msg, "errors": None,
                         "warnings": None, "top": f"cannot analyse: {msg}", "cached": False})
    return rows
