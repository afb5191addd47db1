"""Whole-run fuzz: mutate files of a sample run, open the run on every page (issue 28).

:func:`mutate_run` copies a sample run into a store and spoils some of its files, each by
a mutation that knows the file's structure: Arrow tables get a lie in their buffers or
metadata (:mod:`tests.fuzz.arrowmut`), JSON and JSON-lines files a value of another type,
a deleted or added key, a huge or deeply nested value; safetensors files a header whose
dtype, shape, offsets or length lie; gzip files a mutated payload, re-compressed, or a
broken gzip stream; anything else (pickles, ``optimizer.pt``, parquet, text) byte-level
mutations (:func:`tests.fuzz.targets.mutate`).

:func:`open_everywhere` then opens the run through the app as a visitor does (AppTest of
app.py): Home, then Overview, Gradients, Memory, Profiler, Distributed, Checkpoints,
Replay and Audit. Each page must draw, or show a DebugkitError's box; an exception that
reached Streamlit, a traceback in the page, or the app's "Something went wrong" box (an
exception that is not a DebugkitError: a bug the checks did not foresee), or a traceback
printed to the process's stderr (file descriptor 2, captured per page) breaks the
contract. Files outside the store and the cache must not change.

Each mutated run is opened in a child process (``python -m tests.fuzz.wholerun``), so a
crash is one broken case: see :func:`run_isolated`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"
#: Sample runs whose files together cover the format: tables, events, failure captures
#: (safetensors, JSON), per-rank traces (gzip), profiles (gzip), checkpoints, an audit.
RUNS = ("digits-bad-label", "ddp-straggler", "digits-resumed", "digits-profiled", "credit-audit")
PAGES = ("home", "overview", "gradients", "memory", "profiler", "distributed", "checkpoints",
         "replay", "audit")
#: Outcomes of one page: it drew, or showed a DebugkitError's box; or it broke the contract.
GOOD = ("drew", "refused")
BAD = ("exception", "traceback", "unexpected", "crashed", "wrote_outside")
CHILD_TIMEOUT_S = 600


# ----------------------------------------------------------------------- mutations
def _json_values(doc, path=()):
    """Every (path, value) in a JSON document, containers included."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _json_values(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _json_values(v, path + (i,))


def _set(doc, path, value):
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def _odd_value(rng: random.Random, old):
    """A value of another type (or an extreme one of the same)."""
    choices = [None, True, 0, -1, 2**63, -(2**63) - 1, 1e308, float("nan"), float("inf"), "x",
               "../../../../etc/passwd", "/etc/passwd", "", "A" * rng.choice([10, 100_000]),
               [], [1, "a", None], {}, {"a": {"b": [1]}}, "\u202e\x00\x1b[31m",
               json.loads("[" * 200 + "]" * 200), 1.5, "1.0", ["x"] * 3]
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        choices += [old + 1, -old, old * 10**9]
    return rng.choice(choices)


def mutate_json_doc(data: bytes, rng: random.Random) -> bytes:
    """One structure-aware mutation of a JSON document (bytes in, bytes out)."""
    try:
        doc = json.loads(data)
    except ValueError:
        from .targets import mutate

        return mutate(data, rng)
    op = rng.randrange(6)
    nodes = list(_json_values(doc))
    path, value = rng.choice(nodes)
    if op == 0 and isinstance(value, dict) and value:  # delete a key
        del value[rng.choice(list(value))]
    elif op == 1 and isinstance(value, dict):  # add a key of any name
        value[rng.choice(["id", "step", "rank", "files", "dir", "path", "env", "zz", "time"])] = \
            _odd_value(rng, None)
    elif op == 2:  # deep nesting where a value was (spliced in: json.dumps would recurse)
        depth = rng.choice([70, 900, 100_000])
        doc = _set(doc, path, "@@DEEP@@")
        return json.dumps(doc).encode().replace(b'"@@DEEP@@"', b"[" * depth + b"]" * depth)
    elif op == 3 and isinstance(value, list) and value:  # repeat or drop list items
        if rng.random() < 0.5:
            value.extend(value[: rng.randint(1, 3)] * rng.randint(1, 50))
        else:
            del value[rng.randrange(len(value))]
    else:  # a value of another type
        doc = _set(doc, path, _odd_value(rng, value))
    try:
        return json.dumps(doc).encode()
    except (ValueError, RecursionError):
        return data


