"""Who decides which code a replay may run: the viewer's side, never the run.

A capture names its model factory (``module:qualname``), the SHA-256 of its source file
and the factory's keyword arguments. All three are written by whoever made the run, so
a hash proves *which* file, not who chose the function or its arguments: a capture can
name any public function whose file it knows the hash of (``debugkit._fsutil:
atomic_write_json`` with ``path``/``obj``, ``debugkit.cli:main`` with ``argv``). So,
whatever the capture says:

- **Folders.** The factory's (and step function's) source file must lie inside a folder
  that the person running the replay allows (:func:`code_roots`), and never inside
  debugkit itself, the standard library or an installed package's folder
  (:func:`forbidden_dirs`), even when an allowed folder contains them (a checkout's
  ``debugkit/``, a ``.venv`` inside a project), nor inside a run directory or a served
  store (:func:`run_or_store_holding`). :func:`check_factory_allowed` decides.
- **Arguments.** ``factory_kwargs`` are plain data only (:func:`check_plain_kwargs`):
  JSON scalars, lists and string-keyed dicts of them, bounded in depth and size.
- **Result.** The child checks that the factory returned a ``torch.nn.Module`` before it
  does anything else with it (:mod:`debugkit.replay.child`).

Who allows folders:

- The command line (``debugkit replay``): its user is the operator of their own machine.
  The allowed folders are ``$DEBUGKIT_CODE_ROOTS`` when set, else the working directory,
  plus each ``--code-root DIR``. The folder a capture *recorded* is not allowed by
  default: a stranger's run can record any path.
- The dashboard: a visitor is not the operator. The allowed folders are
  ``$DEBUGKIT_CODE_ROOTS`` when set (for every run); when it is unset, only the bundled
  sample runs may run code, and only from the bundled ``examples/`` folder
  (:func:`server_code_roots`). Who may *trust* code the hash does not cover is
  :func:`may_trust_code`.
"""

from __future__ import annotations

import math
import os
import site
import sys
import sysconfig
from pathlib import Path

from ..errors import CodeRefusedError

#: ``os.pathsep``-separated folders whose code a replay may run (the operator's setting).
ENV_CODE_ROOTS = "DEBUGKIT_CODE_ROOTS"
#: Who may tick the dashboard's "I trust this code": ``signed-in`` (default: signed-in
#: users of a server with ``[auth]``), ``anyone`` (every visitor; for a server only you
#: can reach) or ``nobody``.
ENV_CODE_TRUST = "DEBUGKIT_CODE_TRUST"
TRUST_CHOICES = ("signed-in", "anyone", "nobody")

#: Limits of ``factory_kwargs``: nesting depth, number of values, length of one string.
KWARGS_MAX_DEPTH = 8
KWARGS_MAX_ITEMS = 10_000
KWARGS_MAX_STR = 10_000

PKG_DIR = Path(__file__).resolve().parents[1]
#: The bundled samples and the code that recorded them (a checkout's examples/).
SAMPLES_DIR = PKG_DIR.parent / "sample_runs"
EXAMPLES_DIR = PKG_DIR.parent / "examples"

MSG_NOT_ALLOWED = ("{role} {spec}: {local} is outside the folders whose code this replay may run "
                   "({roots}); {hint}")
HINT_CLI = ("pass --code-root DIR, DIR being the project folder that holds the code (the "
            "replay then both imports from it and allows it), run from that folder, or set "
            "DEBUGKIT_CODE_ROOTS")
HINT_SERVER = "the server's operator allows folders with DEBUGKIT_CODE_ROOTS"
MSG_FORBIDDEN = ("{role} {spec}: {local} is inside {what} ({where}), whose functions are not "
                 "model factories; refusing to run it")
MSG_IN_RUN = ("{role} {spec}: {local} lies inside {what}; code that ships inside a run never runs "
             "as replay code, whatever the code roots say (keep model code outside run folders "
             "and the run store)")
MSG_BAD_KWARGS = ("{where}: factory_kwargs{at} is {what}; only plain data (strings, numbers, "
                  "booleans, null, lists and objects of them) may be passed to a model factory")
MSG_BAD_TRUST = "DEBUGKIT_CODE_TRUST={value!r}: expected one of " + ", ".join(TRUST_CHOICES)


