"""Find runs under the folders the dashboard serves (sample runs, the run store)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import format as fmt
from ..errors import MSG_RUN_UNEXPECTED, DebugkitError, InvalidInputError
from .access import allowed_roots, is_allowed
from .fs import as_path, is_local, list_tree, split_roots

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
OPENED_FILE = ".debugkit-opened.json"
MAX_OPENED = 200
MSG_BAD_RUN_ID = "run id {value!r}: expected letters, digits, '.', '_' or '-' (at most 200)"
#: Names the run asked for and how many are served, never the served folders (server paths).
MSG_UNKNOWN_RUN = "run {value!r}: no such run among the {count} served here{hint}"
log = logging.getLogger(__name__)


def default_store() -> Path:
    """The run store: ``$DEBUGKIT_STORE``, default ``./runs``."""
    return Path(os.environ.get("DEBUGKIT_STORE", "runs")).expanduser()


def default_roots() -> list[Path]:
    """Folders served by default: ``$DEBUGKIT_ROOTS`` (os.pathsep-separated; fsspec
    URLs such as ``s3://bucket/runs`` allowed), else ``sample_runs/`` next to the
    package and the run store."""
    env = os.environ.get("DEBUGKIT_ROOTS")
    if env:
        return [as_path(p) for p in split_roots(env)]
    here = Path(__file__).resolve().parents[2] / "sample_runs"
    roots = [here] if here.is_dir() else []
    return roots + [default_store()]


def opened_runs(store: Path | None = None) -> list[str]:
    """Runs opened by path in the dashboard (``Open a path``), oldest first, as recorded
    in ``<store>/.debugkit-opened.json``: they stay listed, and reachable by ``?run=``,
    after a reload or a restart, for as long as they exist. A missing or unreadable
    file is an empty list (it is a convenience, never a reason to fail)."""
    import json

    f = Path(store or default_store()) / OPENED_FILE
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [x for x in data if isinstance(x, str) and 0 < len(x) <= 4096][-MAX_OPENED:]


def remember_opened(location: str, store: Path | None = None) -> None:
    """Add a run location (a local path or an fsspec URL) to :func:`opened_runs`.

    The file is replaced in one rename, and holds the :data:`MAX_OPENED` latest."""
    import json
    import os as _os

    store = Path(store or default_store())
    location = str(location)
    items = [x for x in opened_runs(store) if x != location] + [location]
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".{OPENED_FILE}.{_os.getpid()}.tmp"
    tmp.write_text(json.dumps(items[-MAX_OPENED:], indent=0), encoding="utf-8")
    _os.replace(tmp, store / OPENED_FILE)


def served_roots() -> list[Path]:
    """Every place the dashboard lists runs from: :func:`default_roots`, the run store
    (where uploads land, served even when ``$DEBUGKIT_ROOTS`` names other folders, so an
    uploaded run is always listed) and the runs opened by path (:func:`opened_runs`)."""
    roots = default_roots()
    store = default_store()
    if not any(str(r) == str(store) for r in roots):
        roots.append(store)
    for loc in opened_runs(store):
        try:
            p = as_path(loc)
        except (DebugkitError, ValueError):
            continue
        if not any(str(r) == str(p) for r in roots):
            roots.append(p)
    return roots


@dataclass(frozen=True)
class RunEntry:
    """One run found under a root: ``id`` is what ``?run=`` names it by."""

    id: str
    path: Path
    root: Path


def is_run_dir(path: Path) -> bool:
    return (path / fmt.MANIFEST).is_file()


def _tensorboard_runs(path) -> list[tuple[str, Path]]:
    """``(id suffix, folder)`` of the TensorBoard runs of a local log folder without a
    manifest: the folder itself when it holds event files, else its sub-folders that do
    (``train/``, ``validation/``, as Keras and Lightning write them), one level down."""
    if not is_local(path) or is_run_dir(path):
        return []
    from .tensorboard import find_tensorboard_runs

    try:
        found = find_tensorboard_runs(path)
    except OSError:
        return []
    if any(name == "." for name, _, _ in found):
        return [("", Path(path))]
    return [(name, d) for name, d, _ in found if "/" not in name]


def find_runs(roots: list[Path]) -> list[RunEntry]:
    """Runs directly under each root (and the roots themselves if they are runs), and
    TensorBoard runs there (see :func:`_tensorboard_runs`): ``logs/exp/train`` and
    ``logs/exp/validation`` under a served ``logs/`` are listed as ``exp.train`` and
    ``exp.validation``.

    Ids are folder names; when two roots hold the same name, the later one is
    prefixed with its root's name (``store.myrun``; a root that is itself a run: its
    parent folder's name). A folder reached through two roots is listed once. With ``$DEBUGKIT_ALLOWED_ROOTS``
    set, a run whose resolved path (symlinks followed) lies outside it is not listed
    (so ``?run=`` cannot name it either).
    """
    out: list[RunEntry] = []
    ids: set[str] = set()
    seen: set[str] = set()
    # the roots themselves are the operator's or were checked when a visitor typed them;
    # only the allow-list, when set, filters what lies under them (links included)
    check = allowed_roots() is not None
    for root in roots:
        root = as_path(root) if isinstance(root, str) else root
        candidates = []  # (id, folder)
        prefix = root.name
        if not is_local(root):
            # an object store: one flat listing of the root (list_tree), not a request per run
            listed = list_tree(root)
            if fmt.MANIFEST in listed:
                candidates.append((root.name, root))
                prefix = root.parent.name or root.name
            else:
                runs = sorted({rel.split("/", 1)[0] for rel in listed
                               if rel.count("/") == 1 and rel.endswith("/" + fmt.MANIFEST)})
                candidates = [(name, root / name) for name in runs if not name.startswith(".")]
        elif is_run_dir(root):
            candidates.append((root.name, root))
            prefix = root.parent.name or root.name
        elif root.is_dir():
            tb_root = _tensorboard_runs(root)
            try:
                children = [] if tb_root else sorted(
                    p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            candidates = [(name or root.name, d) for name, d in tb_root]
            for p in children:
                if is_run_dir(p):
                    candidates.append((p.name, p))
                else:
                    candidates += [(f"{p.name}.{name}" if name else p.name, d)
                                   for name, d in _tensorboard_runs(p)]
        for name, p in candidates:
            key = _same_place(p)
            if key in seen:
                continue  # the same run under two roots (a run opened inside a served folder)
            if check and not is_allowed(p):
                continue  # a link (or a root) that leads outside DEBUGKIT_ALLOWED_ROOTS
            seen.add(key)
            rid = name if _ID.match(name) else re.sub(r"[^A-Za-z0-9._-]", "-", name)[:200]
            if rid in ids:
                rid = f"{prefix}.{rid}"
            ids.add(rid)
            out.append(RunEntry(rid, p, root))
    return out


def _same_place(p) -> str:
    """A key that is equal for two spellings of one folder (symlinks followed)."""
    if is_local(p):
        try:
            return os.path.realpath(p)
        except (OSError, ValueError):
            return str(p)
    return str(p).rstrip("/")


def validate_run_id(value: str) -> str:
    """Check a ``?run=`` value's shape (it comes from a stranger's URL)."""
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInputError(MSG_BAD_RUN_ID.format(value=str(value)[:80]))
    return value


def resolve_run(run_id: str, roots: list[Path]) -> RunEntry:
    """The run with that id under the roots, or :class:`InvalidInputError`."""
    validate_run_id(run_id)
    for e in find_runs(roots):
        if e.id == run_id:
            return e
    import difflib

    ids = [e.id for e in find_runs(roots)]
    close = difflib.get_close_matches(run_id, ids, n=3, cutoff=0.75)
    hint = "; did you mean " + " or ".join(repr(c) for c in close) + "?" if close else ""
    raise InvalidInputError(MSG_UNKNOWN_RUN.format(value=run_id, count=len(ids), hint=hint))


def relative_to_roots(text: str, roots) -> str:
    """``text`` with the absolute path of each local root (as given, absolute and resolved)
    replaced by the root's folder name: a message a visitor sees names
    ``runs/my-run/checkpoints`` instead of ``/srv/team/runs/my-run/checkpoints``."""
    pairs = {}
    for r in roots:
        if not is_local(r):
            continue
        name = Path(r).name or str(r)
        for form in (str(r), os.path.abspath(r), os.path.realpath(r)):
            form = form.rstrip(os.sep)
            if len(form) > 1:
                pairs[form] = name
    for form in sorted(pairs, key=len, reverse=True):
        text = re.sub(re.escape(form) + r"(?=$|[/\s'\":;,)\]])", lambda m, n=pairs[form]: n, text)
    return text


def summarize(entry: RunEntry) -> dict:
    """``{id, name, status, steps, failures, path, error, started, duration_s, tags}`` for
    a run list: ``started`` is the manifest's ``created_at`` (seconds since the epoch),
    ``duration_s`` from it to the last step's wall time, ``tags`` the manifest's tags
    (:func:`debugkit.format.read_tags`)."""
    import math

    from .. import format as fmt_
    from .run import open_run

    row = {"id": entry.id, "name": entry.id, "status": None, "steps": None,
           "failures": None, "path": str(entry.path), "error": None,
           "started": None, "duration_s": None, "tags": []}
    try:
        run = open_run(entry.path)
        row["name"] = run.name
        row["status"] = run.status
        row["tags"] = fmt_.read_tags(run.manifest)
        created = run.manifest.get("created_at")
        if isinstance(created, (int, float)) and math.isfinite(created):
            row["started"] = float(created)
        st = run.steps()
        row["steps"] = int(st["step"].nunique()) if len(st) else 0
        if len(st) and row["started"] is not None and "wall_time" in st:
            last = float(st["wall_time"].max())
            if math.isfinite(last) and last >= row["started"]:
                row["duration_s"] = round(last - row["started"], 3)
        row["failures"] = len(run.failures())
    except DebugkitError as exc:
        row["error"] = str(exc)
        row["status"] = "unreadable"
    except Exception as exc:  # noqa: BLE001 - one bad run is one error row, never the whole list
        log.exception("reading run %s for the run list", entry.id)
        row["error"] = MSG_RUN_UNEXPECTED.format(run=entry.id, type=type(exc).__name__, detail=exc)
        row["status"] = "unreadable"
    return row
