"""Which paths this server may open: the ``$DEBUGKIT_ALLOWED_ROOTS`` allow-list.

Unset (local use), any local path may be opened, and a URL only under a URL root the
operator serves (``$DEBUGKIT_ROOTS``): a typed ``http://127.0.0.1:.../x`` never makes the
server send a request nobody allowed. Set (a shared dashboard), a typed path, a run, and
every link inside a run must resolve inside one of its folders or URLs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidInputError
from .fs import as_path, is_local, is_remote, split_roots

#: The refusals name what was asked for, never the allowed folders (server paths).
MSG_NOT_ALLOWED = "{path}: outside the folders this server may open; see DEBUGKIT_ALLOWED_ROOTS"
MSG_URL_NOT_ALLOWED = ("{url}: this server opens a URL only under a root its operator names "
                       "(DEBUGKIT_ALLOWED_ROOTS, or DEBUGKIT_ROOTS when that is unset); none names it")


def allowed_roots() -> list[Path] | None:
    """The allow-list from ``$DEBUGKIT_ALLOWED_ROOTS`` (os.pathsep-separated), or None
    when unset (local use: any path may be opened)."""
    env = os.environ.get("DEBUGKIT_ALLOWED_ROOTS")
    if not env:
        return None
    roots = [as_path(p) for p in split_roots(env)]
    return [Path(r).resolve() if is_local(r) else str(r).rstrip("/") for r in roots]


def served_url_roots() -> list[str]:
    """The URL roots the operator serves (``$DEBUGKIT_ROOTS``), without a trailing ``/``."""
    return [r.rstrip("/") for r in split_roots(os.environ.get("DEBUGKIT_ROOTS", "")) if is_remote(r)]


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:100] + f"... ({len(text)} characters)"


def check_allowed(path: Path) -> Path:
    """Return ``path`` resolved (symlinks followed) if the allow-list permits it.

    A URL (other than ``file://``) is allowed when it lies under a URL root of
    ``$DEBUGKIT_ALLOWED_ROOTS``, or, when that is unset, of ``$DEBUGKIT_ROOTS``: it is
    checked as text before anything is fetched, so a refused URL sends no request."""
    if is_remote(path):
        _check_url(path)
    p = as_path(path) if isinstance(path, str) else path
    if not is_local(p):
        _check_url(str(p))
        return p
    resolved = Path(p).expanduser().resolve()
    allowed = allowed_roots()
    if allowed is None:
        return resolved
    for root in allowed:
        if isinstance(root, Path) and (resolved == root or root in resolved.parents):
            return resolved
    raise InvalidInputError(MSG_NOT_ALLOWED.format(path=path))


def _check_url(url: str) -> None:
    allowed = allowed_roots()
    roots = [r for r in allowed if isinstance(r, str)] if allowed is not None else served_url_roots()
    text = url.rstrip("/")
    for root in roots:
        if _same_or_under(text, root):
            return
    if allowed is not None:
        raise InvalidInputError(MSG_NOT_ALLOWED.format(path=_short(url)))
    raise InvalidInputError(MSG_URL_NOT_ALLOWED.format(url=_short(url)))


def _same_or_under(text: str, root: str) -> bool:
    """``text`` is ``root`` or below it, compared on the URL's scheme and host
    case-insensitively, and never by a prefix of a name (``s3://b/runs2`` is not under
    ``s3://b/runs``; ``http://host:80/runs/../x`` is not under ``http://host:80/runs``)."""
    from urllib.parse import urlsplit

    a, b = urlsplit(text), urlsplit(root)
    if (a.scheme.lower(), a.netloc.lower()) != (b.scheme.lower(), b.netloc.lower()):
        return False
    if a.query or a.fragment or any(seg in ("..", ".") for seg in a.path.split("/")):
        return False
    base = b.path.rstrip("/")
    return a.path.rstrip("/") == base or a.path.startswith(base + "/")


MSG_LINK_OUTSIDE = ("{path}: a link to {target}, outside the folders this server may open; "
                    "see DEBUGKIT_ALLOWED_ROOTS")


def is_allowed(path) -> bool:
    """Whether :func:`check_allowed` would accept ``path``."""
    try:
        check_allowed(path)
    except (InvalidInputError, OSError, RuntimeError, ValueError):
        return False
    return True


def check_run_tree(run_dir) -> None:
    """Refuse a local run whose folder, or any link inside it, resolves outside
    ``$DEBUGKIT_ALLOWED_ROOTS`` (a run's ``env.json`` linked to ``/etc/passwd``).

    Nothing is checked when the allow-list is unset (local use) or for URLs (object
    stores have no links). Raises :class:`InvalidInputError` naming the link.
    """
    allowed = allowed_roots()
    p = as_path(run_dir) if isinstance(run_dir, str) else run_dir
    if allowed is None or not is_local(p):
        return
    check_allowed(p)
    local = [r for r in allowed if isinstance(r, Path)]

    def inside(target: Path) -> bool:
        return any(target == r or r in target.parents for r in local)

    for top, dirs, files in os.walk(p, followlinks=False):
        for name in dirs + files:
            full = os.path.join(top, name)
            if os.path.islink(full):
                target = Path(os.path.realpath(full))
                if not inside(target):
                    raise InvalidInputError(MSG_LINK_OUTSIDE.format(
                        path=full, target=target))
