"""A run's small files packed into one object (``pack.zip``, debugkit.runpack): written by
``debugkit sync`` for a run that has ended, read by a cold reader of a real S3 server
(SeaweedFS) with one GET instead of one per file, and never trusted beyond what the
store's listing says: a stale member, a truncated pack, a member outside the run or one
whose content differs from its index is read from the run's own file instead (and a
refused pack is a warning naming the run and the member)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from debugkit import runpack
from debugkit.errors import RunDirError

from ..conftest import ROOT, SAMPLE_RUNS

CONSOLE = Path(sys.executable).with_name("debugkit")
SAMPLE = "digits-bad-label"  # a failure capture too: 19 files


def _files(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _zip(entries, index=None, compress=zipfile.ZIP_STORED) -> bytes:
    """A zip of ``entries`` ([(name, bytes)]) with the index of ``index`` ({name: bytes},
    default the same entries) as its first member."""
    import hashlib

    index = dict(entries) if index is None else index
    idx = {"format": runpack.FORMAT, "version": 1, "members": [
        {"name": n, "size": len(d), "md5": hashlib.md5(d).hexdigest(), "sha256": hashlib.sha256(d).hexdigest()}
        for n, d in index.items()]}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(runpack.INDEX), json.dumps(idx))
        for name, data in entries:
            info = zipfile.ZipInfo(name)
            info.compress_type = compress
            z.writestr(info, data)
    return buf.getvalue()


# ------------------------------------------------------------------ the format itself
def test_a_pack_holds_each_small_file_with_its_size_and_hashes():
    files = _files(SAMPLE_RUNS / SAMPLE)
    names = runpack.packable({n: len(d) for n, d in files.items()})
    assert names == sorted(files)  # every file of the sample is small
    blob = runpack.build_pack({n: files[n] for n in names})
    assert blob == runpack.build_pack({n: files[n] for n in reversed(names)})  # deterministic
    members = runpack.read_pack(blob, "r")
    assert {n: m["data"] for n, m in members.items()} == files
    # an ordinary zip: any tool lists it, and nothing in it is compressed
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        assert z.namelist() == [runpack.INDEX, *names]
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}


def test_only_small_files_are_packed_the_smallest_first():
    big = runpack.MAX_MEMBER_BYTES + 1
    assert runpack.packable({"manifest.json": 10, "checkpoints/000000001/model.safetensors": big,
                             runpack.PACK: 5, "../x": 1}) == ["manifest.json"]
    many = {f"f{i:03d}": runpack.MAX_MEMBER_BYTES for i in range(10)} | {"small": 1}
    chosen = runpack.packable(many)
    assert "small" in chosen and sum(many[n] for n in chosen) <= runpack.MAX_PACK_BYTES


BAD_PACKS = {
    "truncated": (lambda good: good[: len(good) // 2], "not a readable zip"),
    "not a zip": (lambda good: b"PK\x03\x04 nothing else", "not a readable zip"),
    "outside the run": (lambda good: _zip([("../other/manifest.json", b"{}")]),
                        r"member '\.\./other/manifest\.json' is refused \(a name that leaves the run\)"),
    "absolute name": (lambda good: _zip([("/etc/passwd", b"x")]),
                      r"member '/etc/passwd' is refused \(an absolute"),
    "content differs from the index": (
        lambda good: _zip([("manifest.json", b'{"name": "evil"}')], index={"manifest.json": b'{"name": "good!"}'}),
        r"member 'manifest\.json' is refused \(.*bytes in the zip"),
    "hash differs from the index": (
        lambda good: _zip([("manifest.json", b'{"name": "evil"}')], index={"manifest.json": b'{"name": "good"}'}),
        r"member 'manifest\.json' is refused \(its content does not match"),
    "compressed member": (lambda good: _zip([("manifest.json", b"{}" * 100)], compress=zipfile.ZIP_DEFLATED),
                          r"member 'manifest\.json' is refused \(compressed"),
    "no index": (lambda good: _zip([]) .replace(runpack.INDEX.encode(), b"x" * len(runpack.INDEX)),
                 "no stored .debugkit-pack.json index"),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKS))
def test_a_malformed_or_hostile_pack_is_refused_naming_the_run_and_member(case):
    good = runpack.build_pack({"manifest.json": b"{}", "env.json": b"{}"})
    make, match = BAD_PACKS[case]
    with pytest.raises(RunDirError, match=r"^s3://b/runs/r1: pack\.zip .*" + match):
        runpack.read_pack(make(good), "s3://b/runs/r1")


def test_a_member_is_used_only_while_the_listing_shows_the_same_content():
    member = runpack.read_pack(runpack.build_pack({"a": b"hello", "b": b"x"}))["a"]
    md5 = member["md5"]
    pack = {"size": 1, "LastModified": 100.0}
    assert runpack.member_is_current(member, {"size": 5, "ETag": f'"{md5}"'}, pack)
    assert not runpack.member_is_current(member, {"size": 5, "ETag": '"' + "0" * 32 + '"'}, pack)
    assert not runpack.member_is_current(member, {"size": 6, "ETag": f'"{md5}"'}, pack)
    # a listing without MD5s (a multipart ETag): only a file not modified after the pack
    assert runpack.member_is_current(member, {"size": 5, "ETag": '"abc-2"', "LastModified": 99.0}, pack)
    assert not runpack.member_is_current(member, {"size": 5, "ETag": '"abc-2"', "LastModified": 101.0}, pack)
    assert not runpack.member_is_current(member, {"size": 5}, pack)


# ------------------------------------------------------------------ on a real S3 server
@pytest.fixture(scope="module")
def store(s3_server, tmp_path_factory):
    """A bucket and a counting proxy in front of S3."""
    from ..s3server import CountingProxy

    tmp = tmp_path_factory.mktemp("s3pack")
    proxy = CountingProxy(int(s3_server.endpoint.rsplit(":", 1)[1]))
    return {"bucket": s3_server.new_bucket("pack"), "proxy": proxy, "tmp": tmp, "server": s3_server}


def _env(st, cache: str) -> dict:
    env = dict(os.environ, **st["server"].env())
    env.update(AWS_ENDPOINT_URL=st["proxy"].endpoint, DEBUGKIT_CACHE=str(st["tmp"] / cache),
               DEBUGKIT_STORE=str(st["tmp"] / f"store-{cache}"), DEBUGKIT_LISTING_TTL_S="600",
               PYTHONPATH=str(ROOT))
    env.pop("DEBUGKIT_ALLOWED_ROOTS", None)
    return env


def _console(st, cache: str, *args) -> tuple[str, list[str]]:
    """Run the console script from another folder; its stdout and the S3 requests it made."""
    st["proxy"].take()
    out = subprocess.run([str(CONSOLE), *args], env=_env(st, cache), cwd=st["tmp"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, st["proxy"].take()


def _gets(lines) -> list[str]:
    out = []
    for line in lines:
        method, target, _ = line.split(" ", 2)
        url = urlsplit(target)
        if method == "GET" and "list-type" not in parse_qs(url.query):
            out.append(unquote(url.path).split("/", 3)[3])  # /bucket/runs/<run>/<file>
    return out


def _info(stdout: str) -> dict:
    doc = json.loads(stdout)
    doc.pop("path")
    return doc


def _local_info(st, run: Path) -> dict:
    out = subprocess.run([str(CONSOLE), "info", str(run), "--json"], env=_env(st, "local"),
                         cwd=st["tmp"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return _info(out.stdout)


def _synced(st, name: str, sample: str = SAMPLE) -> tuple[Path, str]:
    """A copy of a sample synced with ``debugkit sync`` (a run that has ended: packed)."""
    local = st["tmp"] / "local" / name
    shutil.copytree(SAMPLE_RUNS / sample, local)
    url = f"s3://{st['bucket']}/runs/{name}"
    out, _ = _console(st, f"sync-{name}", "sync", str(local), url, "--json")
    uploaded = json.loads(out)["uploaded"]
    assert uploaded[-1] == runpack.PACK and sorted(uploaded[:-1]) == sorted(_files(local))
    return local, url


def test_sync_packs_an_ended_run_and_a_cold_read_fetches_it_with_one_get(store):
    local, url = _synced(store, "cold")
    out, lines = _console(store, "cold", "info", url, "--json")
    assert _info(out) == _local_info(store, local)
    # one listing of the run and one GET (the pack) instead of one GET per file
    assert _gets(lines) == ["cold/pack.zip"], lines
    assert len(lines) == 2, lines
    # and the bucket holds every file on its own too: the pack is never the only copy
    fs = store["server"].filesystem()
    assert sorted(f.split("/runs/cold/", 1)[1] for f in fs.find(f"{store['bucket']}/runs/cold")) == \
        sorted([*_files(local), runpack.PACK])


def test_a_running_run_is_not_packed(store):
    local = store["tmp"] / "local" / "live"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", local)
    hb = local / "ranks" / "0" / "heartbeat.json"
    beat = json.loads(hb.read_text())
    import time

    from debugkit._fsutil import process_start_ticks

    # this test's process is the writer, alive and beating
    beat.update(state="running", time=time.time(), pid=os.getpid(),
                process_start_ticks=process_start_ticks(os.getpid()))
    hb.write_text(json.dumps(beat))
    out, _ = _console(store, "live", "sync", str(local), f"s3://{store['bucket']}/runs/live", "--json")
    assert runpack.PACK not in json.loads(out)["uploaded"]


def test_a_stale_pack_gives_way_to_the_files_changed_after_it(store):
    local, url = _synced(store, "stale")
    fs = store["server"].filesystem()
    key = f"{store['bucket']}/runs/stale"
    # the run goes on after it was packed: a rewritten heartbeat (same size, other bytes),
    # an appended event line, a new file
    hb = local / "ranks" / "0" / "heartbeat.json"
    old = hb.read_bytes()
    new = old.replace(b'"failed"', b'"finish"') if b'"failed"' in old else old[:-2] + b" }"
    assert len(new) == len(old) and new != old
    hb.write_bytes(new)
    ev = local / "ranks" / "0" / "events-000.jsonl"
    ev.write_bytes(ev.read_bytes() + json.dumps({"kind": "note", "step": 3, "time": 1.0}).encode() + b"\n")
    (local / "notes.txt").write_bytes(b"added later\n")
    for rel in ("ranks/0/heartbeat.json", "ranks/0/events-000.jsonl", "notes.txt"):
        fs.pipe(f"{key}/{rel}", (local / rel).read_bytes())
    out, lines = _console(store, "stale", "info", url, "--json")
    assert _info(out) == _local_info(store, local)  # the new content, not the packed one
    assert sorted(_gets(lines)) == sorted(["stale/pack.zip", "stale/ranks/0/heartbeat.json",
                                           "stale/ranks/0/events-000.jsonl", "stale/notes.txt"])


def _outside(good: bytes) -> bytes:
    return _zip([("../cold/manifest.json", b"{}"), ("manifest.json", b"{}")])


def _tampered(good: bytes) -> bytes:
    # a member's content swapped for other bytes of the same size, its index hashes kept
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        index = json.loads(z.read(runpack.INDEX))
        entries = [(n, z.read(n)) for n in z.namelist() if n != runpack.INDEX]
    entries = [(n, d if n != "manifest.json" else d.replace(b"digits", b"DIGITS")) for n, d in entries]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(runpack.INDEX), json.dumps(index))
        for n, d in entries:
            z.writestr(zipfile.ZipInfo(n), d)
    return buf.getvalue()


@pytest.mark.parametrize("case, make, member", [
    ("truncated", lambda good: good[: len(good) - 100], None),
    ("outside", _outside, "../cold/manifest.json"),
    ("tampered", _tampered, "manifest.json"),
])
def test_a_hostile_pack_in_the_bucket_is_refused_and_the_files_are_read(store, case, make, member):
    local, url = _synced(store, f"bad-{case}")
    fs = store["server"].filesystem()
    pack = f"{store['bucket']}/runs/bad-{case}/{runpack.PACK}"
    fs.pipe(pack, make(fs.cat(pack)))
    out, lines = _console(store, f"bad-{case}", "info", url, "--json")
    doc = _info(out)
    warning = [w for w in doc.pop("warnings") if "pack.zip" in w]
    expected = _local_info(store, local)
    expected.pop("warnings")
    assert doc == expected  # every file read from its own object
    assert len(warning) == 1 and warning[0].startswith(f"{url}: pack.zip")
    if member:
        assert f"member {member!r} is refused" in warning[0]
    assert "Traceback" not in out
    assert sorted(_gets(lines)) == sorted([f"bad-{case}/pack.zip", *(f"bad-{case}/{n}" for n in _files(local))])
