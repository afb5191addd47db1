"""Fuzz targets: every reader debugkit applies to files strangers hand it.

Each target has a seed input (real bytes: a sample run's file, an event file written by
TensorBoard's own SummaryWriter, a py-spy profile, a Kineto trace, a memory snapshot in
PyTorch's layout, a zip of a run) and a function that feeds bytes to the reader the way
the app does and reads everything out of the result. Used by tests/fuzz/test_fuzz.py
(hypothesis), tests/fuzz/test_corpus.py (inputs that once broke a reader) and
bench/fuzz.py (a bounded random-mutation run that prints outcome counts).

The contract under test: a reader either opens its input or raises a ``DebugkitError``
subclass; any other exception, or a hang, is a bug.
"""

from __future__ import annotations

import gzip
import io
import shutil
import signal
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"
CORPUS = Path(__file__).resolve().parent / "corpus"
TIME_LIMIT_S = 20  # per input: a reader that takes longer is taken as hung


class Hang(Exception):
    """A reader ran past TIME_LIMIT_S on one input."""


@contextmanager
def time_limit(seconds: int = TIME_LIMIT_S):
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM)."""
    def _alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------ seeds
def _gunzip(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


@cache
def _tensorboard_seed() -> bytes:
    from torch.utils.tensorboard import SummaryWriter

    d = Path(tempfile.mkdtemp(prefix="dk-fuzz-tb-"))
    w = SummaryWriter(str(d))
    for s in range(20):
        w.add_scalar("train/loss", 1.0 / (s + 1), s)
        w.add_scalar("grad_norm/fc.weight", 0.5 + s, s)
    w.close()
    data = next(d.glob("events.out.tfevents.*")).read_bytes()
    shutil.rmtree(d, ignore_errors=True)
    return data


@cache
def _snapshot_seed() -> bytes:
    import pickle
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.memsnap_factory import leaky_training

    return pickle.dumps(leaky_training(steps=4).snapshot())


def _zip_of(run: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(run.rglob("*")):
            if p.is_file():
                z.write(p, f"{run.name}/{p.relative_to(run).as_posix()}")
    return buf.getvalue()


@cache
def _stack_dump_seed() -> bytes:
    """``py-spy dump --json`` of a real sleeping process (py-spy is a dependency)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c",
                             "import time\nprint('ready', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        out = subprocess.run([console_script("py-spy"), "dump", "--json", "--pid", str(proc.pid)],
                             capture_output=True, timeout=60, check=True)
    finally:
        proc.kill()
        proc.wait(10)
    return out.stdout


# ---------------------------------------------------------------------------- readers
def _read_whole_run(path: Path) -> None:
    """What the Overview and the CLI do with a run: open it and read every table."""
    from debugkit import open_run
    from debugkit.io import served_runs

    run = open_run(path)
    _ = run.status, run.ranks, run.name, run.manifest
    run.grad_norms()
    run.scalars()
    run.steps()
    run.memory()
    run.events()
    run.failures()
    run.row_counts()
    served_runs.summarize(served_runs.RunEntry(id=path.name, path=path, root=path.parent))


def _run_with_file(sample: str, rel: str):
    """A reader target: the sample run with one file replaced by the input bytes."""
    def target(data: bytes, tmp: Path) -> None:
        run = tmp / sample
        shutil.copytree(SAMPLES / sample, run)
        f = run / rel
        if "*" in rel:
            f = sorted(run.glob(rel))[0]
        f.write_bytes(data)
        _read_whole_run(run)
    return target


def _failure_file(name: str):
    """What the Replay page does before it starts a replay: list the captures, check
    their files, load the batch to show it."""
    def target(data: bytes, tmp: Path) -> None:
        from debugkit import open_run
        from debugkit.replay.loading import load_batch, select_failure, verify_files

        run = tmp / "digits-bad-label"
        shutil.copytree(SAMPLES / "digits-bad-label", run)
        (next((run / "failures").iterdir()) / name).write_bytes(data)
        r = open_run(run)
        for f in r.failures():
            rec = select_failure(r, f["id"])
            verify_files(rec)
            load_batch(rec)
    return target


