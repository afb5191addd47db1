"""Copy a run written on a node's local disk up to shared storage or an object store.

Object stores cannot append, so a multi-node job writes each rank's files locally and
syncs them up; the dashboard then reads the copy in place (``open_run("s3://...")``).
:func:`sync_run` makes one incremental pass: it uploads only the files whose size or
modification time changed since the previous pass, data files first, then the
manifest, and each rank's ``heartbeat.json`` last, so a reader that sees a heartbeat
saying ``finished`` also sees every row written before it. Table files are
append-only Arrow streams: a copy taken while the writer appends ends at most in a
torn last record, which the reader skips.

On the last pass of a run that has ended, the run's small files are also uploaded packed
into one object, ``pack.zip`` (:mod:`debugkit.runpack`), after everything else: a reader of
the store then fetches them with one GET instead of one per file. The pack is an extra
copy (every file is uploaded on its own first), and a reader uses a member only when it
is the file as the store holds it now.

Nothing is ever deleted at the destination, and the source is only read.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import format as fmt
from .. import runpack
from ..errors import RunDirError
from .fs import as_path, is_local

MSG_SRC_NOT_RUN = "{path}: not a debugkit run directory to sync (no manifest.json)"
MSG_SRC_NOT_LOCAL = "{path}: sync reads a run on this machine's disk; got a URL"
MSG_DEST_INSIDE = "{dest}: the destination lies inside the run being synced ({src})"
MSG_UPLOAD_FAILED = "{dest}: could not write {rel} ({detail})"

# Written by the writer into a temporary name and renamed: never copy the temporary.
_TEMP_SUFFIXES = (".tmp", ".partial")


@dataclass
class SyncResult:
    """What one pass copied: ``uploaded`` (relative paths, in upload order), ``bytes``
    copied, ``unchanged`` file count, and ``state`` to pass to the next pass."""

    uploaded: list[str] = field(default_factory=list)
    bytes: int = 0
    unchanged: int = 0
    state: dict = field(default_factory=dict)


def _order(rel: str) -> int:
    name = rel.rsplit("/", 1)[-1]
    if name == fmt.HEARTBEAT:
        return 2
    if rel == fmt.MANIFEST:
        return 1
    return 0


def _scan(src: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(_TEMP_SUFFIXES) or name.startswith(".tmp"):
                continue
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue  # removed between listing and stat (a pruned checkpoint)
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            found[Path(os.path.relpath(p, src)).as_posix()] = (st.st_size, st.st_mtime_ns)
    return found


def _write(dest, rel: str, data: bytes) -> None:
    target = dest / rel
    if is_local(dest):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.sync-{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotImplementedError):
        pass  # object stores have no directories
    target.write_bytes(data)  # one PUT: atomic per object


#: The key of ``SyncResult.state`` that remembers the pack last uploaded (its MD5).
_PACK_STATE = "\x00pack"


def sync_run(src, dest, state: dict | None = None, *, pack: bool | None = None) -> SyncResult:
    """Make one incremental pass copying the run at ``src`` to ``dest``.

    Parameters
    ----------
    src : path
        A run directory on this machine.
    dest : path or fsspec URL
        Where the copy lives (``s3://bucket/runs/job-42``, ``/mnt/shared/job-42``).
    state : dict, optional
        The ``state`` of the previous pass's result; without it every file is copied.
    pack : bool, optional
        Upload ``pack.zip`` (the run's small files in one object, last) when DEST is an
        object store; by default when the run has ended (its status is not ``running``).
        Not re-uploaded when it would be the same as the last pass's.

    Returns
    -------
    SyncResult
    """
    src_p = as_path(src)
    if not is_local(src_p):
        raise RunDirError(MSG_SRC_NOT_LOCAL.format(path=src))
    if not (src_p / fmt.MANIFEST).is_file():
        raise RunDirError(MSG_SRC_NOT_RUN.format(path=src))
    dest_p = as_path(dest)
    if is_local(dest_p):
        s, d = src_p.resolve(), dest_p.resolve()
        if d == s or s in d.parents:
            raise RunDirError(MSG_DEST_INSIDE.format(dest=dest, src=src))
    state = dict(state or {})
    found = _scan(src_p)
    found.pop(runpack.PACK, None)  # a pack copied in with the run is made again below
    changed = sorted((rel for rel, sig in found.items() if state.get(rel) != sig),
                     key=lambda r: (_order(r), r))
    res = SyncResult(unchanged=len(found) - len(changed), state=state)
    for rel in changed:
        try:
            data = (src_p / rel).read_bytes()
        except FileNotFoundError:
            continue  # pruned since the scan
        try:
            _write(dest_p, rel, data)
        except OSError as exc:
            raise RunDirError(MSG_UPLOAD_FAILED.format(dest=dest, rel=rel, detail=exc)) from exc
        # Record the signature seen at scan time: a file that grew while it was read is
        # copied again on the next pass.
        state[rel] = found[rel]
        res.uploaded.append(rel)
        res.bytes += len(data)
    if pack is None:
        pack = not is_local(dest_p) and _ended(src_p)
    if pack and not is_local(dest_p):
        _upload_pack(src_p, dest_p, dest, found, res)
    return res


def _ended(src: Path) -> bool:
    from .run import open_run

    try:
        return open_run(src).status != "running"
    except Exception:  # noqa: BLE001 - a run that cannot be read is not packed
        return False


def _upload_pack(src: Path, dest_p, dest, found: dict, res: SyncResult) -> None:
    """Upload the pack of the files of ``found`` (as scanned this pass), unless the last
    pass uploaded the same one."""
    import hashlib

    members = {}
    for rel in runpack.packable({rel: sig[0] for rel, sig in found.items()}):
        try:
            data = (src / rel).read_bytes()
        except OSError:
            continue  # pruned since the scan
        if len(data) == found[rel][0]:  # changed since the scan: left out, read on its own
            members[rel] = data
    if len(members) < 2:
        return
    blob = runpack.build_pack(members)
    digest = hashlib.sha256(blob).hexdigest()
    if res.state.get(_PACK_STATE) == digest:
        return
    try:
        _write(dest_p, runpack.PACK, blob)
    except OSError as exc:
        raise RunDirError(MSG_UPLOAD_FAILED.format(dest=dest, rel=runpack.PACK, detail=exc)) from exc
    res.state[_PACK_STATE] = digest
    res.uploaded.append(runpack.PACK)
    res.bytes += len(blob)


def watch_run(src, dest, every_s: float = 30.0, *, max_passes: int | None = None,
              on_pass=None, sleep=time.sleep) -> SyncResult:
    """Sync ``src`` to ``dest`` every ``every_s`` seconds until the run has ended
    (its status is no longer ``running``), then make one last pass.

    Returns the last pass's result; ``on_pass(result)`` is called after every pass.
    """
    from .run import open_run

    state: dict = {}
    passes = 0
    while True:
        status = open_run(src).status
        res = sync_run(src, dest, state, pack=status != "running")
        state = res.state
        passes += 1
        if on_pass is not None:
            on_pass(res)
        if status != "running" or (max_passes is not None and passes >= max_passes):
            return res
        sleep(every_s)