def mutate_jsonl(data: bytes, rng: random.Random) -> bytes:
    lines = data.splitlines(keepends=True)
    if not lines:
        return b'{"time": "x"}\n'
    i = rng.randrange(len(lines))
    lines[i] = mutate_json_doc(lines[i].rstrip(b"\n"), rng).replace(b"\n", b" ") + b"\n"
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines) + 1), b"[" * 100_000 + b"\n")
    return b"".join(lines)


def mutate_safetensors(data: bytes, rng: random.Random) -> bytes:
    """A lie in the safetensors header: its length, a tensor's dtype, shape or offsets."""
    if len(data) < 8:
        return data + b"\x00"
    (n,) = struct.unpack_from("<Q", data)
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        header = None
    op = rng.randrange(5)
    if op == 0 or not isinstance(header, dict):  # the header length lies
        return struct.pack("<Q", rng.choice([0, n + 1, n - 1, 2**40, len(data)])) + data[8:]
    names = [k for k in header if k != "__metadata__"] or ["x"]
    name = rng.choice(names)
    t = header.get(name) if isinstance(header.get(name), dict) else {}
    if op == 1:
        t["dtype"] = rng.choice(["F64", "I8", "BOOL", "F8_E4M3", "X", 3])
    elif op == 2:
        t["shape"] = rng.choice([[2**31, 2**31], [-1], [0], [10**6], "x", [1.5]])
    elif op == 3:
        t["data_offsets"] = rng.choice([[0, 2**40], [10, 0], [-8, 8], [0], "x"])
    else:
        header[rng.choice(names)] = _odd_value(rng, None)
    if t:
        header[name] = t
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


def mutate_gzip(data: bytes, rng: random.Random, inner_suffix: str) -> bytes:
    from .targets import mutate

    if rng.random() < 0.3:  # the gzip stream itself: truncated, flipped CRC, garbage
        return mutate(data, rng)
    try:
        inner = gzip.decompress(data)
    except (OSError, EOFError):
        return mutate(data, rng)
    inner = mutate_file_bytes(inner, inner_suffix, rng)
    return gzip.compress(inner, mtime=0)


def mutate_file_bytes(data: bytes, name: str, rng: random.Random) -> bytes:
    """One mutation of a file's bytes, chosen by its name."""
    from . import arrowmut
    from .targets import mutate

    if name.endswith(".gz"):
        return mutate_gzip(data, rng, name[:-3])
    if name.endswith(".arrows"):
        try:
            return arrowmut.mutate_stream(data, rng) if rng.random() < 0.8 else mutate(data, rng)
        except Exception:  # noqa: BLE001 - a stream the mutator cannot parse: bytes, then
            return mutate(data, rng)
    if name.endswith(".jsonl"):
        return mutate_jsonl(data, rng)
    if name.endswith(".json"):
        return mutate_json_doc(data, rng) if rng.random() < 0.85 else mutate(data, rng)
    if name.endswith(".safetensors"):
        return mutate_safetensors(data, rng) if rng.random() < 0.8 else mutate(data, rng)
    return mutate(data, rng)


def mutate_run(sample: str, dest: Path, rng: random.Random, n_files: int | None = None) -> list[str]:
    """Copy ``sample_runs/<sample>`` to ``dest`` and mutate ``n_files`` of its files (1 to
    3 by default, every file with -1); returns their paths relative to the run."""
    shutil.copytree(SAMPLES / sample, dest)
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    k = len(files) if n_files == -1 else n_files or rng.choice([1, 1, 2, 3])
    chosen = rng.sample(files, min(k, len(files)))
    for p in chosen:
        os.chmod(p, 0o644)
        p.write_bytes(mutate_file_bytes(p.read_bytes(), p.name, rng))
    return [p.relative_to(dest).as_posix() for p in chosen]


