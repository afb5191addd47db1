"""Which code a replay would run, and whether it may run it.

A capture names its model factory (and step function) as ``"module:qualname"`` plus the
absolute path and SHA-256 of the module's source file on the recording machine. That
path means nothing on another clone, so the module is located on *this* machine (by
walking the import system's path finders, which executes nothing, not even parent
packages), its file is hashed and its source parsed:

- ``verified``: a project source file whose SHA-256 is the recorded one, defining the
  callable with ``def`` or ``class``: it may run.
- ``changed`` / ``unrecorded``: the file differs from the recorded one (or the capture
  has no hash): it runs only when the user allows it (``--allow-code``, or the page's
  confirmation).
- ``installed``: the module belongs to an installed package (site-packages). Its source
  is public, so a capture from a stranger can carry its true hash: it never runs.
- ``not_allowed``: the file is outside the folders the viewer allows, or inside debugkit
  itself (see :mod:`debugkit.replay.policy`): it never runs, whatever its hash.
- ``missing``, ``not_defined`` (``os:system``: ``system`` is not defined by a ``def`` in
  ``os.py``), ``stdlib`` (``shutil:rmtree``), ``not_source`` (a compiled extension or a
  built-in module) and ``bad_spec`` never run.

The child process checks again, on the very bytes it executes (see
:func:`load_verified_module`).
"""

from __future__ import annotations

import ast
import os
import re
import site
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import CodeRefusedError

VERIFIED = "verified"
CHANGED = "changed"
UNRECORDED = "unrecorded"
INSTALLED = "installed"
MISSING = "missing"
NOT_DEFINED = "not_defined"
STDLIB = "stdlib"
NOT_SOURCE = "not_source"
BAD_SPEC = "bad_spec"
NOT_ALLOWED = "not_allowed"

#: Statuses that may run once the user allows code (``--allow-code`` / confirmation).
NEEDS_ALLOW = (CHANGED, UNRECORDED)
#: Statuses that never run.
NEVER = (MISSING, NOT_DEFINED, STDLIB, NOT_SOURCE, BAD_SPEC, INSTALLED, NOT_ALLOWED)

MSG_BAD_SPEC = ("{role} {spec!r}: expected 'module:qualname' with Python identifiers "
                "(e.g. 'examples.digits:build_model')")
MSG_MISSING = ("{role} {spec}: module {module!r} is not found on this machine (it was {recorded} "
               "when recorded); looked in {looked}; {fix}")
#: How the command line finds a module: one flag both searches and allows the folder.
FIX_MISSING_CLI = ("pass --code-root DIR, DIR being the project folder that holds {top!r} (the "
                   "replay then both imports from it and allows its code), or run from that folder")
MSG_NOT_SOURCE = "{role} {spec}: {local} is not a Python source file; refusing to run it"
MSG_STDLIB = ("{role} {spec}: {local} is part of Python's standard library, which holds no "
              "model code; refusing to run it")
MSG_NOT_DEFINED = ("{role} {spec}: {qualname!r} is not defined by a 'def' or 'class' in {local}; "
                   "refusing to run a callable that the recorded hash does not cover")
MSG_CHANGED = ("{role} {spec}: {local} has SHA-256 {local_sha}, but the capture recorded "
               "{recorded_sha}: the code changed since the run; pass --allow-code to replay "
               "with the code as it is now")
MSG_UNRECORDED = ("{role} {spec}: the capture recorded no SHA-256 for its source file, so "
                  "{local} cannot be verified; pass --allow-code to run it")
MSG_INSTALLED = ("{role} {spec}: {local} belongs to an installed package, whose source is "
                 "public (a capture from anyone can carry its hash); refusing to run it")
