"""How many requests the pages make on runs in a real S3 server: counted by a proxy in front
of SeaweedFS's S3 port (tests/s3server.py's ``CountingProxy``), each page rendered by
Streamlit's AppTest in a new process (a new server process: nothing in memory), with the
credentials and the proxy's address only in the environment.

The bounds are counts, never times: Home over N runs makes one flat listing and, for runs
the index lacks, one GET per file (each once, in one batch: no HEAD, no per-folder
listing); Home over an indexed store makes one request whatever N is; a run changed in
the bucket costs only its changed files; Overview of one run makes at most two listings
and one GET per file of that run, and none once they are cached. Listings are kept for
``DEBUGKIT_LISTING_TTL_S`` seconds; it is set long here so that the counts do not depend
on how loaded the machine is (with the default 2 s a slow page lists again, once per 2 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from ..conftest import ROOT, SAMPLE_RUNS

N = 12
SAMPLES = ["digits-mlp", "digits-bad-label", "digits-vanishing", "memory-leak",
           "wine-missing-feature"]

HOME = """
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.run()
assert not at.exception, [e.value for e in at.exception]
table = at.dataframe[0].value
assert len(table) == int(sys.argv[2]), len(table)
assert not any(str(t).startswith("cannot analyse") for t in table.get("top", [])), list(table["top"])
"""

OVERVIEW = """
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["run"] = sys.argv[2]
at.switch_page("pages/overview.py")
at.run()
assert not at.exception, [e.value for e in at.exception]
assert not at.error, [e.value for e in at.error]
assert [t.value for t in at.title] == [sys.argv[3]], [t.value for t in at.title]
assert "Failures" in [h.value for h in at.subheader], [h.value for h in at.subheader]
"""


@pytest.fixture(scope="module")
def counted(s3_server, tmp_path_factory):
    """N runs (sample runs in turn) in a bucket, and a counting proxy in front of S3."""
    from ..s3server import CountingProxy

    tmp = tmp_path_factory.mktemp("s3count")
    local = tmp / "runs"
    local.mkdir()
    for i in range(N):
        shutil.copytree(SAMPLE_RUNS / SAMPLES[i % len(SAMPLES)], local / f"run{i:05d}")
    bucket = s3_server.new_bucket("count")
    s3_server.filesystem().put(f"{local}/", f"{bucket}/runs/", recursive=True)
    proxy = CountingProxy(int(s3_server.endpoint.rsplit(":", 1)[1]))
    return {"bucket": bucket, "proxy": proxy, "local": local, "tmp": tmp, "server": s3_server}


def _env(c, cache: str) -> dict:
    env = dict(os.environ, **c["server"].env())
    env.update(AWS_ENDPOINT_URL=c["proxy"].endpoint, DEBUGKIT_CACHE=str(c["tmp"] / cache),
               DEBUGKIT_STORE=str(c["tmp"] / f"store-{cache}"),
               DEBUGKIT_ROOTS=f"s3://{c['bucket']}/runs", DEBUGKIT_LISTING_TTL_S="600",
               PYTHONPATH=str(ROOT))
    env.pop("DEBUGKIT_ALLOWED_ROOTS", None)
    return env


def _requests(c, code: str, cache: str, *args) -> dict:
    """Render a page in a new process; what it asked S3, sorted by kind."""
    c["proxy"].take()
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "app.py"), *map(str, args)],
                         env=_env(c, cache), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = c["proxy"].take()
    kinds: dict[str, list] = {"flat listings": [], "folder listings": [], "gets": [], "other": []}
    for line in lines:
        method, target, _ = line.split(" ", 2)
        url = urlsplit(target)
        query = parse_qs(url.query, keep_blank_values=True)
        if method == "GET" and "list-type" in query:
            kind = "folder listings" if query.get("delimiter", [""])[0] else "flat listings"
            kinds[kind].append(unquote(query.get("prefix", [""])[0]))
        elif method == "GET" and not url.query:
            kinds["gets"].append(unquote(url.path).split("/", 2)[2])
        else:
            kinds["other"].append(line)
    kinds["total"] = len(lines)
    return kinds


def _files(local, *runs) -> set[str]:
    return {f"runs/{p.relative_to(local).as_posix()}" for r in runs for p in (local / r).rglob("*")
            if p.is_file()}


def test_home_lists_a_bucket_with_one_listing_and_one_fetch_per_new_file(counted):
    c = counted
    every = _files(c["local"], *(f"run{i:05d}" for i in range(N)))
    cold = _requests(c, HOME, "home", N)
    # one flat listing of the store; every file of every run fetched once (one batch), and
    # nothing else: no HEAD, no listing per folder, no second read of a file
    assert cold["flat listings"] == ["runs/"], cold
    assert not cold["folder listings"] and not cold["other"], cold
    assert sorted(cold["gets"]) == sorted(every)
    assert cold["total"] == 1 + len(every)

    # a new server process over the same cache: the index answers, one request in all
    warm = _requests(c, HOME, "home", N)
    assert warm["total"] == 1 and warm["flat listings"] == ["runs/"], warm

    # one run changes in the bucket: only its new file is fetched, the other runs cost nothing
    fs = c["server"].filesystem()
    fs.pipe(f"{c['bucket']}/runs/run00003/notes.txt", b"a note added later\n")
    try:
        changed = _requests(c, HOME, "home", N)
    finally:
        fs.rm(f"{c['bucket']}/runs/run00003/notes.txt")
    assert changed["flat listings"] == ["runs/"] and changed["gets"] == ["runs/run00003/notes.txt"], changed
    assert changed["total"] == 2, changed


def test_overview_of_a_bucket_run_fetches_its_files_once_in_one_batch(counted):
    c = counted
    run = "run00001"
    files = _files(c["local"], run)
    name = json.loads((c["local"] / run / "manifest.json").read_text())["name"]
    cold = _requests(c, OVERVIEW, "overview", run, name)
    assert len(cold["flat listings"]) <= 2 and set(cold["flat listings"]) <= {"runs/", f"runs/{run}/"}, cold
    assert not cold["folder listings"] and not cold["other"], cold
    assert sorted(cold["gets"]) == sorted(files)  # each file once (before: 307 requests)
    assert cold["total"] <= 2 + len(files)

    # the page again in a new process: its files come from the cache, the listing says
    # they are unchanged
    warm = _requests(c, OVERVIEW, "overview", run, name)
    assert not warm["gets"] and not warm["other"] and not warm["folder listings"], warm
    assert warm["total"] <= 2, warm


HOME_TABLE = HOME + """
import json
cols = [c for c in table.columns if c not in ("path", "cached")]
print(json.dumps(table[cols].astype(str).to_dict("records")))
"""


def test_home_over_runs_synced_with_their_pack_makes_one_get_per_run(counted):
    """Runs uploaded by ``debugkit sync`` (each with its pack.zip): Home's cold list is the
    one listing and one GET per run, and its table is the same as over the files alone."""
    c = counted
    console = os.path.join(os.path.dirname(sys.executable), "debugkit")
    packed = f"s3://{c['bucket']}/packed"
    env = _env(c, "sync")
    for i in range(N):
        out = subprocess.run([console, "sync", str(c["local"] / f"run{i:05d}"), f"{packed}/run{i:05d}"],
                             env=env, cwd=c["tmp"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]

    def home(root, cache):
        c["proxy"].take()
        out = subprocess.run([sys.executable, "-c", HOME_TABLE, str(ROOT / "app.py"), str(N)],
                             env=dict(_env(c, cache), DEBUGKIT_ROOTS=root), cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1]), c["proxy"].take()

    table, lines = home(packed, "home-packed")
    gets = [unquote(urlsplit(t).path).split("/", 2)[2] for m, t, _ in (x.split(" ", 2) for x in lines)
            if m == "GET" and not urlsplit(t).query]
    assert sorted(gets) == [f"packed/run{i:05d}/pack.zip" for i in range(N)], lines
    assert len(lines) == 1 + N, lines  # the listing, then one GET per run (was one per file)
    plain, _ = home(f"s3://{c['bucket']}/runs", "home-plain")
    assert table == plain