# ------------------------------------------------------------------------ opening
def _tree(path: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in path.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        out[p.relative_to(path).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def classify(at) -> tuple[str, str]:
    """How one AppTest page run went (see the module docstring), with a short detail."""
    if at.exception:
        return "exception", str(at.exception[0].value)[:300]
    texts = [str(getattr(x, "value", "")) for x in [*at.error, *at.warning, *at.code, *at.markdown,
                                                    *at.caption, *at.info, *at.sidebar.error]]
    # A failure capture's own traceback (the training script's frames) is run data the
    # Overview and Replay pages show on purpose; one through the app's code is a leak.
    app_frames = (f"{ROOT}/debugkit/", f"{ROOT}/pages/", f"{ROOT}/app.py", "site-packages/streamlit/")
    leaked = [t for t in texts if "Traceback (most recent call last)" in t and any(f in t for f in app_frames)]
    if leaked:
        return "traceback", leaked[0][:300]
    unexpected = [str(e.value) for e in [*at.error, *at.sidebar.error] if "Something went wrong" in str(e.value)]
    if unexpected:
        return "unexpected", unexpected[0][:300]
    if len(at.error):
        return "refused", str(at.error[0].value)[:200]
    return "drew", ""


def open_everywhere(run_dir: Path, run_id: str, pages=PAGES) -> dict[str, tuple[str, str]]:
    """Open ``run_dir`` (a run in the served store) on every page; ``{page: (outcome,
    detail)}``."""
    sys.path.insert(0, str(ROOT))
    from tests.app._apptest import new_app

    out = {}
    for page in pages:
        at = new_app(run_path=run_dir, run=run_id) if page != "home" else new_app()
        if page != "home":
            at.switch_page(f"pages/{page}.py")
        with _stderr_captured() as printed:
            try:
                at.run()
                out[page] = classify(at)
            except Exception as exc:  # noqa: BLE001 - AppTest itself gave up (a timeout)
                out[page] = ("exception", f"{type(exc).__name__}: {exc}"[:300])
        text = printed()
        if out[page][0] in GOOD and "Traceback (most recent call last)" in text:
            # the page looked fine, but the process printed a traceback (a logged error)
            out[page] = ("traceback", "printed: " + text[text.index("Traceback"):][:300])
    return out


@contextlib.contextmanager
def _stderr_captured():
    """Everything written to file descriptor 2 meanwhile (Python's and C code's)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        box = {"text": ""}
        try:
            yield lambda: box["text"]
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            box["text"] = f.read().decode("utf-8", "replace")


def run_isolated(sample: str, salt: int, pages=PAGES, every_file: bool = False) -> dict:
    """Mutate ``sample`` with seed ``salt`` (1 to 3 of its files, or every file with
    ``every_file``) and open it on ``pages`` in a child process.

    Returns ``{"files": [...], "pages": {page: [outcome, detail]}}``; a child that died
    or hung gives every page ``crashed``.
    """
    tmp = Path(tempfile.mkdtemp(prefix="dk-wholerun-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-m", "tests.fuzz.wholerun", sample, str(salt), str(tmp),
                               ",".join(pages), "all" if every_file else "some"], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=CHILD_TIMEOUT_S)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", f"no result after {CHILD_TIMEOUT_S} s"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if rc == 0 and last.startswith("{"):
        return json.loads(last)
    why = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit status {rc}" if rc is not None else "hung"
    return {"files": [], "pages": {p: ["crashed", f"{why}: {err[-1500:]}"] for p in pages}}


def _main(argv: list[str]) -> int:
    import faulthandler

    faulthandler.enable()
    sample, salt, tmp = argv[0], int(argv[1]), Path(argv[2])
    pages = argv[3].split(",") if len(argv) > 3 else list(PAGES)
    every_file = len(argv) > 4 and argv[4] == "all"
    store, cache, home = tmp / "store", tmp / "cache", tmp / "home"
    for d in (store, cache, home):
        d.mkdir(parents=True)
    os.environ.update(DEBUGKIT_STORE=str(store), DEBUGKIT_CACHE=str(cache), HOME=str(home),
                      DEBUGKIT_ROOTS=str(store))
    for var in ("DEBUGKIT_ALLOWED_ROOTS", "DEBUGKIT_CODE_ROOTS", "DEBUGKIT_CODE_TRUST"):
        os.environ.pop(var, None)
    rng = random.Random(f"{sample}/{salt}")
    run_id = f"{sample}-m{salt}"
    files = mutate_run(sample, store / run_id, rng, -1 if every_file else None)
    outside = {"samples": (SAMPLES, _tree(SAMPLES)), "home": (home, _tree(home))}
    result = open_everywhere(store / run_id, run_id, pages)
    for name, (where, before) in outside.items():
        after = _tree(where)
        if after != before:
            changed = sorted(set(after.items()) ^ set(before.items()))[:3]
            result["home"] = ("wrote_outside", f"{name}: {changed}")
    print(json.dumps({"files": files, "pages": {p: list(v) for p, v in result.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
