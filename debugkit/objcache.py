"""Runs in an object store read from one listing and one batched fetch, not a request per file.

A page that opens a run at an ``s3://`` URL asks dozens of small questions (does the
manifest exist, which ranks are there, is this a folder, read these eight small files...).
On a real network each is a round trip (20-80 ms), and the readers ask them one after the
other. This module answers them from memory and the local cache instead:

- **Listings are remembered.** Every flat listing (``find``) of a prefix is kept for
  :data:`LISTING_TTL_S` seconds, and ``info``/``exists``/``isdir``/``isfile``/``ls``/``find``
  of any path under that prefix are answered from it, without a request. A run list's one
  listing of the store root (:func:`debugkit.io.fs.list_tree`) so answers for every run.
- **A run is prefetched.** :func:`prefetch` (called by
  :func:`debugkit.io.resolve.resolve_run_path` for a run folder at a URL, and by the run
  list for runs it has to analyse) lists the run (one request, or none when a fresh listing
  covers it) and fetches every small file the cache lacks in one concurrent batch
  (:data:`FETCH_CONCURRENCY` requests in flight), into ``$DEBUGKIT_CACHE/objects/``. Reads
  (``open``, ``cat``) of those files are then served from the cache. A prefetched run's
  listing is refreshed when it is older than :data:`LISTING_TTL_S` (one request), and only
  files whose size or stamp changed are fetched again.
- **Keyed by what the store says.** A cached object is named by a digest of its URL, size,
  ETag and modification stamp: a file rewritten in the bucket is another object; nothing
  stale is served beyond the listing's :data:`LISTING_TTL_S`.
- **Bounded.** The objects are ordinary cache entries (evicted least recently used to keep
  ``$DEBUGKIT_CACHE_MAX_MB``); files over :data:`PREFETCH_MAX_FILE_BYTES` (checkpoint
  weights, big profiles) and anything beyond a quarter of the cache's bound are not
  prefetched but read in place when asked for. A write through the same filesystem drops
  the listings that cover it.

It works by giving the fsspec filesystem class of an object-store scheme a subclass
(:func:`enable`, applied by :func:`debugkit.location.as_path`), so every reader that goes
through ``UPath``/fsspec benefits without knowing. Layer 0: nothing here reads a run.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import os
import threading
import time
from pathlib import Path

from .runpack import PACK

log = logging.getLogger(__name__)

#: How long a listing answers for the paths under it (seconds), unless
#: ``$DEBUGKIT_LISTING_TTL_S`` says otherwise (:func:`listing_ttl_s`). A file added to the
#: bucket is seen within this time.
LISTING_TTL_S = 2.0
MSG_BAD_TTL = "DEBUGKIT_LISTING_TTL_S={value!r}: expected a number of seconds >= 0"
#: Files up to this size are prefetched with their run; larger ones are read in place.
PREFETCH_MAX_FILE_BYTES = 4 << 20
#: Requests in flight at once in a prefetch batch (the S3 client's connection pool is set
#: to match in :data:`debugkit.location.STORAGE_OPTIONS`).
FETCH_CONCURRENCY = 64
#: Listings kept per filesystem (least recently made dropped first).
MAX_LISTINGS = 256
OBJECTS = "objects"

_ENABLED: dict[type, type] = {}
_ENABLED_LOCK = threading.Lock()


def enable(cls: type) -> type:
    """The listing- and prefetch-aware subclass of an async fsspec filesystem class
    (``cls`` itself for other classes)."""
    from fsspec.asyn import AsyncFileSystem

    if not (isinstance(cls, type) and issubclass(cls, AsyncFileSystem)) or issubclass(cls, _Remembering):
        return cls
    from fsspec.asyn import sync_wrapper

    with _ENABLED_LOCK:
        sub = _ENABLED.get(cls)
        if sub is None:
            ns = {"__module__": cls.__module__, "__doc__": cls.__doc__}
            # the backend's own sync methods (s3fs: ``isdir = sync_wrapper(_isdir)``) call
            # its coroutines; the subclass's call these
            for name in _OVERRIDDEN:
                ns[name] = sync_wrapper(getattr(_Remembering, "_" + name))
            # a fresh listing answers in the calling thread: no hop to fsspec's loop
            # thread (a cold run list asks ~110 such questions per run)
            for name in _ANSWERED:
                ns[name] = _answered_first(name, ns[name])
            sub = type(cls.__name__, (_Remembering, cls), ns)
            _ENABLED[cls] = sub
    return sub


class _Listing:
    __slots__ = ("prefix", "made", "files", "dirs", "pinned")

    def __init__(self, prefix: str, found: dict, pinned: bool):
        self.prefix, self.made, self.pinned = prefix, time.monotonic(), pinned
        self.files: dict[str, dict] = {}
        self.dirs: set[str] = {prefix}
        for name, info in found.items():
            name = name.rstrip("/")
            if info.get("type") == "directory":
                if name.startswith(prefix + "/"):
                    self.dirs.add(name)
                continue
            if not name.startswith(prefix + "/"):
                continue
            self.files[name] = info
            parent = name.rpartition("/")[0]
            while len(parent) > len(prefix) and parent not in self.dirs:
                self.dirs.add(parent)
                parent = parent.rpartition("/")[0]

    def fresh(self) -> bool:
        return time.monotonic() - self.made < listing_ttl_s()

    def covers(self, path: str) -> bool:
        return path == self.prefix or path.startswith(self.prefix + "/")

    def dir_info(self, path: str) -> dict:
        return {"name": path, "size": 0, "type": "directory", "Key": path,
                "StorageClass": "DIRECTORY"}


def listing_ttl_s() -> float:
    """How long a listing of an object store answers (seconds): ``$DEBUGKIT_LISTING_TTL_S``
    (a store written rarely may take longer, fewer requests), default :data:`LISTING_TTL_S`."""
    value = os.environ.get("DEBUGKIT_LISTING_TTL_S")
    if value is None or not value.strip():
        return LISTING_TTL_S
    try:
        ttl = float(value)
    except ValueError:
        ttl = -1.0
    if not ttl >= 0 or ttl == float("inf"):
        from .errors import InvalidInputError

        raise InvalidInputError(MSG_BAD_TTL.format(value=value[:40]))
    return ttl


def _stamp(info: dict) -> str:
    return "|".join(str(info.get(k)) for k in ("ETag", "etag", "LastModified", "mtime", "updated",
                                               "generation") if info.get(k) is not None)


class _Remembering:
    """Mixed in before an async fsspec filesystem class (see :func:`enable`)."""

    # ------------------------------------------------------------------ the remembered listings
    def _dk_state(self):
        st = self.__dict__.get("_dk")
        if st is None:
            st = self.__dict__.setdefault("_dk", {"listings": {}, "lock": threading.Lock()})
        return st

    def _dk_norm(self, path) -> str:
        return self._strip_protocol(str(path)).rstrip("/")  # type: ignore[attr-defined]

    def _dk_covering(self, path: str):
        """The fresh listing covering ``path`` (the deepest), or None; a stale pinned one
        is returned too, marked for refresh by the caller."""
        st = self._dk_state()
        listings = st["listings"]
        p = path
        with st["lock"]:
            while True:  # the listings covering a path are those of it and its parents
                lst = listings.get(p)
                if lst is not None:
                    if lst.fresh() or lst.pinned:
                        return lst
                    del listings[p]
                if not p:
                    return None
                p = p.rpartition("/")[0]

    def _dk_remember(self, prefix: str, found: dict, pinned: bool = False,
                     made: float | None = None) -> _Listing:
        st = self._dk_state()
        lst = _Listing(prefix, found, pinned)
        if made is not None:
            lst.made = made  # a part of an older listing keeps that listing's age
        with st["lock"]:
            old = st["listings"].pop(prefix, None)
            lst.pinned = pinned or bool(old and old.pinned)
            st["listings"][prefix] = lst
            while len(st["listings"]) > MAX_LISTINGS:
                st["listings"].pop(next(iter(st["listings"])))
        return lst

    def _dk_forget(self, path) -> None:
        path = self._dk_norm(path)
        st = self._dk_state()
        with st["lock"]:
            for prefix in [p for p, lst in st["listings"].items()
                           if lst.covers(path) or path.startswith(p + "/") or p.startswith(path + "/")]:
                del st["listings"][prefix]

    async def _dk_lookup(self, path: str):
        lst = self._dk_covering(path)
        if lst is not None and not lst.fresh():  # a prefetched run: listed again, once
            found = await super()._find(lst.prefix, detail=True)  # type: ignore[misc]
            lst = self._dk_remember(lst.prefix, found, pinned=True)
            await self._dk_fetch(_wanted(self, lst))
        return lst

    # ------------------------------------------------------------------ the cached objects
    def _dk_object(self, key: str, info: dict) -> Path:
        st = self._dk_state()
        fsid = st.get("fsid")
        if fsid is None:
            try:
                fsid = str(self.fsid)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a backend without an fsid
                fsid = type(self).__name__
            st["fsid"] = fsid
        digest = hashlib.sha256(f"{fsid}|{key}|{info.get('size')}|{_stamp(info)}".encode()).hexdigest()
        return _objects_dir() / digest[:40]

    def _dk_cached(self, path: str, lst):
        """The cache file holding ``path``'s current content (as the listing ``lst`` has
        it), or None."""
        if lst is None or not lst.fresh():
            return None
        info = lst.files.get(path)
        if info is None:
            return None
        f = self._dk_object(path, info)
        try:
            if f.stat().st_size == int(info.get("size") or 0):
                return f
        except OSError:
            pass
        return None

    def _dk_put(self, dest: Path, data: bytes) -> bool:
        """Write ``data`` as the cache object ``dest`` (atomically)."""
        tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}-{threading.get_ident()}")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, dest)
        except OSError:
            return False
        return True

    async def _dk_get_many(self, keys: list[str]) -> list:
        """The content of each of ``keys`` (one GET each, concurrently), None where it
        failed."""
        sem = asyncio.Semaphore(FETCH_CONCURRENCY)
        cat = super()._cat_file  # type: ignore[misc]
        kw = {"max_concurrency": 1} if "max_concurrency" in inspect.signature(cat).parameters else {}

        async def one(key):
            async with sem:
                try:
                    return await cat(key, **kw)
                except Exception:  # noqa: BLE001 - the files are read one by one instead
                    return None

        return list(await asyncio.gather(*(one(k) for k in keys)))

    async def _dk_fetch(self, items) -> int:
        """Fetch ``[(key, info)]`` not yet cached, concurrently, into the cache; returns how
        many were fetched."""
        todo = [(k, i, self._dk_object(k, i)) for k, i in items]
        todo = [(k, i, f) for k, i, f in todo if not f.is_file()]
        if not todo:
            return 0
        from ._fsutil import trim_cache

        trim_cache(reserve=sum(_on_disk(i) for _, i, _ in todo))  # room within the bound
        folder = todo[0][2].parent
        folder.mkdir(parents=True, exist_ok=True)
        sem = asyncio.Semaphore(FETCH_CONCURRENCY)
        cat = super()._cat_file  # type: ignore[misc]
        kw = {"max_concurrency": 1} if "max_concurrency" in inspect.signature(cat).parameters else {}

        async def one(key, info, dest):
            async with sem:
                try:
                    data = await cat(key, **kw)
                except Exception:  # noqa: BLE001 - not cached: read in place when asked for
                    return 0
            if len(data) != int(info.get("size") or 0):
                return 0  # rewritten since it was listed: read in place
            return 1 if self._dk_put(dest, data) else 0

        n = sum(await asyncio.gather(*(one(k, i, f) for k, i, f in todo)))
        trim_cache()  # what the files really take on disk (a file system may allocate more)
        return n

    # ------------------------------------------------------------------ fsspec's methods
    # Each question is answered by ``_dk_answer_<name>(lst, ...)`` from the listing ``lst``
    # covering the path; the coroutine finds (or renews) that listing first, and the
    # class's sync method (see _answered_first) tries a fresh one in the calling thread.
    def _dk_answer_info(self, lst, p, path, *args, **kwargs):
        if p in lst.files:
            return dict(lst.files[p])
        if p in lst.dirs:
            return lst.dir_info(p)
        raise FileNotFoundError(path)

    def _dk_answer_exists(self, lst, p, path, *args, **kwargs):
        return p in lst.files or p in lst.dirs

    def _dk_answer_isdir(self, lst, p, path):
        return p in lst.dirs

    def _dk_answer_isfile(self, lst, p, path):
        return p in lst.files

    def _dk_answer_ls(self, lst, p, path, detail=False, **kwargs):
        if p in lst.dirs:
            out = [dict(i) for k, i in lst.files.items() if k.rpartition("/")[0] == p]
            out += [lst.dir_info(d) for d in lst.dirs if d != p and d.rpartition("/")[0] == p]
            out.sort(key=lambda i: i["name"])
            return out if detail else [i["name"] for i in out]
        if p in lst.files:
            return [dict(lst.files[p])] if detail else [p]
        raise FileNotFoundError(path)

    def _dk_answer_find(self, lst, p, path, maxdepth=None, withdirs=None, detail=False, **kwargs):
        if p in lst.files and p not in lst.dirs:
            out = {p: dict(lst.files[p])}
        else:
            out = {k: dict(i) for k, i in lst.files.items() if k.startswith(p + "/")}
            if withdirs:
                out.update({d: lst.dir_info(d) for d in lst.dirs if d.startswith(p + "/")})
        out = dict(sorted(out.items()))
        return out if detail else list(out)

    @staticmethod
    def _dk_answerable(name, args, kwargs) -> bool:
        """Whether a listing can answer this call (options a listing knows nothing of
        go to the backend)."""
        if name in ("info", "ls"):
            return not args and not any(v for k, v in kwargs.items() if k != "detail")
        if name == "find":
            return not args and kwargs.get("maxdepth") is None and \
                not any(v for k, v in kwargs.items() if k not in ("maxdepth", "withdirs", "detail"))
        return True

    async def _info(self, path, *args, **kwargs):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p) if self._dk_answerable("info", args, kwargs) else None
        if lst is not None:
            return self._dk_answer_info(lst, p, path)
        return await super()._info(path, *args, **kwargs)  # type: ignore[misc]

    async def _exists(self, path, *args, **kwargs):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p)
        if lst is not None:
            return self._dk_answer_exists(lst, p, path)
        return await super()._exists(path, *args, **kwargs)  # type: ignore[misc]

    async def _isdir(self, path):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p)
        if lst is not None:
            return self._dk_answer_isdir(lst, p, path)
        return await super()._isdir(path)  # type: ignore[misc]

    async def _isfile(self, path):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p)
        if lst is not None:
            return self._dk_answer_isfile(lst, p, path)
        return await super()._isfile(path)  # type: ignore[misc]

    async def _ls(self, path, detail=False, **kwargs):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p) if self._dk_answerable("ls", (), kwargs) else None
        if lst is not None:
            return self._dk_answer_ls(lst, p, path, detail=detail)
        return await super()._ls(path, detail=detail, **kwargs)  # type: ignore[misc]

    async def _find(self, path, maxdepth=None, withdirs=None, detail=False, **kwargs):
        p = self._dk_norm(path)
        lst = await self._dk_lookup(p)
        if lst is None or maxdepth is not None or any(kwargs.values()):
            found = await super()._find(path, maxdepth=maxdepth, withdirs=withdirs,  # type: ignore[misc]
                                        detail=True, **kwargs)
            if maxdepth is None and not withdirs and not any(kwargs.values()) and p and found \
                    and all(k.startswith(p + "/") for k in found):
                self._dk_remember(p, found)  # one flat listing answers for everything under it
            return found if detail else sorted(found)
        return self._dk_answer_find(lst, p, path, withdirs=withdirs, detail=detail)

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        p = self._dk_norm(path)
        f = self._dk_cached(p, await self._dk_lookup(p))
        if f is not None:
            try:
                data = f.read_bytes()
            except OSError:
                data = None
            if data is not None:
                return data[start:end] if (start is not None or end is not None) else data
        return await super()._cat_file(path, start=start, end=end, **kwargs)  # type: ignore[misc]

    def _open(self, path, mode="rb", *args, **kwargs):
        if "r" in mode and "+" not in mode:
            from fsspec.asyn import sync

            p = self._dk_norm(path)
            lst = self._dk_covering(p)
            if lst is None or not lst.fresh():
                lst = sync(self.loop, self._dk_lookup, p)
            f = self._dk_cached(p, lst)
            if f is not None:
                try:
                    return open(f, "rb")
                except OSError:
                    pass
        else:
            self._dk_forget(path)
        return super()._open(path, mode, *args, **kwargs)  # type: ignore[misc]

    # writes through this filesystem drop the listings they make stale
    async def _pipe_file(self, path, *args, **kwargs):
        self._dk_forget(path)
        return await super()._pipe_file(path, *args, **kwargs)  # type: ignore[misc]

    async def _put_file(self, lpath, rpath, *args, **kwargs):
        self._dk_forget(rpath)
        return await super()._put_file(lpath, rpath, *args, **kwargs)  # type: ignore[misc]

    async def _rm_file(self, path, *args, **kwargs):
        self._dk_forget(path)
        return await super()._rm_file(path, *args, **kwargs)  # type: ignore[misc]

    async def _rm(self, path, *args, **kwargs):
        for p in path if isinstance(path, list) else [path]:
            self._dk_forget(p)
        return await super()._rm(path, *args, **kwargs)  # type: ignore[misc]

    async def _cp_file(self, path1, path2, *args, **kwargs):
        self._dk_forget(path2)
        return await super()._cp_file(path1, path2, *args, **kwargs)  # type: ignore[misc]


_OBJECTS_DIR: tuple = (None, None)


def _objects_dir() -> Path:
    """``$DEBUGKIT_CACHE/objects`` (the cache folder made once per setting, not per object)."""
    global _OBJECTS_DIR
    setting = os.environ.get("DEBUGKIT_CACHE")
    if _OBJECTS_DIR[0] != (setting,) or _OBJECTS_DIR[1] is None:
        from ._fsutil import cache_dir

        _OBJECTS_DIR = ((setting,), cache_dir() / OBJECTS)
    return _OBJECTS_DIR[1]


_ANSWERED = ("info", "exists", "isdir", "isfile", "ls", "find")


def _answered_first(name: str, slow):
    """The sync method ``name``: answered from a fresh listing in the calling thread, else
    ``slow`` (the coroutine, on fsspec's loop thread: it lists, renews or asks the store)."""
    answer = getattr(_Remembering, "_dk_answer_" + name)

    def method(self, path, *args, **kwargs):
        if isinstance(path, str) and _Remembering._dk_answerable(name, args, kwargs):
            p = self._dk_norm(path)
            lst = self._dk_covering(p)
            if lst is not None and lst.fresh():
                return answer(self, lst, p, path, *args, **kwargs)
        return slow(self, path, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = getattr(slow, "__doc__", None)
    return method


def _on_disk(info: dict) -> int:
    """Bytes a cached copy takes on disk (whole 4 KiB blocks: the cache's bound counts
    blocks, and a run's many small files take far more than their sizes)."""
    return max(1, -(-int(info.get("size") or 0) // 4096)) * 4096


_OVERRIDDEN = ("info", "exists", "isdir", "isfile", "ls", "find", "cat_file", "pipe_file",
               "put_file", "rm_file", "rm", "cp_file")


def _wanted(fs, lst: _Listing) -> list[tuple[str, dict]]:
    """The files of a listing a prefetch fetches: each up to PREFETCH_MAX_FILE_BYTES, in
    name order, while their total fits a quarter of the cache's bound."""
    from ._fsutil import cache_max_bytes

    budget = cache_max_bytes() // 4
    out = []
    pack = f"{lst.prefix}/{PACK}"
    for key, info in sorted(lst.files.items()):
        if key == pack:
            continue  # read by _fill_from_packs, never as a file
        size = _on_disk(info)
        if int(info.get("size") or 0) > PREFETCH_MAX_FILE_BYTES or size > budget:
            continue
        budget -= size
        out.append((key, info))
    return out


def _fill_from_packs(fs, groups) -> list[tuple[str, dict]]:
    """Put into the cache, from each run's pack (:mod:`debugkit.runpack`; one GET per run,
    all concurrently), the files of ``groups`` (``[(listing of the run, [(key, info)] the
    cache lacks, the run's name for messages)]``) that the pack holds as the listing shows
    them now. Returns the ``(key, info)`` still missing: not packed, changed since the
    pack was written, or the pack unreadable or refused (logged, and kept in
    :func:`pack_problems`)."""
    from fsspec.asyn import sync

    from ._fsutil import trim_cache
    from .errors import DebugkitError
    from .runpack import MAX_PACK_BYTES, member_is_current, read_pack

    rest: list[tuple[str, dict]] = []
    packed = []
    for lst, missing, run in groups:
        pack = lst.files.get(f"{lst.prefix}/{PACK}")
        if pack is None or len(missing) < 2 or int(pack.get("size") or 0) > 2 * MAX_PACK_BYTES:
            rest.extend(missing)  # one file: its own GET costs the same as the pack's
        else:
            packed.append((lst, missing, run, pack))
    if not packed:
        return rest
    trim_cache(reserve=sum(_on_disk(i) for _, m, _, _ in packed for _, i in m))
    datas = sync(fs.loop, fs._dk_get_many, [f"{lst.prefix}/{PACK}" for lst, *_ in packed])
    problems = fs._dk_state().setdefault("pack_problems", {})
    for (lst, missing, run, pack), data in zip(packed, datas):
        members: dict = {}
        if data is not None and len(data) == int(pack.get("size") or 0):
            try:
                members = read_pack(data, run=run)
                problems.pop(lst.prefix, None)
            except DebugkitError as exc:
                log.warning("%s", exc)
                problems[lst.prefix] = str(exc)
        for key, info in missing:
            m = members.get(key[len(lst.prefix) + 1:])
            if m is None or not member_is_current(m, info, pack) \
                    or not fs._dk_put(fs._dk_object(key, info), m["data"]):
                rest.append((key, info))
    trim_cache()
    return rest


def pack_problems(path) -> str | None:
    """Why the pack of the run at ``path`` (a ``UPath``) was refused the last time it was
    read in this process (a :data:`debugkit.runpack.MSG_BAD_PACK` message), or None."""
    fs = _fs_of(path)
    if fs is None:
        return None
    return fs._dk_state().get("pack_problems", {}).get(fs._dk_norm(path.path))


def _fs_of(path):
    fs = getattr(path, "fs", None)
    return fs if isinstance(fs, _Remembering) else None


def prefetch(path) -> bool:
    """Make the folder ``path`` (a ``UPath``) fast to read: list it (one request, none
    when a fresh listing covers it) and fetch its small files the cache lacks in one
    concurrent batch. Reads under it are then answered from memory and the cache, and
    the listing is renewed (one request) when older than :func:`listing_ttl_s`. False when ``path`` is not on an object store
    or holds no file."""
    fs = _fs_of(path)
    if fs is None:
        return False
    from fsspec.asyn import sync

    from ._fsutil import touch_cache_entry

    prefix = fs._dk_norm(path.path)
    try:
        # a fresh listing covering it answers (none is renewed here: its age is kept);
        # a stale one of a prefetched run is listed again; else one flat listing
        lst = sync(fs.loop, fs._dk_lookup, prefix)
        if lst is None:
            sync(fs.loop, fs._find, prefix, detail=True)
            lst = fs._dk_covering(prefix)
    except (OSError, ValueError):
        return False
    if lst is None or prefix not in lst.dirs:
        return False  # nothing there, or a file: read as before
    if lst.prefix == prefix:
        lst.pinned = True
    else:
        lst = fs._dk_remember(prefix, {k: i for k, i in lst.files.items() if k.startswith(prefix + "/")},
                              pinned=True, made=lst.made)
    items = _wanted(fs, lst)
    missing = [(k, i) for k, i in items if not fs._dk_object(k, i).is_file()]
    if missing:
        rest = _fill_from_packs(fs, [(lst, missing, str(path))])
        if rest:
            sync(fs.loop, fs._dk_fetch, rest)
    fetched = {k for k, _ in missing}
    for k, i in items:
        if k not in fetched:
            touch_cache_entry(fs._dk_object(k, i))
    return True


def prefetch_many(paths_listings) -> int:
    """:func:`prefetch` for many folders at once (``[(UPath, {relative name: info})]``,
    as one listing of their root gives): every small file the cache lacks, of all of
    them, in one concurrent batch. Returns how many files were fetched."""
    by_fs: dict[int, tuple] = {}
    for path, listing in paths_listings:
        fs = _fs_of(path)
        if fs is None or not listing:
            continue
        prefix = fs._dk_norm(path.path)
        found = {f"{prefix}/{rel}": dict(info, name=f"{prefix}/{rel}") for rel, info in listing.items()}
        lst = fs._dk_remember(prefix, found, pinned=True)
        missing = [(k, i) for k, i in _wanted(fs, lst) if not fs._dk_object(k, i).is_file()]
        if missing:
            by_fs.setdefault(id(fs), (fs, []))[1].append((lst, missing, str(path)))
    from fsspec.asyn import sync

    n = 0
    for fs, groups in by_fs.values():
        rest = _fill_from_packs(fs, groups)
        n += sum(len(m) for _, m, _ in groups) - len(rest)
        if rest:
            n += sync(fs.loop, fs._dk_fetch, rest)
    return n