def _tensorboard(data: bytes, tmp: Path) -> None:
    from debugkit.io.tensorboard import convert_tensorboard, read_scalars

    d = tmp / "tb"
    d.mkdir()
    f = d / "events.out.tfevents.1.host"
    f.write_bytes(data)
    read_scalars([f])
    convert_tensorboard(d, tmp / "converted")


def _profile(suffix: str):
    def target(data: bytes, tmp: Path) -> None:
        from debugkit.analysis.profile import compute_function_table
        from debugkit.io.run_profiles import read_sampled

        f = tmp / f"input{suffix}"
        f.write_bytes(data)
        prof = read_sampled(f)
        compute_function_table(prof)
    return target


def _chrome_trace(data: bytes, tmp: Path) -> None:
    from debugkit.io.chrome_trace import read_chrome_trace

    f = tmp / "input.trace.json"
    f.write_bytes(data)
    read_chrome_trace(f)


def _stack_dump(data: bytes, tmp: Path) -> None:
    from debugkit.io.stackdump import read_stack_dump

    f = tmp / "dump.txt"
    f.write_bytes(data)
    read_stack_dump(f)


def _memory_snapshot(data: bytes, tmp: Path) -> None:
    from debugkit.io.memsnap import read_snapshot, summarize

    f = tmp / "snap.pickle"
    f.write_bytes(data)
    summarize(read_snapshot(f, cache=False))


def _upload_zip(data: bytes, tmp: Path) -> None:
    from debugkit.io.upload import unpack_zip

    store = tmp / "store"
    store.mkdir()
    out = unpack_zip(io.BytesIO(data), store)
    _read_whole_run(Path(out))


def _run_id_param(data: bytes, tmp: Path) -> None:
    """``?run=<id>``: a query param is a string from a stranger."""
    from debugkit.io import served_runs

    text = data.decode("utf-8", "replace")
    served_runs.resolve_run(text, [SAMPLES])


TARGETS = {
    "manifest": (_run_with_file("digits-mlp", "manifest.json"),
                 lambda: (SAMPLES / "digits-mlp" / "manifest.json").read_bytes()),
    "heartbeat": (_run_with_file("digits-mlp", "ranks/0/heartbeat.json"),
                  lambda: (SAMPLES / "digits-mlp" / "ranks/0/heartbeat.json").read_bytes()),
    "meta": (_run_with_file("digits-mlp", "ranks/0/meta-000.json"),
             lambda: (SAMPLES / "digits-mlp" / "ranks/0/meta-000.json").read_bytes()),
    "grads_table": (_run_with_file("digits-mlp", "ranks/0/grads-000.arrows"),
                    lambda: (SAMPLES / "digits-mlp" / "ranks/0/grads-000.arrows").read_bytes()),
    "scalars_table": (_run_with_file("digits-mlp", "ranks/0/scalars-000.arrows"),
                      lambda: (SAMPLES / "digits-mlp" / "ranks/0/scalars-000.arrows").read_bytes()),
    "memory_table": (_run_with_file("digits-mlp", "ranks/0/memory-000.arrows"),
                     lambda: (SAMPLES / "digits-mlp" / "ranks/0/memory-000.arrows").read_bytes()),
    "steps_table": (_run_with_file("digits-mlp", "ranks/0/steps-000.arrows"),
                    lambda: (SAMPLES / "digits-mlp" / "ranks/0/steps-000.arrows").read_bytes()),
    "events": (_run_with_file("digits-bad-label", "ranks/0/events-000.jsonl"),
               lambda: (SAMPLES / "digits-bad-label" / "ranks/0/events-000.jsonl").read_bytes()),
    "failure_json": (_failure_file("failure.json"),
                     lambda: next((SAMPLES / "digits-bad-label/failures").iterdir())
                     .joinpath("failure.json").read_bytes()),
    "batch_safetensors": (_failure_file("batch.safetensors"),
                          lambda: next((SAMPLES / "digits-bad-label/failures").iterdir())
                          .joinpath("batch.safetensors").read_bytes()),
    "tensorboard": (_tensorboard, _tensorboard_seed),
    "speedscope": (_profile(".speedscope.json"),
                   lambda: _gunzip(SAMPLES / "digits-profiled/profiles/train-no-workers.speedscope.json.gz")),
    "collapsed": (_profile(".txt"),
                  lambda: b"MainThread;main (train.py:3);step (train.py:9) 12\n"
                          b"MainThread;main (train.py:3);load (data.py:5) 4\n"),
    "chrome_trace": (_chrome_trace, lambda: _gunzip(SAMPLES / "ddp-straggler/traces/rank0.pt.trace.json.gz")),
    "stack_dump": (_stack_dump, _stack_dump_seed),
    "memory_snapshot": (_memory_snapshot, _snapshot_seed),
    "upload_zip": (_upload_zip, lambda: _zip_of(SAMPLES / "digits-mlp")),
    "run_id_param": (_run_id_param, lambda: b"digits-mlp"),
}