def _resolved(paths) -> list[Path]:
    out = []
    for p in paths:
        try:
            r = Path(p).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if r not in out:
            out.append(r)
    return out


def _run_folder_above(path: Path) -> Path | None:
    """The nearest folder above ``path`` that holds a ``manifest.json`` (a run), or None."""
    for d in path.parents:
        try:
            if (d / "manifest.json").is_file():
                return d
        except OSError:
            continue
    return None


def served_stores() -> list[Path]:
    """Folders that hold other people's runs, whose files never run as code: the run
    store (``$DEBUGKIT_STORE``, default ``./runs``, where ``debugkit ui`` puts uploads)
    and the local folders the dashboard serves (``$DEBUGKIT_ROOTS``)."""
    from ..errors import DebugkitError
    from ..io.fs import as_path, is_local, split_roots

    out = [os.environ.get("DEBUGKIT_STORE", "runs")]
    for r in split_roots(os.environ.get("DEBUGKIT_ROOTS", "")):
        try:
            p = as_path(r)
        except DebugkitError:
            continue
        if is_local(p):
            out.append(p)
    return _resolved(out)


def run_or_store_holding(path: Path) -> str | None:
    """What makes ``path`` (resolved) a file of a run: ``"the run <folder>"``, ``"the
    run store <folder>"``, or None."""
    run = _run_folder_above(path)
    if run is not None:
        return f"the run {run} (a folder with a manifest.json)"
    for store in served_stores():
        if path == store or store in path.parents:
            return f"the run store {store}"
    return None


