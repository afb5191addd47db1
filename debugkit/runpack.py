"""A run's small files packed into one object (``<run>/pack.zip``), so that a reader of a
run in an object store fetches them with one GET instead of one request per file.

An object store charges a round trip and, in the S3 client, a few milliseconds of CPU
(request signing, response parsing) per request. A finished run's dozen small files
(manifest, heartbeats, Arrow streams, failure records) therefore cost a dozen requests on
a cold visit. ``debugkit sync`` (and so a ``Recorder`` writing to a URL, whose upload is a
sync) writes, on the last pass of a run that has ended, one uncompressed zip of them:

- ``pack.zip`` at the run's top, members stored (never compressed) under their names
  relative to the run, in name order, and a first member :data:`INDEX` (JSON) giving for
  each member its ``name``, ``size``, ``md5`` (hex; what S3 reports as the ETag of an
  object uploaded in one PUT) and ``sha256``.
- It is an optimisation, never the only copy: every member is also uploaded as its own
  object first. A reader uses a member only when the store's listing shows the file with
  the same size and the same content (its ETag equal to the member's MD5; for a store
  whose listing gives no MD5, the file not modified after the pack); any other file (a
  live run, a run appended after it was packed, a file the pack does not hold) is read as
  before. Readers that do not know packs ignore the file.

:func:`read_pack` refuses a hostile or malformed pack (not a zip, truncated, a compressed
member, a name outside the run, a member whose size or hash differs from the index) with a
:class:`~debugkit.errors.RunDirError` naming the run and the member; the reader then falls
back to the files. Layer 0: stdlib only; nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

from .errors import RunDirError

#: The pack's name, at the top of the run folder.
PACK = "pack.zip"
#: The pack's first member: its index.
INDEX = ".debugkit-pack.json"
FORMAT = "debugkit-pack"
VERSION = 1
#: A file larger than this is not packed (checkpoint weights, big traces: read on demand).
MAX_MEMBER_BYTES = 1 << 20
#: The most a pack holds (bytes of members); the smallest files go in first.
MAX_PACK_BYTES = 4 << 20
#: Index entries a pack may hold (a hostile index is refused before anything is read).
MAX_MEMBERS = 10_000

MSG_BAD_PACK = "{run}: {pack} is refused ({detail}); its files are read one by one instead"
MSG_BAD_MEMBER = ("{run}: {pack} member {member!r} is refused ({detail}); its files are read "
                  "one by one instead")

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed: the same files make the same pack, byte for byte


def packable(files: dict[str, int]) -> list[str]:
    """The names of ``files`` (``{name relative to the run: size}``) a pack holds: each at
    most :data:`MAX_MEMBER_BYTES`, the smallest first while the total fits
    :data:`MAX_PACK_BYTES`, never the pack itself; returned in name order."""
    out, total = [], 0
    for name, size in sorted(files.items(), key=lambda kv: (kv[1], kv[0])):
        if name in (PACK, INDEX) or size > MAX_MEMBER_BYTES or total + size > MAX_PACK_BYTES:
            continue
        if _bad_name(name) is not None:
            continue
        out.append(name)
        total += size
    return sorted(out)


def build_pack(members: dict[str, bytes]) -> bytes:
    """The bytes of a pack holding ``members`` (``{name relative to the run: content}``)."""
    index = {"format": FORMAT, "version": VERSION, "members": [
        {"name": name, "size": len(data), "md5": hashlib.md5(data).hexdigest(),  # noqa: S324 - the store's ETag
         "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in sorted(members.items())]}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in [(INDEX, json.dumps(index, sort_keys=True).encode())] + sorted(members.items()):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return buf.getvalue()


def _bad_name(name) -> str | None:
    if not isinstance(name, str) or not name:
        return "not a file name"
    if name.startswith("/") or "\\" in name or "\x00" in name or ":" in name.split("/", 1)[0]:
        return "an absolute or non-POSIX name"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "a name that leaves the run"
    if name in (PACK, INDEX):
        return "the pack itself"
    return None


def read_pack(data: bytes, run: str = "run") -> dict[str, dict]:
    """The members of the pack ``data`` (a run's ``pack.zip``): ``{name: {"size", "md5",
    "sha256", "data"}}``, every member checked against the index.

    Raises
    ------
    RunDirError
        Not a zip or truncated, no valid index, a compressed member, a member named
        outside the run, a member missing or whose size or hash differs from the index
        (the message names ``run`` and the member).
    """
    def bad(detail):
        return RunDirError(MSG_BAD_PACK.format(run=run, pack=PACK, detail=detail))

    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = {i.filename: i for i in z.infolist()}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise bad(f"not a readable zip: {exc}") from None
    idx = infos.get(INDEX)
    if idx is None or idx.compress_type != zipfile.ZIP_STORED or idx.file_size > (8 << 20):
        raise bad(f"no stored {INDEX} index")
    try:
        index = json.loads(z.read(idx))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise bad(f"{INDEX} is unreadable: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("members"), list):
        raise bad(f"{INDEX} is not a {FORMAT} index")
    if not isinstance(index.get("version"), int) or index["version"] > VERSION:
        raise bad(f"{INDEX} version {index.get('version')!r} is not one this debugkit reads ({VERSION})")
    if len(index["members"]) > MAX_MEMBERS:
        raise bad(f"{len(index['members'])} members, over {MAX_MEMBERS}")
    out: dict[str, dict] = {}
    for entry in index["members"]:
        name = entry.get("name") if isinstance(entry, dict) else None

        def refuse(detail, name=name):
            return RunDirError(MSG_BAD_MEMBER.format(run=run, pack=PACK, member=str(name)[:200], detail=detail))

        why = _bad_name(name)
        if why is not None or not isinstance(name, str):
            raise refuse(why or "not a file name")
        size, md5, sha = entry.get("size"), entry.get("md5"), entry.get("sha256")
        if not (isinstance(size, int) and size >= 0 and isinstance(md5, str) and isinstance(sha, str)):
            raise refuse("its index entry lacks size, md5 or sha256")
        info = infos.get(name)
        if info is None:
            raise refuse("not in the zip")
        if info.compress_type != zipfile.ZIP_STORED:
            raise refuse("compressed; a pack stores its members")
        if info.file_size != size:
            raise refuse(f"{info.file_size} bytes in the zip, {size} in the index")
        try:
            content = z.read(info)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise refuse(f"unreadable: {exc}") from None
        if len(content) != size or hashlib.sha256(content).hexdigest() != sha \
                or hashlib.md5(content).hexdigest() != md5:  # noqa: S324 - the store's ETag
            raise refuse("its content does not match the index's hash")
        out[name] = {"size": size, "md5": md5, "sha256": sha, "data": content}
    return out


def etag_md5(info: dict) -> str | None:
    """The MD5 (hex) a store's listing entry gives for an object: S3's ETag of a one-part
    upload (quoted hex), or GCS's ``md5Hash``-style field when it is hex. None when the
    listing has none (a multipart ETag ``...-N`` is not an MD5)."""
    for key in ("ETag", "etag", "md5"):
        value = info.get(key)
        if isinstance(value, str):
            value = value.strip().strip('"').lower()
            if len(value) == 32 and all(c in "0123456789abcdef" for c in value):
                return value
    return None


def member_is_current(member: dict, listed: dict, pack_listed: dict) -> bool:
    """Whether a pack member (as :func:`read_pack` gives it) is the content of the file as
    the store's listing shows it now (``listed``; ``pack_listed``: the pack's own entry):
    the same size, and the listing's MD5 equal to the member's, or, for a listing without
    MD5s, the file not modified after the pack was written."""
    try:
        if int(listed.get("size") or -1) != member["size"]:
            return False
    except (TypeError, ValueError):
        return False
    md5 = etag_md5(listed)
    if md5 is not None:
        return md5 == member["md5"]
    mine, packed = _modified(listed), _modified(pack_listed)
    return mine is not None and packed is not None and mine <= packed


def _modified(info: dict):
    for key in ("LastModified", "mtime", "updated", "last_modified"):
        value = info.get(key)
        if value is None:
            continue
        try:
            if hasattr(value, "timestamp"):
                return float(value.timestamp())
            return float(value)
        except (TypeError, ValueError):
            return None
    return None