MSG_VERIFIED = "{role} {spec}: {local} matches the recorded SHA-256"

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CodeIdentity:
    """What a capture's ``code`` entry resolves to on this machine.

    Attributes
    ----------
    role : str
        ``model_factory`` or ``step_fn``.
    spec, module, qualname : str
        The recorded ``"module:qualname"`` and its parts.
    recorded_file, recorded_sha256 : str or None
        Where the file was, and its digest, on the recording machine.
    local_file, local_sha256 : str or None
        The module's source file on this machine, and its digest.
    status : str
        One of the statuses above.
    message : str
        One sentence for the user.
    search_root : str or None
        The ``sys.path`` entry the module was found under (the child imports from it).
    """

    role: str
    spec: str
    module: str | None
    qualname: str | None
    recorded_file: str | None
    recorded_sha256: str | None
    local_file: str | None
    local_sha256: str | None
    status: str
    message: str
    search_root: str | None = None

    def may_run(self, allow_code: bool) -> bool:
        return self.status == VERIFIED or (allow_code and self.status in NEEDS_ALLOW)

    def to_dict(self) -> dict:
        return asdict(self)


def split_spec(spec) -> tuple[str, str] | None:
    """``("pkg.mod", "Class.method")`` for a well-formed spec, else None."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        return None
    module, qualname = spec.split(":")
    if not all(_IDENT.match(p) for p in module.split(".")):
        return None
    if not all(_IDENT.match(p) for p in qualname.split(".")):
        return None
    return module, qualname


def _find_source(name: str, path: list[str], fullname: str):
    """A spec for ``name`` (a package, a ``.py`` module or a namespace folder) on ``path``,
    found as the import system would, without it (for modules inside a namespace folder,
    whose parent the import system would look up in ``sys.modules``)."""
    import importlib.util
    from importlib.machinery import ModuleSpec

    folders = []
    for p in path:
        d = os.path.join(p, name)
        if os.path.isfile(os.path.join(d, "__init__.py")):
            return importlib.util.spec_from_file_location(
                fullname, os.path.join(d, "__init__.py"), submodule_search_locations=[d])
        if os.path.isfile(d + ".py"):
            return importlib.util.spec_from_file_location(fullname, d + ".py")
        if os.path.isdir(d):
            folders.append(d)
    if not folders:
        return None
    spec = ModuleSpec(fullname, None, is_package=True)
    spec.submodule_search_locations = folders
    return spec


def locate_module(module: str, search_path: list[str] | None = None) -> tuple[str | None, str | None]:
    """``(origin file, sys.path entry)`` of a module, found without executing anything.

    ``importlib.util.find_spec`` imports parent packages; this walks
    :class:`importlib.machinery.PathFinder` one component at a time instead.
    """
    from importlib.machinery import PathFinder

    roots = [p if p else os.getcwd() for p in (sys.path if search_path is None else search_path)]
    parts = module.split(".")
    for root in roots:
        path = [root]
        spec = None
        for i in range(len(parts)):
            try:
                spec = PathFinder.find_spec(".".join(parts[: i + 1]), path)
            except KeyError:  # inside a namespace folder: PathFinder looks its parent up
                spec = _find_source(parts[i], path, ".".join(parts[: i + 1]))  # in sys.modules
            except (ImportError, ValueError, OSError):
                spec = None
            if spec is None:
                break
            if i < len(parts) - 1:
                if spec.submodule_search_locations is None:
                    spec = None
                    break
                if spec.loader is None or spec.origin in (None, "namespace"):
                    # a namespace folder (no __init__.py): its locations are recomputed
                    # from the parent module in sys.modules, which nothing imported here
                    # (KeyError: 'runs'); they are this component's folders on ``path``
                    path = [d for d in (os.path.join(p, parts[i]) for p in path) if os.path.isdir(d)]
                else:
                    path = list(spec.submodule_search_locations)
                if not path:
                    spec = None
                    break
        if spec is not None:
            origin = spec.origin if spec.has_location else None
            return origin, root
    return None, None


def recorded_root(module: str, recorded_file) -> str | None:
    """The ``sys.path`` entry a module was imported from when it was recorded.

    ``examples.digits`` recorded at ``/src/proj/examples/digits.py`` was imported from
    ``/src/proj``; a package's ``__init__.py`` counts one level more. None when the file
    name does not match the module (then the recorded path tells nothing) or the folder
    does not exist on this machine.
    """
    if not isinstance(recorded_file, str) or not recorded_file:
        return None
    parts = module.split(".")
    f = Path(recorded_file)
    if f.name == f"{parts[-1]}.py":
        root = f.parents[len(parts) - 1] if len(f.parents) >= len(parts) else None
        names = list(f.parent.parts[len(f.parent.parts) - (len(parts) - 1):]) if len(parts) > 1 else []
    elif f.name == "__init__.py":
        root = f.parents[len(parts)] if len(f.parents) > len(parts) else None
        names = list(f.parent.parts[len(f.parent.parts) - len(parts):])
    else:
        return None
    if root is None or names != parts[:len(names)] or not root.is_dir():
        return None
    return str(root)


def default_search_path(code: dict | None = None, first=()) -> list[str]:
    """Where a replay looks for a capture's modules: what ``python -m`` would search.

    ``first``: folders searched before all others (the command line's ``--code-root``).
    Then the working directory (``python -m`` puts it on ``sys.path``; a console script
    does not), then the folders the capture's modules were imported from when recorded
    (where they still exist), then this interpreter's ``sys.path``. Every entry is an
    absolute path, so the list means the same in a child process with another working
    directory.
    """
    out: list[str] = []

    def add(p):
        if p is None:
            return
        p = os.path.abspath(p or os.getcwd())
        if p not in out:
            out.append(p)

    for p in first:
        add(p)
    add(os.getcwd())
    for entry in (code or {}).values():
        parts = split_spec((entry or {}).get("spec")) if isinstance(entry, dict) else None
        if parts:
            add(recorded_root(parts[0], entry.get("file")))
    for p in sys.path:
        add(p)
    return out


def _site_dirs() -> list[Path]:
    dirs = set()
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(Path(p).resolve())
    try:
        dirs.update(Path(p).resolve() for p in site.getsitepackages())
    except AttributeError:  # virtualenv's old site.py
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        dirs.add(Path(user).resolve())
    return sorted(dirs)


def _stdlib_dirs() -> list[Path]:
    return sorted({Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")
                   if sysconfig.get_paths().get(k)})


def classify_location(path: str) -> str:
    """``installed``, ``stdlib`` or ``project`` for a source file."""
    p = Path(path).resolve()

    def under(d: Path) -> bool:
        return p == d or d in p.parents

    if any(under(d) for d in _site_dirs()):
        return "installed"
    if any(under(d) for d in _stdlib_dirs()):
        return "stdlib"
    return "project"


def defines(source: str | bytes, qualname: str) -> bool:
    """Whether ``source`` defines ``qualname`` with ``def``/``class`` statements.

    ``build_model`` needs a top-level ``def build_model`` (or ``class``); ``Net.create``
    a top-level ``class Net`` whose body has ``def create``. Names bound any other way
    (imports, assignments, ``from posix import *``) do not count.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    body = tree.body
    parts = qualname.split(".")
    for i, name in enumerate(parts):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name == name:
                found = node  # the last definition wins, as at run time
        if found is None:
            return False
        if i < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return False
            body = found.body
    return True


def _sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def identify(role: str, entry: dict | None, spec: str | None = None,
             search_path: list[str] | None = None, code_roots: list | None = None,
             hint: str | None = None) -> CodeIdentity:
    """Resolve one recorded code entry (``{"spec", "module", "qualname", "file", "sha256"}``).

    ``code_roots`` are the folders the viewer allows code from (default: the command
    line's, :func:`debugkit.replay.policy.cli_code_roots`); ``hint`` ends the refusal of
    a file outside them.
    """
    from . import policy

    if code_roots is None:
        code_roots = policy.cli_code_roots()
    entry = dict(entry or {})
    spec = entry.get("spec") or spec
    rec_file, rec_sha = entry.get("file"), entry.get("sha256")
    parts = split_spec(spec)
    base = dict(role=role, spec=str(spec), recorded_file=rec_file, recorded_sha256=rec_sha)
    if parts is None:
        return CodeIdentity(module=None, qualname=None, local_file=None, local_sha256=None,
                            status=BAD_SPEC, message=MSG_BAD_SPEC.format(role=role, spec=str(spec)[:120]),
                            **base)
    module, qualname = parts
    base.update(module=module, qualname=qualname)
    if search_path is None:
        search_path = default_search_path({role: entry})
    local, root = locate_module(module, search_path)
    fields = dict(role=role, spec=spec, module=module, qualname=qualname, local=local,
                  recorded=rec_file or "not located", looked=_looked(search_path),
                  fix=hint or FIX_MISSING_CLI.format(top=module.split(".")[0]))
    if local is None or not os.path.isfile(local):
        return CodeIdentity(local_file=None, local_sha256=None, status=MISSING,
                            message=MSG_MISSING.format(**fields), **base)
    local = str(Path(local).resolve())
    fields["local"] = local
    try:
        data = Path(local).read_bytes()
    except OSError:
        return CodeIdentity(local_file=local, local_sha256=None, status=MISSING,
                            message=MSG_MISSING.format(**fields), search_root=root, **base)
    sha = _sha256_bytes(data)
    fields.update(local_sha=sha, recorded_sha=rec_sha)
    common = dict(local_file=local, local_sha256=sha, search_root=root, **base)
    if not local.endswith(".py"):
        return CodeIdentity(status=NOT_SOURCE, message=MSG_NOT_SOURCE.format(**fields), **common)
    where = classify_location(local)
    if where == "stdlib":
        return CodeIdentity(status=STDLIB, message=MSG_STDLIB.format(**fields), **common)
    if where == "installed" and not policy.is_trusted_helper(local, spec):
        return CodeIdentity(status=INSTALLED, message=MSG_INSTALLED.format(**fields), **common)
    refusal = policy.check_factory_allowed(local, code_roots, role=role, spec=spec,
                                           hint=hint or policy.HINT_CLI)
    if refusal is not None:
        return CodeIdentity(status=NOT_ALLOWED, message=refusal, **common)
    if not defines(data, qualname):
        return CodeIdentity(status=NOT_DEFINED, message=MSG_NOT_DEFINED.format(**fields), **common)
    if not rec_sha:
        return CodeIdentity(status=UNRECORDED, message=MSG_UNRECORDED.format(**fields), **common)
    if rec_sha != sha:
        return CodeIdentity(status=CHANGED, message=MSG_CHANGED.format(**fields), **common)
    return CodeIdentity(status=VERIFIED, message=MSG_VERIFIED.format(**fields), **common)


def _looked(search_path: list[str]) -> str:
    """The search path as the user would read it (the interpreter's own folders counted)."""
    cwd = os.getcwd()
    paths = [os.path.abspath(p or cwd) for p in search_path]
    mine = [p for p in paths if not p.endswith(".zip") and classify_location(p) == "project"]
    shown = [f"the working directory {p}" if p == cwd else p for p in mine[:6]]
    rest = len(paths) - len(shown)
    return ", ".join(shown) + (f" and {rest} folders of Python and its packages" if rest else "")


def identify_capture(record: dict, manifest: dict | None = None,
                     search_path: list[str] | None = None, code_roots: list | None = None,
                     hint: str | None = None, import_roots=()) -> list[CodeIdentity]:
    """Identities of the capture's ``model_factory`` and (if any) ``step_fn``.

    ``import_roots`` are searched first when ``search_path`` is not given (the command
    line's ``--code-root`` folders: allowing a folder also imports from it).

    A capture without a model factory raises :class:`CodeRefusedError`: there is nothing
    to rebuild the model from.
    """
    code = record.get("code") or {}
    manifest = manifest or {}
    if search_path is None:
        search_path = default_search_path({**(manifest.get("code") or {}), **code}, import_roots)
    out = []
    for role in ("model_factory", "step_fn"):
        entry = code.get(role)
        spec = (entry or {}).get("spec") or manifest.get(role)
        if not spec:
            if role == "model_factory":
                raise CodeRefusedError(MSG_NO_FACTORY.format(where=record.get("path") or record.get("id")))
            continue
        out.append(identify(role, entry, spec, search_path, code_roots, hint))
    return out


MSG_NO_FACTORY = ("{where}: the capture records no model_factory, so the model cannot be "
                  "rebuilt; record the run with Recorder(..., model_factory='module:function')")


def require_runnable(identities: list[CodeIdentity], allow_code: bool) -> None:
    """Raise :class:`CodeRefusedError` with the first refusal's message, if any."""
    for ident in identities:
        if not ident.may_run(allow_code):
            raise CodeRefusedError(ident.message)


def load_verified_module(ident: dict, allow_code: bool, code_roots: list | None = None):
    """Import the module of a code identity in *this* process, checking the bytes it runs.

    Called in the replay's child process. The file is read once; its SHA-256 and its
    definitions are checked on those bytes, which are then compiled and executed as the
    module (no window in which the file could be swapped). Parent packages are imported
    normally. Returns the callable named by ``qualname``, after checking that it really
    is a function or class defined in that file.
    """
    import importlib
    import importlib.util
    import inspect
    import types

    from .policy import check_factory_allowed

    module, qualname, local = ident["module"], ident["qualname"], ident["local_file"]
    if ident["status"] in NEVER or code_roots is None:
        raise CodeRefusedError(ident.get("message") or f"{ident['spec']}: refusing to run it")
    refusal = check_factory_allowed(local, code_roots, role=ident["role"], spec=ident["spec"])
    if refusal is not None:
        raise CodeRefusedError(refusal)
    data = Path(local).read_bytes()
    sha = _sha256_bytes(data)
    if not defines(data, qualname):
        raise CodeRefusedError(MSG_NOT_DEFINED.format(role=ident["role"], spec=ident["spec"],
                                                      qualname=qualname, local=local))
    if sha != ident.get("local_sha256") or (ident["status"] != VERIFIED and not allow_code):
        raise CodeRefusedError(f"{ident['spec']}: {local} changed while the replay started; "
                               "refusing to run it")
    if "." in module:
        importlib.import_module(module.rpartition(".")[0])
    spec = importlib.util.spec_from_file_location(module, local)
    mod = importlib.util.module_from_spec(spec) if spec else types.ModuleType(module)
    mod.__file__ = local
    sys.modules[module] = mod
    exec(compile(data, local, "exec"), mod.__dict__)  # noqa: S102 (the verified bytes)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    target = inspect.unwrap(obj) if callable(obj) else obj
    if inspect.ismethod(target):
        target = target.__func__
    ok = False
    if inspect.isclass(target):
        ok = target.__module__ == module
    elif inspect.isfunction(target):
        ok = os.path.realpath(target.__code__.co_filename) == os.path.realpath(local)
    if not ok:
        raise CodeRefusedError(MSG_NOT_DEFINED.format(role=ident["role"], spec=ident["spec"],
                                                      qualname=qualname, local=local))
    return obj


def needs_trust(run_path, idents) -> bool:
    """Whether replaying this run asks the visitor to trust its code.

    Every run does, except a bundled sample whose factory the recorded hash covers
    (``idents``: :func:`identify_capture`'s entries, as dicts with a ``status``)."""
    from .policy import is_bundled_sample

    return bool(idents) and (not is_bundled_sample(run_path)
                             or any(i["status"] in NEEDS_ALLOW for i in idents))