MEMORY_LIMIT_BYTES = 256 << 20  # per input; the inputs are kilobytes


_WARM: set[str] = set()


class MemoryBlowup(Exception):
    """A reader allocated more than MEMORY_LIMIT_BYTES for one (small) input."""


def run_target(name: str, data: bytes, *, memory_limit: int | None = MEMORY_LIMIT_BYTES) -> str:
    """Feed ``data`` to target ``name``. Returns ``"opened"`` or ``"refused"`` (a
    DebugkitError); lets any other exception (and :class:`Hang`) propagate, and raises
    :class:`MemoryBlowup` when the peak of what Python and numpy allocated for it
    (tracemalloc; torch's own allocator is not seen) passes ``memory_limit``."""
    import tracemalloc

    from debugkit.errors import DebugkitError

    fn, make_seed = TARGETS[name]
    tracing = memory_limit is not None and not tracemalloc.is_tracing()
    if tracing and name not in _WARM:
        # The first call of a reader imports its modules and fills module-level caches;
        # those allocations are not the input's, so take them once, untraced.
        _WARM.add(name)
        run_target(name, make_seed(), memory_limit=None)
    tmp = Path(tempfile.mkdtemp(prefix=f"dk-fuzz-{name}-"))
    if tracing:
        tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with time_limit():
                try:
                    fn(data, tmp)
                    outcome = "opened"
                except DebugkitError:
                    outcome = "refused"
        if tracing:
            peak = tracemalloc.get_traced_memory()[1]
            if peak > memory_limit:
                raise MemoryBlowup(f"{name}: {peak >> 20} MiB allocated for a {len(data)}-byte input "
                                   f"(limit {memory_limit >> 20} MiB)")
        return outcome
    finally:
        if tracing:
            tracemalloc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def seed(name: str) -> bytes:
    return TARGETS[name][1]()


def mutate(data: bytes, rng) -> bytes:
    """One random structural mutation of ``data`` (``rng``: a ``random.Random``)."""
    b = bytearray(data)
    op = rng.randrange(6)
    if op == 0 and b:                       # truncate
        return bytes(b[: rng.randrange(len(b))])
    if op == 1 and b:                       # flip a few bytes
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == 2:                             # insert random bytes
        i = rng.randrange(len(b) + 1)
        return bytes(b[:i] + rng.randbytes(rng.randint(1, 64)) + b[i:])
    if op == 3 and b:                       # delete a span
        i = rng.randrange(len(b))
        return bytes(b[:i] + b[i + rng.randint(1, 256):])
    if op == 4 and len(b) > 8:              # duplicate a span (repeated records/keys)
        i = rng.randrange(len(b) - 4)
        j = min(len(b), i + rng.randint(4, 512))
        return bytes(b[:j] + b[i:j] + b[j:])
    return rng.randbytes(rng.randint(0, 256))  # noise
