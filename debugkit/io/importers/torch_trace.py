"""Add torch.profiler chrome traces to a run (``debugkit import torch-trace FILE RUN_DIR``,
whose command-line half is :mod:`debugkit.cli.importers.torch_trace`).

FILE is a trace written by ``prof.export_chrome_trace(...)`` or by
``torch.profiler.tensorboard_trace_handler`` (``*.pt.trace.json`` / ``.json.gz``), or a
folder of them (a TensorBoard log dir: each trace file is imported).
"""

from __future__ import annotations

from pathlib import Path

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(path) -> list[Path]:
    """The trace files of a path: itself, or a folder's ``*.json`` / ``*.json.gz``
    (recursively, sorted)."""
    from ...errors import ProfileFileError

    p = Path(path).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
        if not files:
            raise ProfileFileError(f"{p}: no trace files (*.json, *.json.gz) in this folder")
        return files
    raise ProfileFileError(f"{p}: no such file or directory")


def import_traces(path, run_dir, name=None, label=None) -> list[dict]:
    from ...errors import InvalidInputError
    from ..chrome_trace import read_chrome_trace
    from ..run_profiles import add_profile

    files = trace_files(path)
    if name and len(files) > 1:
        raise InvalidInputError(f"--name: {path} holds {len(files)} traces; name them one at a time")
    out = []
    parsed = [(f, read_chrome_trace(f)) for f in files]  # all valid before any is stored
    for f, trace in parsed:
        info = {"label": label} if label else {}
        dinfo = trace.meta.get("distributedInfo")
        info["tool"] = "torch.profiler (distributed)" if dinfo else "torch.profiler"
        if isinstance(dinfo, dict):  # where the straggler/overlap analysis finds it
            for k in ("rank", "world_size"):
                v = dinfo.get(k)
                if isinstance(v, int) and not isinstance(v, bool):
                    info[k] = v
        out.append(add_profile(run_dir, f, format="chrome-trace", name=name or _name_of(f),
                               origin="import", info=info, parsed=trace))
    return out


def _name_of(f: Path) -> str:
    """``host_1234.1700000000.pt.trace.json.gz`` -> ``trace-host_1234``."""
    import re

    stem = f.name
    for suf in (".gz", ".json", ".trace", ".pt"):
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
    stem = stem.split(".", 1)[0]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")[:60] or "trace"
    return stem if stem.startswith("trace") else f"trace-{stem}"