def forbidden_dirs() -> list[tuple[Path, str]]:
    """``(folder, what)`` whose code never runs as a factory: debugkit, the standard
    library, and every installed-package folder this interpreter knows."""
    out: list[tuple[Path, str]] = [(PKG_DIR, "debugkit itself")]
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        if paths.get(key):
            out.append((Path(paths[key]), "Python's standard library"))
    sites = [paths.get("purelib"), paths.get("platlib")]
    try:
        sites += list(site.getsitepackages())
    except AttributeError:  # virtualenv's old site.py
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    sites.append(user)
    sites += [p for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")]
    for s in sites:
        if s:
            out.append((Path(s), "an installed package's folder"))
    return [(r, what) for (p, what) in out for r in _resolved([p])]


def _forbidden(path: Path) -> tuple[Path, str] | None:
    for d, what in forbidden_dirs():
        if path == d or d in path.parents:
            return d, what
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return path.parent, "an installed package's folder"
    return None


def env_code_roots() -> list[Path] | None:
    """``$DEBUGKIT_CODE_ROOTS`` resolved, or None when it is unset."""
    env = os.environ.get(ENV_CODE_ROOTS)
    if env is None:
        return None
    return _resolved(p for p in env.split(os.pathsep) if p.strip())


def cli_code_roots(extra=()) -> list[Path]:
    """The command line's allowed folders: ``$DEBUGKIT_CODE_ROOTS`` (else the working
    directory) plus ``extra`` (``--code-root``)."""
    env = env_code_roots()
    return _resolved([*(env if env is not None else [os.getcwd()]), *extra])


def server_code_roots(run_path) -> list[Path]:
    """The dashboard's allowed folders for the run at ``run_path``.

    ``$DEBUGKIT_CODE_ROOTS`` when set; otherwise the bundled ``examples/`` folder for a
    bundled sample run, and nothing for any other run (uploads, ``DEBUGKIT_ROOTS``).
    """
    env = env_code_roots()
    if env is not None:
        return env
    return _resolved([EXAMPLES_DIR]) if is_bundled_sample(run_path) else []


def is_bundled_sample(run_path) -> bool:
    """Whether ``run_path`` is one of the sample runs shipped with debugkit."""
    try:
        return Path(run_path).resolve().is_relative_to(SAMPLES_DIR.resolve())
    except (OSError, ValueError):
        return False


#: The only functions inside debugkit that a capture may name: the replay helpers that
#: the framework integrations record (docs/integrations.md). Each builds nothing but a
#: model (``model_from_config`` accepts only a ``PreTrainedModel`` class that
#: ``transformers`` exports, from a plain-data config) or calls the rebuilt model
#: (``model.training_step(batch, 0)``, ``model(**batch)``); they still pass the hash check.
TRUSTED_HELPERS = {
    "debugkit.integrations.lightning:replay_training_step": "integrations/lightning.py",
    "debugkit.integrations.transformers:model_from_config": "integrations/transformers.py",
    "debugkit.integrations.transformers:replay_training_step": "integrations/transformers.py",
}


def is_trusted_helper(local_file, spec: str) -> bool:
    """Whether ``spec`` is one of :data:`TRUSTED_HELPERS` and ``local_file`` is its file in
    the debugkit package running this code."""
    rel = TRUSTED_HELPERS.get(spec)
    try:
        return rel is not None and Path(local_file).resolve() == (PKG_DIR / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def check_factory_allowed(local_file, roots, *, role: str = "model_factory", spec: str = "",
                          hint: str = HINT_CLI) -> str | None:
    """Why the source file ``local_file`` may not run (a message), or None when it may.

    It may run when, resolved (symlinks followed), it lies inside one of ``roots``,
    inside none of :func:`forbidden_dirs`, and inside no run (a folder with a
    ``manifest.json`` above it) nor a served store (:func:`run_or_store_holding`), or
    when it is one of debugkit's :data:`TRUSTED_HELPERS`. Code that ships inside a run is
    the run author's choice, whatever its hash and whatever the code roots say.
    """
    try:
        p = Path(local_file).resolve()
    except (OSError, RuntimeError, ValueError):
        return MSG_NOT_ALLOWED.format(role=role, spec=spec, local=local_file, roots="none", hint=hint)
    if is_trusted_helper(p, spec):
        return None
    bad = _forbidden(p)
    if bad is not None:
        return MSG_FORBIDDEN.format(role=role, spec=spec, local=p, what=bad[1], where=bad[0])
    in_run = run_or_store_holding(p)
    if in_run is not None:
        return MSG_IN_RUN.format(role=role, spec=spec, local=p, what=in_run)
    allowed = _resolved(roots or [])
    if not any(p == r or r in p.parents for r in allowed):
        return MSG_NOT_ALLOWED.format(role=role, spec=spec, local=p, hint=hint,
                                      roots=", ".join(str(r) for r in allowed) or "none")
    return None


def check_plain_kwargs(kwargs, where: str = "the capture") -> dict:
    """Return ``kwargs`` if it is plain data, else raise :class:`CodeRefusedError`."""
    count = [0]

    def bad(at, what):
        raise CodeRefusedError(MSG_BAD_KWARGS.format(where=where, at=at, what=what))

    def walk(v, at, depth):
        count[0] += 1
        if count[0] > KWARGS_MAX_ITEMS:
            bad("", f"larger than {KWARGS_MAX_ITEMS} values")
        if depth > KWARGS_MAX_DEPTH:
            bad(at, f"nested deeper than {KWARGS_MAX_DEPTH} levels")
        if v is None or isinstance(v, bool) or isinstance(v, int):
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                bad(at, f"the non-finite number {v!r}")
            return
        if isinstance(v, str):
            if len(v) > KWARGS_MAX_STR:
                bad(at, f"a string of {len(v)} characters (at most {KWARGS_MAX_STR})")
            return
        if isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{at}[{i}]", depth + 1)
            return
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    bad(at, f"an object with the non-string key {str(k)[:40]!r}")
                walk(x, f"{at}[{k[:40]!r}]", depth + 1)
            return
        bad(at, f"a {type(v).__name__}")

    if not isinstance(kwargs, dict):
        bad("", f"a {type(kwargs).__name__}, not an object")
    walk(kwargs, "", 0)
    return kwargs


def code_trust_setting() -> str:
    value = os.environ.get(ENV_CODE_TRUST, "signed-in").strip().lower()
    if value not in TRUST_CHOICES:
        from ..errors import InvalidInputError

        raise InvalidInputError(MSG_BAD_TRUST.format(value=value[:40]))
    return value


def may_trust_code(auth_configured: bool, signed_in: bool) -> bool:
    """Whether a dashboard visitor may allow code that the recorded hash does not cover.

    ``signed-in`` (the default): only a signed-in user of a server with ``[auth]``; an
    anonymous visitor of an open server cannot. ``anyone``: every visitor (the
    operator's choice, for a server only they can reach). ``nobody``: no visitor.
    """
    setting = code_trust_setting()
    if setting == "anyone":
        return True
    if setting == "nobody":
        return False
    return bool(auth_configured and signed_in)
