"""Which paths this server may open: the ``$DEBUGKIT_ALLOWED_ROOTS`` allow-list.

Unset (local use), any path may be opened. Set (a shared dashboard), a typed path, a
run, and every link inside a run must resolve inside one of its folders or URLs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidInputError
from .fs import as_path, is_local, split_roots

MSG_NOT_ALLOWED = "{path}: outside the folders this server may open ({roots}); see DEBUGKIT_ALLOWED_ROOTS"


def allowed_roots() -> list[Path] | None:
    """The allow-list from ``$DEBUGKIT_ALLOWED_ROOTS`` (os.pathsep-separated), or None
    when unset (local use: any path may be opened)."""
    env = os.environ.get("DEBUGKIT_ALLOWED_ROOTS")
    if not env:
        return None
    roots = [as_path(p) for p in split_roots(env)]
    return [Path(r).resolve() if is_local(r) else str(r).rstrip("/") for r in roots]


def check_allowed(path: Path) -> Path:
    """Return ``path`` resolved (symlinks followed) if the allow-list permits it.

    A URL is allowed when it lies under an allowed URL root."""
    p = as_path(path) if isinstance(path, str) else path
    if not is_local(p):
        url = p
        allowed = allowed_roots()
        if allowed is None:
            return url
        text = str(url).rstrip("/")
        for root in allowed:
            if isinstance(root, str) and (text == root or text.startswith(root + "/")):
                return url
        raise InvalidInputError(MSG_NOT_ALLOWED.format(
            path=path, roots=", ".join(str(r) for r in allowed)))
    resolved = Path(p).expanduser().resolve()
    allowed = allowed_roots()
    if allowed is None:
        return resolved
    for root in allowed:
        if isinstance(root, Path) and (resolved == root or root in resolved.parents):
            return resolved
    raise InvalidInputError(MSG_NOT_ALLOWED.format(
        path=path, roots=", ".join(str(r) for r in allowed)))


MSG_LINK_OUTSIDE = ("{path}: a link to {target}, outside the folders this server may open "
                    "({roots}); see DEBUGKIT_ALLOWED_ROOTS")


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
                        path=full, target=target, roots=", ".join(str(r) for r in allowed)))
