"""Profiles, traces and stack dumps inside a run directory.

Files live in ``<run>/profiles/<id><ext>`` (gzip-compressed), and each is listed in
``manifest.json``'s ``profiles`` field, which is rewritten atomically (every other field
kept) under a lock so two writers never lose each other's entry. See
``docs/run-format.md``.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._fsutil import check_regular_file, in_run, is_in_run, sha256_file
from ..errors import InvalidInputError, OutsideRunError, ProfileFileError, RunDirError
from ..runschema import is_valid

FORMATS = ("speedscope", "raw", "chrome-trace", "pyspy-dump")
KIND = {"speedscope": "sampled", "raw": "sampled", "chrome-trace": "trace", "pyspy-dump": "stacks"}
EXT = {"speedscope": ".speedscope.json.gz", "raw": ".raw.txt.gz", "chrome-trace": ".trace.json.gz",
       "pyspy-dump": ".stacks.json.gz"}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")

MSG_BAD_ID = "profile name {value!r}: expected letters, digits, '.', '_' or '-' (at most 80)"
MSG_ZIP_RUN = "{path}: a zipped run is read-only; unzip it and pass the folder to add a profile"
MSG_NOT_DIR = "{path}: not a directory (expected a run directory)"
MSG_NO_PROFILE = "{run}: no profile {value!r} (have: {have})"


def validate_profile_id(value: str) -> str:
    if not isinstance(value, str) or not _ID.match(value) or value.endswith(".tmp"):
        raise InvalidInputError(MSG_BAD_ID.format(value=str(value)[:100]))
    return value


def read_any(path: str | os.PathLike, format: str | None = None, *, drop_pids=(), keep_pids=()):
    """Read a profile file as :class:`~debugkit.io.profile_types.SampledProfile`,
    :class:`~debugkit.io.chrome_trace.ChromeTrace` or :class:`~debugkit.io.stackdump.StackDump`."""
    from . import chrome_trace, collapsed, profiles, speedscope, stackdump

    try:
        check_regular_file(path)  # a FIFO or a device is refused, never opened (it would block)
    except FileNotFoundError:
        pass  # the reader below says "no such file"
    format = format or profiles.sniff_format(path)
    if format in ("speedscope", "raw"):
        data = profiles.read_bytes(path)
        return (speedscope.read_speedscope if format == "speedscope" else collapsed.read_collapsed)(
            path, data, drop_pids=drop_pids, keep_pids=keep_pids)
    if format == "chrome-trace":
        return chrome_trace.read_chrome_trace(path)
    if format == "pyspy-dump":
        return stackdump.read_stack_dump(path)
    raise ProfileFileError(f"{path}: unknown profile format {format!r}")


def read_sampled(path: str | os.PathLike):
    """Read a speedscope or raw profile, whichever the file is, as a
    :class:`~debugkit.io.profile_types.SampledProfile`."""
    from .collapsed import read_collapsed
    from .profiles import read_bytes, sniff_bytes
    from .speedscope import read_speedscope

    data = read_bytes(path)
    format_name = sniff_bytes(data[: 1 << 16], path)
    if format_name == "speedscope":
        return read_speedscope(path, data)
    if format_name == "raw":
        return read_collapsed(path, data)
    raise ProfileFileError(f"{path}: a {format_name} file, not a sampled profile (speedscope or raw)")


def summary_of(obj) -> dict:
    """The few numbers the manifest lists for a profile."""
    from .chrome_trace import GPU_CATS, ChromeTrace
    from .profile_types import SampledProfile
    from .stackdump import StackDump

    if isinstance(obj, SampledProfile):
        return {"samples": obj.total_samples, "threads": int(len(obj.threads)),
                "duration_s": obj.meta.get("duration_s"), "rate_hz": obj.meta.get("rate_hz")}
    if isinstance(obj, ChromeTrace):
        ev = obj.events
        x = ev[ev["ph"] == "X"]
        span = float((x["ts_us"] + x["dur_us"]).max() - x["ts_us"].min()) / 1e3 if len(x) else 0.0
        return {"events": int(obj.n_events), "duration_ms": round(span, 3),
                "gpu": bool(ev["cat"].isin(list(GPU_CATS)).any())}
    if isinstance(obj, StackDump):
        return {"threads": int(len(obj.threads)), "processes": int(obj.threads["pid"].nunique())}
    return {}


# ---------------------------------------------------------------------------- writing
def _run_dir(path: str | os.PathLike) -> Path:
    p = Path(path).expanduser()
    if p.is_file():
        if p.suffix.lower() == ".zip":
            raise RunDirError(MSG_ZIP_RUN.format(path=p))
        raise RunDirError(MSG_NOT_DIR.format(path=p))
    return p


def add_profile(run_dir: str | os.PathLike, source: str | os.PathLike, *, format: str | None = None,
                name: str | None = None, origin: str = "import", info: dict | None = None,
                parsed=None) -> dict:
    """Copy a profile file into ``<run>/profiles/`` (gzip-compressed) and list it in the
    manifest. The file is read first, so a broken file is refused before anything is
    written; the source file is never changed.

    Parameters
    ----------
    run_dir : path
        The run directory (created, with a minimal manifest, if it has none).
    source : path
        The profile file (plain or gzip).
    format : str, optional
        One of :data:`FORMATS`; sniffed from the content by default.
    name : str, optional
        The profile's id in the run (letters, digits, ``._-``); a suffix ``-2``, ``-3``
        ... is added if it is taken. Default: ``<format>-<date>-<time>``.
    origin : str
        How it got there: ``py-spy record``, ``py-spy record --pid``, ``py-spy dump``,
        ``import``.
    info : dict, optional
        Extra fields for the entry (command, pid, exit status, py-spy options ...).
    parsed : object, optional
        The already-read profile (skips reading it again).

    Returns
    -------
    dict
        The manifest entry (``id, kind, format, file, bytes, sha256, created_at, origin,
        summary`` and ``info``'s fields).
    """
    from . import profiles

    run = _run_dir(run_dir)
    src = Path(source)
    if not src.is_file():
        raise ProfileFileError(f"{src}: no such file")
    format = format or profiles.sniff_format(src)
    if format not in FORMATS:
        raise ProfileFileError(f"{src}: unknown profile format {format!r}")
    obj = parsed if parsed is not None else read_any(
        src, format, drop_pids=[(info or {}).get("launcher_pid")], keep_pids=[(info or {}).get("pid")])
    summary = summary_of(obj)
    base = validate_profile_id(name) if name else f"{format.split('-')[0]}-{time.strftime('%Y%m%d-%H%M%S')}"
    run.mkdir(parents=True, exist_ok=True)
    pdir = run / fmt.PROFILES_DIR
    pdir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}

    def change(manifest: dict | None) -> dict:
        # Runs under the run's lock (format.update_manifest): the id is chosen, the file
        # copied and the entry listed while no other writer can change the manifest.
        written["created"] = manifest is None
        manifest = manifest or fmt.minimal_manifest(run)
        listed = manifest.get(fmt.PROFILES_FIELD)
        listed = list(listed) if isinstance(listed, list) else []
        taken = {e.get("id") for e in listed if isinstance(e, dict)}
        taken |= {p.name.split(".", 1)[0] for p in pdir.iterdir() if not p.name.startswith(".")}
        pid, k = base, 1
        while pid in taken:
            k += 1
            pid = f"{base}-{k}"
        final = pdir / f"{pid}{EXT[format]}"
        tmp = pdir / f".{pid}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(src, "rb") as f_in:
                head = f_in.read(2)
                f_in.seek(0)
                if head == profiles.GZIP_MAGIC:
                    with open(tmp, "wb") as f_out:
                        shutil.copyfileobj(f_in, f_out, 1 << 20)
                else:
                    with gzip.open(tmp, "wb", compresslevel=6) as f_out:
                        shutil.copyfileobj(f_in, f_out, 1 << 20)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        written["final"] = final
        written["entry"] = {"id": pid, "kind": KIND[format], "format": format,
                            "file": f"{fmt.PROFILES_DIR}/{final.name}", "bytes": final.stat().st_size,
                            "sha256": sha256_file(final), "created_at": time.time(), "origin": origin,
                            "original_name": src.name, "summary": summary, **(info or {})}
        listed.append(written["entry"])
        manifest[fmt.PROFILES_FIELD] = listed
        return manifest

    try:
        fmt.update_manifest(run, change, action="adding a profile to it")
    except BaseException:
        if "entry" in written:  # copied but not listed: remove the file again
            written["final"].unlink(missing_ok=True)
        raise
    entry, final, created = written["entry"], written["final"], written["created"]
    entry["path"] = str(final)
    entry["created_run"] = created
    return entry


# ---------------------------------------------------------------------------- listing
def _resolved(p):
    try:
        return p.resolve()
    except OSError:
        return p


def list_profiles(run) -> list[dict]:
    """The profiles of a :class:`~debugkit.io.run.Run`, oldest first.

    Entries listed in the manifest come first; a file in ``profiles/`` that the
    manifest does not list (a writer that lost its manifest update) is listed too,
    with ``origin: "unlisted"``. Each entry gets ``path`` (absolute). Entries whose
    ``file`` is missing or points outside ``profiles/`` are skipped with a warning in
    ``run.warnings``.
    """
    pdir = (run.path / fmt.PROFILES_DIR)
    out, seen = [], set()
    listed = run.manifest.get(fmt.PROFILES_FIELD)
    if listed is not None and not isinstance(listed, list):
        run.warnings.append(f"{run.path / fmt.MANIFEST}: 'profiles' is not a list; ignored")
        listed = []
    for i, e in enumerate(listed or []):
        if not is_valid(e, "profile entry") or not isinstance(e.get("id"), str) or not _ID.match(e["id"]) \
                or e.get("format") not in FORMATS or not isinstance(e.get("file"), str):
            run.warnings.append(f"{run.path / fmt.MANIFEST}: profiles[{i}] is malformed; skipped")
            continue
        parts = e["file"].split("/")
        try:
            rp = in_run(run.path, e["file"], what="profile file")
        except OutsideRunError:
            rp = None
        if rp is None or len(parts) != 2 or parts[0] != fmt.PROFILES_DIR or not rp.is_file():
            run.warnings.append(f"{run.path / fmt.MANIFEST}: profiles[{i}] ({e['id']}): file "
                                f"{e['file']!r} is missing or outside profiles/; skipped")
            continue
        if e["id"] in seen:
            continue
        seen.add(e["id"])
        out.append({**e, "kind": KIND[e["format"]], "path": str(_resolved(rp))})
    if pdir.is_dir():
        listed_files = {Path(e["path"]).name for e in out}
        for p in sorted(pdir.iterdir()):
            if p.name.startswith(".") or p.name in listed_files or not p.is_file() \
                    or not is_in_run(run.path, fmt.PROFILES_DIR, p.name):
                continue
            for f, ext in EXT.items():
                if p.name.endswith(ext) or p.name.endswith(ext[:-3]):
                    pid = p.name[: -len(ext)] if p.name.endswith(ext) else p.name[: -len(ext) + 3]
                    if _ID.match(pid) and pid not in seen:
                        seen.add(pid)
                        st = p.stat()
                        out.append({"id": pid, "kind": KIND[f], "format": f,
                                    "file": f"{fmt.PROFILES_DIR}/{p.name}", "bytes": st.st_size,
                                    "created_at": st.st_mtime, "origin": "unlisted",
                                    "summary": {}, "path": str(_resolved(p))})
                    break
    return out


def get_profile(run, profile_id: str) -> dict:
    """One profile entry by id (:class:`InvalidInputError` when there is none)."""
    validate_profile_id(profile_id)
    entries = list_profiles(run)
    for e in entries:
        if e["id"] == profile_id:
            return e
    raise InvalidInputError(MSG_NO_PROFILE.format(run=run.path, value=profile_id,
                                                  have=", ".join(e["id"] for e in entries) or "none"))


def read_entry(entry: dict) -> Any:
    """Read the file of a profile entry (without the threads of `debugkit profile`'s
    launcher, whose pid the entry records; with those of the program, whose pid it
    records too)."""
    return read_any(entry["path"], entry["format"], drop_pids=[entry.get("launcher_pid")],
                    keep_pids=[entry.get("pid")])


def describe(entry: dict) -> str:
    """A one-line label for pickers: ``id · what · size``."""
    s = entry.get("summary") or {}
    what = {"sampled": f"{s.get('samples', '?'):,} samples" if isinstance(s.get("samples"), int) else "samples",
            "trace": f"{s.get('events', '?'):,} trace events" if isinstance(s.get("events"), int) else "trace",
            "stacks": f"stack dump of {s.get('threads', '?')} threads"}[entry["kind"]]
    tool = {"speedscope": "py-spy", "raw": "py-spy raw", "chrome-trace": "torch.profiler",
            "pyspy-dump": "py-spy dump"}[entry["format"]]
    label = entry.get("label")
    return f"{entry['id']} · {tool} · {what}" + (f" · {label}" if label else "")
