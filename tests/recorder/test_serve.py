"""debugkit.serve: the inference-side recorder (rows, outcomes, captures, budget, format)."""

from __future__ import annotations

import json
import platform
import threading

import pyarrow as pa
import pytest
import torch
import torch.nn as nn

import debugkit
from debugkit import InvalidInputError, open_run
from debugkit import format as fmt
from debugkit.recorder.capture import state_dict_sha256
from debugkit.recorder.serve import (
    DEFAULT_MEMORY_EVERY_S,
    MEMORY_EVERY_ENV,
    MSG_BUDGET,
    MSG_CLOSED,
    MSG_MEMORY_EVERY,
    MSG_ROUTE,
    MSG_THRESHOLD,
    describe_inputs,
)
from debugkit.tensortree import load_tree


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, input_ids, temperature=None):
        y = self.head(self.emb(input_ids).mean(1))
        return y if temperature is None else y / temperature


def _model():
    return Tiny().eval()


def test_requests_rows_outcomes_and_captures(tmp_path):
    model = _model()
    rec = debugkit.serve(model, tmp_path / "r", name="svc", tags=["prod"], memory_every_s=0)
    for n in (4, 8, 4):
        x = {"input_ids": torch.randint(0, 50, (1, n))}
        with torch.no_grad(), rec.request(x) as r:
            r.output(model(**x))
        assert r.outcome == "ok" and r.failure_id is None and r.latency_ms > 0
    bad = {"input_ids": torch.tensor([[3, 77]])}  # a token id out of range
    with pytest.raises(IndexError), rec.request(bad, route="/v1/score") as r_err:
        model(**bad)
    nan_in = {"input_ids": torch.tensor([[1, 2]]), "temperature": torch.tensor(0.0)}
    with torch.no_grad(), rec.request(nan_in) as r_nan:
        r_nan.output(model(**nan_in))
    with rec.request({"input_ids": torch.tensor([[1]])}) as r_fb:
        r_fb.fallback("cache")
    wrapped = rec.wrap(model, route="wrapped")
    with torch.no_grad():
        out = wrapped(torch.tensor([[1, 2, 3]]))
    assert out.shape == (1, 5) and wrapped.head is model.head  # attributes are the model's
    assert rec.requests == 7
    rec.close()

    run = open_run(tmp_path / "r")
    assert run.kind == "inference" and run.manifest["kind"] == fmt.KIND_INFERENCE
    assert run.manifest["schema_version"] == fmt.SCHEMA_VERSION == "1.3"
    assert run.manifest["serve"] == {"gpu_mem_threshold": 0.8, "host_mem_threshold": 0.75,
                                     "capture_budget": {"per_kind": 10, "per_minute": 30},
                                     "memory_every_s": 0.0}
    assert run.manifest["weights_sha256"] == state_dict_sha256(model) and len(state_dict_sha256(model)) == 64
    assert run.manifest["model_class"].endswith("Tiny") and run.status == "finished"
    df = run.requests()
    assert list(df.columns) == ["request", "rank", "wall_time", "latency_ms", "outcome", "fallback",
                                "error_type", "signature", "input_numel", "mem_before_bytes",
                                "mem_after_bytes", "mem_kind", "device", "failure_id", "route"]
    assert df["request"].tolist() == list(range(7))
    assert df["outcome"].tolist() == ["ok", "ok", "ok", "error", "nonfinite", "fallback", "ok"]
    assert df["signature"].tolist()[:5] == ["input_ids:int64[1,4]", "input_ids:int64[1,8]",
                                            "input_ids:int64[1,4]", "input_ids:int64[1,2]",
                                            "input_ids:int64[1,2];temperature:float32[]"]
    assert df["signature"].iloc[6] == "input:int64[1,3]" and df["input_numel"].tolist()[:3] == [4, 8, 4]
    assert df["error_type"].iloc[3] == "IndexError" and df["fallback"].iloc[5] == "cache"
    assert (df["mem_kind"] == "rss").all() and (df["device"] == "cpu").all()
    assert (df["mem_before_bytes"] > 0).all() and (df["latency_ms"] > 0).all()
    assert df["failure_id"].iloc[3] == r_err.failure_id == "r0-000-req0000003-error"
    assert df["failure_id"].iloc[4] == r_nan.failure_id == "r0-000-req0000004-nonfinite"
    assert df["failure_id"].isna().sum() == 5
    assert df["route"].fillna("-").tolist() == ["-", "-", "-", "/v1/score", "-", "-", "wrapped"]

    err = run.failure(r_err.failure_id)
    assert err["kind"] == "request" and err["outcome"] == "error" and err["request"] == 3
    assert err["error_type"] == "IndexError" and "index out of range" in err["message"].lower()
    assert "Traceback" in err["traceback"] and err["signature"] == "input_ids:int64[1,2]"
    assert err["route"] == "/v1/score" and err["call"] == "kwargs" and "model" not in err["files"]  # identity by hash, no weights
    assert err["weights_sha256"] == run.manifest["weights_sha256"]
    from pathlib import Path

    d = Path(err["path"])
    assert torch.equal(load_tree(d / "batch.safetensors", d / "batch.json")["input_ids"], bad["input_ids"])
    assert (d / "rng.safetensors").is_file() and not list(d.glob("*.pt")) and not list(d.glob("*.pkl"))
    nan = run.failure(r_nan.failure_id)
    assert nan["outcome"] == "nonfinite" and nan["error_type"] is None and "NaN or Inf" in nan["message"]
    events = run.events()
    assert [e["kind"] for e in events if e["kind"] in ("start", "close")] == ["start", "close"]
    assert events[-1]["requests"] == 7


def test_capture_budget_first_n_per_kind_then_a_dropped_event(tmp_path):
    model = _model()
    rec = debugkit.serve(model, tmp_path / "r", capture_budget={"per_kind": 2, "per_minute": 100})
    ids = []
    for i in range(6):
        try:
            with rec.request({"input_ids": torch.tensor([[99 + i]])}) as r:
                model(input_ids=torch.tensor([[99 + i]]))
        except IndexError:
            ids.append(r.failure_id)
    for _ in range(3):
        try:
            with rec.request(torch.tensor([1.0])) as r:
                raise ValueError("bad")
        except ValueError:
            ids.append(r.failure_id)
    rec.close()
    assert ids[:2] == ["r0-000-req0000000-error", "r0-000-req0000001-error"] and ids[2:6] == [None] * 4
    assert ids[6] is not None and ids[7] is not None and ids[8] is None  # its own kind's budget
    run = open_run(tmp_path / "r")
    assert len(run.failures()) == 4
    dropped = [e for e in run.events() if e["kind"] == "capture_dropped"]
    assert dropped[-1]["dropped"] == 5
    assert dropped[-1]["counts"] == {"error:IndexError": 4, "error:ValueError": 1}


def test_per_minute_rate_limit(tmp_path):
    rec = debugkit.serve(_model(), tmp_path / "r", capture_budget={"per_kind": 100, "per_minute": 3})
    got = []
    for _ in range(5):
        with pytest.raises(KeyError), rec.request({"k": torch.ones(1)}) as r:
            raise KeyError("x")
        got.append(r.failure_id)
    rec.close()
    assert sum(g is not None for g in got) == 3 and got[3:] == [None, None]


def test_threads_record_every_request_once(tmp_path):
    model = _model()
    rec = debugkit.serve(model, tmp_path / "r", flush_every_s=0.05)
    wrapped = rec.wrap(model)

    def work():
        with torch.no_grad():
            for _ in range(50):
                wrapped(input_ids=torch.randint(0, 50, (1, 3)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    df = open_run(tmp_path / "r").requests()
    assert sorted(df["request"]) == list(range(200)) and (df["outcome"] == "ok").all()


def test_factory_identity_and_a_live_reader(tmp_path):
    rec = debugkit.serve(_model(), tmp_path / "r", model_factory="tests.recorder.test_serve:_model",
                         factory_kwargs={}, gpu_mem_threshold=0.9)
    with rec.request(torch.ones(2)) as r:
        r.output(torch.ones(2))
    rec.flush()  # readable while the service runs
    run = open_run(tmp_path / "r")
    assert len(run.requests()) == 1 and run.status == "running"
    m = run.manifest
    assert m["model_factory"] == "tests.recorder.test_serve:_model" and m["weights_sha256"] is None
    assert len(m["code"]["model_factory"]["sha256"]) == 64 and m["serve"]["gpu_mem_threshold"] == 0.9
    assert m["serve"]["memory_every_s"] == 0.05  # the default
    rec.close()
    with pytest.raises(InvalidInputError, match=MSG_CLOSED):
        rec.request(torch.ones(1)).__enter__()


def test_a_training_run_reads_as_training_with_no_requests(sample_runs):
    run = open_run(sample_runs / "digits-mlp")
    assert run.kind == "training" and run.requests().empty
    assert list(run.requests().columns)[:3] == ["request", "rank", "wall_time"]


def test_the_requests_table_is_append_only_arrow(tmp_path):
    rec = debugkit.serve(_model(), tmp_path / "r")
    with rec.request(torch.ones(1)):
        pass
    rec.close()
    path = tmp_path / "r" / "ranks" / "0" / "requests-000.arrows"
    with pa.OSFile(str(path)) as f:
        t = pa.ipc.open_stream(f).read_all()
    assert t.schema.equals(fmt.table_schema("requests")) and t.num_rows == 1


@pytest.mark.parametrize("kwargs,match", [
    ({"gpu_mem_threshold": 1.5}, MSG_THRESHOLD.format(name="gpu_mem_threshold", value=1.5)),
    ({"host_mem_threshold": 0}, MSG_THRESHOLD.format(name="host_mem_threshold", value=0)),
    ({"capture_budget": {"per_kind": -1}}, MSG_BUDGET.format(value={"per_kind": -1})),
    ({"capture_budget": {"n": 1}}, MSG_BUDGET.format(value={"n": 1})),
    ({"rank": -1}, "rank=-1: expected an integer >= 0"),
    ({"memory_every_s": -1}, "memory_every_s=-1: expected a number of seconds >= 0"),
    ({"memory_every_s": float("nan")}, "memory_every_s=nan: expected a number of seconds >= 0"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, kwargs, match):
    import re

    with pytest.raises(InvalidInputError, match=re.escape(match)):
        debugkit.serve(_model(), tmp_path / "r", **kwargs)
    assert not (tmp_path / "r").exists()


def test_the_memory_interval_comes_from_the_environment_when_the_code_gives_none(tmp_path, monkeypatch):
    """DEBUGKIT_SERVE_MEMORY_EVERY_S sets the interval of a recorder created without one (a
    deployment's choice without a code change); an explicit argument wins; a bad value is
    refused naming the variable, before anything is written."""
    import re

    monkeypatch.setenv(MEMORY_EVERY_ENV, "0.25")
    with debugkit.serve(_model(), tmp_path / "env") as rec:
        assert rec._mem_every == 0.25
    assert open_run(tmp_path / "env").manifest["serve"]["memory_every_s"] == 0.25
    with debugkit.serve(_model(), tmp_path / "arg", memory_every_s=0) as rec:
        assert rec._mem_every == 0.0
    monkeypatch.setenv(MEMORY_EVERY_ENV, "often")
    with pytest.raises(InvalidInputError, match=re.escape(
            MSG_MEMORY_EVERY.format(where=MEMORY_EVERY_ENV, value="often"))):
        debugkit.serve(_model(), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    monkeypatch.delenv(MEMORY_EVERY_ENV)
    with debugkit.serve(_model(), tmp_path / "default") as rec:
        assert rec._mem_every == DEFAULT_MEMORY_EVERY_S == 0.05


def test_a_bad_route_is_refused_by_request_and_by_wrap_and_writes_no_row(tmp_path):
    """wrap() checks its route once (its calls build their requests directly): a route that
    is not a string never reaches the writer, whose string column it would break."""
    import re

    rec = debugkit.serve(_model(), tmp_path / "r")
    match = re.escape(MSG_ROUTE.format(value=7))
    with pytest.raises(InvalidInputError, match=match):
        rec.request(torch.ones(1), route=7)
    with pytest.raises(InvalidInputError, match=match):
        rec.wrap(route=7)
    wrapped = rec.wrap(route="/ok")
    wrapped(torch.zeros(1, 4, dtype=torch.long))
    rec.close()
    assert rec._writer.error is None
    df = open_run(tmp_path / "r").requests()
    assert df["route"].tolist() == ["/ok"] and df["request"].tolist() == [0]


def test_describe_inputs():
    assert describe_inputs({"a": torch.zeros(2, 3), "b": "hi", "c": 3}) == ("a:float32[2,3];b:str[2];c:int", 6)
    assert describe_inputs((torch.zeros(1), [1, 2])) == ("0:float32[1];1:list[2]", 1)
    assert describe_inputs(None) == ("", 0)
    import numpy as np

    assert describe_inputs(np.zeros((2, 2), dtype=np.float32)) == ("input:float32[2,2]", 4)
    assert json.dumps(describe_inputs(torch.zeros(0)))  # plain strings and ints


def test_rows_and_captures_are_written_off_the_request_thread(tmp_path, monkeypatch):
    """The request thread only queues: Arrow batches are built by the writer thread and
    captures written by the capture thread."""
    import debugkit.recorder.serve as serve_mod
    from debugkit.recorder.writer import RankWriter

    seen = {}
    real_capture, real_rows = serve_mod.write_capture, RankWriter._write_rows

    def capture(*a, **k):
        seen["capture"] = threading.current_thread().name
        return real_capture(*a, **k)

    def rows(self, table, part):
        seen.setdefault("rows", set()).add(threading.current_thread().name)
        return real_rows(self, table, part)

    monkeypatch.setattr(serve_mod, "write_capture", capture)
    monkeypatch.setattr(RankWriter, "_write_rows", rows)
    monkeypatch.setattr(serve_mod, "DROPPED_EVENT_EVERY_S", 0.0)  # a dropped-capture event at once
    rec = debugkit.serve(_model(), tmp_path / "r", flush_every_s=0.05, capture_budget={"per_kind": 1})
    for _ in range(3):
        with pytest.raises(RuntimeError), rec.request(torch.ones(1)):
            raise RuntimeError("boom")
    import time

    deadline = time.monotonic() + 60
    while len(open_run(tmp_path / "r").requests()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)  # the writer thread appends them (flush_every_s=0.05)
    rec._captures.join()
    dropped = [e for e in open_run(tmp_path / "r").events() if e["kind"] == "capture_dropped"]
    assert [e["dropped"] for e in dropped] == [1, 2]  # written as they happen, not only at close
    rec.close()
    assert seen["capture"] == "debugkit-serve-capture" and seen["rows"] == {"debugkit-writer"}


def test_nonfinite_outputs_by_sum_confirmed_elementwise():
    from debugkit.recorder.serve import _nonfinite_outputs

    nan, inf = float("nan"), float("inf")
    assert _nonfinite_outputs(torch.tensor([1.0, nan]), torch) == ["output"]
    assert _nonfinite_outputs(torch.tensor([3e38, 3e38]), torch) == []  # the sum overflows; the values do not
    assert _nonfinite_outputs(torch.zeros(0), torch) == []
    assert _nonfinite_outputs({"a": torch.tensor([inf]), "b": (torch.ones(2), torch.tensor([-inf]))},
                              torch) == ["a", "b.1"]
    assert _nonfinite_outputs(torch.tensor([1 + 1j, complex(nan, 0)]), torch) == ["output"]
    assert _nonfinite_outputs(torch.ones(3, requires_grad=True) * 2, torch) == []
    assert _nonfinite_outputs(torch.ones(2, dtype=torch.int64), torch) == []
    assert _nonfinite_outputs(torch.tensor([inf], dtype=torch.bfloat16), torch) == ["output"]


def test_memory_is_read_when_due_both_sides_of_a_request(tmp_path, monkeypatch):
    """memory_every_s: a request reads memory before and after when that long has passed
    since the last reading; the others have null readings (no system call)."""
    import debugkit.recorder.serve as serve_mod

    clock = {"t": 100.0}
    monkeypatch.setattr(serve_mod.time, "perf_counter", lambda: clock["t"])
    # the wall clock moves with perf_counter (as a machine's do): rows' wall times derive from it
    monkeypatch.setattr(serve_mod.time, "time", lambda: 1.7e9 + clock["t"])
    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=0.01)
    reads = []
    real = serve_mod._pread  # the RSS is read from the kept /proc/self/statm descriptor
    monkeypatch.setattr(serve_mod, "_pread", lambda *a: reads.append(clock["t"]) or real(*a))
    for dt in (0.004, 0.004, 0.004, 0.003, 0.02, 0.001):  # time passed before each request
        clock["t"] += dt
        with rec.request(torch.ones(1)) as r:
            r.output(torch.ones(1))
    rec.close()
    df = open_run(tmp_path / "r").requests()
    read = df["mem_before_bytes"].notna().tolist()
    assert read == [True, False, False, True, True, False]  # due at 100.004, then from .014 and .025
    assert df["mem_after_bytes"].notna().tolist() == read and len(reads) == 2 * sum(read)
    assert open_run(tmp_path / "r").manifest["serve"]["memory_every_s"] == 0.01


def test_wall_time_is_the_request_start_between_memory_readings(tmp_path):
    """A row's wall_time (perf_counter plus an offset taken at each memory reading, not a
    time.time() call per request) is the request's start on the wall clock, also for
    requests long after the last reading."""
    import time

    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=3600)  # one reading
    spans = []
    for i in range(4):
        time.sleep(0.05 * i)
        before = time.time()
        with rec.request(torch.ones(1)) as r:
            time.sleep(0.05)
            r.output(torch.ones(1))
        spans.append((before, time.time(), r.wall_time))
    rec.close()
    df = open_run(tmp_path / "r").requests().sort_values("request")
    assert df["mem_before_bytes"].notna().tolist() == [True, False, False, False]
    for (before, after, wall), row in zip(spans, df["wall_time"]):
        # at the start, not the end (the request lasts 50 ms); a few ms either way allowed,
        # as a VM's wall clock is slewed against the monotonic clock between readings (CI
        # saw -2.8 ms after 0.3 s)
        assert before - 0.01 <= wall <= before + 0.025 < after
        assert row == pytest.approx(wall, abs=1e-6)


@pytest.mark.parametrize("out,outcome", [
    (torch.tensor([1.0, float("nan")]), "nonfinite"),
    (torch.tensor([3e38, 3e38]), "ok"),                     # the sum overflows; the values do not
    (torch.tensor([float("-inf")], dtype=torch.bfloat16), "nonfinite"),
    (torch.tensor([float("inf"), 1.0]), "nonfinite"),
    (torch.tensor([2.0, float("-inf")]), "nonfinite"),
    (torch.tensor([float("inf"), float("-inf")]), "nonfinite"),  # the sum is NaN
    (torch.tensor([-3e38, -3e38, 1.0]), "ok"),              # the sum overflows to -inf
    (torch.tensor([6e4, 6e4], dtype=torch.float16), "ok"),  # overflows half's sum, not its values
    (torch.tensor([float("nan"), 1.0], dtype=torch.float16), "nonfinite"),
    (torch.tensor([3e38, 3e38], dtype=torch.bfloat16), "ok"),
    (torch.tensor([1.0, float("nan")], dtype=torch.float64)[1:], "nonfinite"),  # a view
    (torch.full((4, 4), float("nan")).t()[:, :2], "nonfinite"),  # strided
    (torch.ones(2, dtype=torch.int64), "ok"),
    (torch.ones(2, dtype=torch.bool), "ok"),
    (torch.zeros(0), "ok"),
    (torch.zeros(0, dtype=torch.float16), "ok"),
    (torch.full((2,), float("nan"), requires_grad=True) * 1, "nonfinite"),  # through _nonfinite_outputs
    ([torch.ones(2), (torch.tensor([3e38, 3e38]), torch.tensor([float("-inf")]))], "nonfinite"),
    ({"a": torch.ones(2), "b": torch.tensor([3e38, 3e38])}, "ok"),
    ((torch.ones(1), {"logits": torch.tensor([float("inf")])}), "nonfinite"),
])
def test_the_recorders_finiteness_check(tmp_path, out, outcome):
    rec = debugkit.serve(_model(), tmp_path / "r", capture=False)
    with rec.request(torch.ones(1)) as r:
        r.output(out)
    rec.close()
    assert r.outcome == outcome


def test_the_signature_is_the_inputs_at_the_requests_start(tmp_path):
    """The input signature is looked up in ``__enter__``, before the model (after it, with
    the caches the model left, the lookup costs several times as much): a service that
    changes its inputs dict during the request gets the inputs it started with, in the row
    and in the capture's signature."""
    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=0)
    inputs = {"input_ids": torch.ones(1, 3, dtype=torch.long)}
    with rec.request(inputs) as r:
        inputs["input_ids"] = torch.ones(2, 7, dtype=torch.long)  # e.g. padded in place of the caller's
        r.output(torch.tensor([float("nan")]))
    rec.close()
    (row,) = open_run(tmp_path / "r").requests().to_dict("records")
    assert row["signature"] == "input_ids:int64[1,3]" and row["input_numel"] == 3, row
    assert open_run(tmp_path / "r").failure(r.failure_id)["signature"] == "input_ids:int64[1,3]"


def test_after_the_model_the_finiteness_check_dispatches_no_op_for_a_float32_output(tmp_path):
    """After the model the recorder's finiteness check of a contiguous float32 CPU tensor
    calls torch's BLAS ``sdot`` on it (ctypes; a sum of squares: no dispatched torch op,
    ~6 us less than the sum after a ~1 ms model); other float tensors get one reduction
    read with ``tolist()`` (no ``item()``: another dispatched op). The element-wise check
    runs only for a result that is not finite. Counted with a TorchFunctionMode around the
    request's end (it sees tensor methods too: ``is_contiguous``, ``numel``, ``data_ptr``)."""
    from torch.overrides import TorchFunctionMode

    calls: list[str] = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", str(func))
            if name not in ("__get__", "__set__"):
                calls.append(name)
            return func(*args, **(kwargs or {}))

    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=1e9)
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert rec._sdot is not None  # torch's x86 Linux wheels export MKL's sdot
    blas = ["is_contiguous", "numel", "data_ptr"] if rec._sdot is not None else ["sum", "tolist"]
    confirm = ["isfinite", "all", "__bool__"]
    big = torch.ones(4, 3)
    big[1, 1] = 3e30  # finite, but its square overflows: confirmed element-wise, finite
    cases = ((torch.ones(4, 3), blas, "ok"),
             (torch.tensor([1.0, float("inf")]), blas + confirm, "nonfinite"),
             (torch.tensor([1.0, float("nan")]), blas + confirm, "nonfinite"),
             (big, blas + confirm, "ok"),
             (torch.ones(4, 3, dtype=torch.float64), ["sum", "tolist"], "ok"),
             (torch.ones(3, 4).t(), ["is_contiguous", "sum", "tolist"], "ok"),  # not contiguous
             (torch.tensor([[1.0, float("nan")], [2.0, 3.0]]).t(), ["is_contiguous", "sum", "tolist"] + confirm, "nonfinite"))
    for out, want, outcome in cases:
        got, got_outcome = _judge_counted(rec, out, calls, Count)
        assert got == want, got
        assert got_outcome == outcome, (out, got_outcome)
    rec.close()


def test_the_blas_check_is_off_without_it_and_the_sum_still_judges(tmp_path, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_SERVE_BLAS", "0")
    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=1e9)
    assert rec._sdot is None
    for out, outcome in ((torch.ones(4, 3), "ok"), (torch.tensor([1.0, float("nan")]), "nonfinite")):
        with rec.request({"input_ids": torch.ones(1, 3, dtype=torch.long)}) as r:
            r.output(out)
        assert r.outcome == outcome
    rec.close()
    assert debugkit.serve(_model(), tmp_path / "s", check_finite=False)._sdot is None


def _call_log(events: list[tuple[str, str]]):
    """A ``sys.setprofile`` function appending ``("py", qualname)`` for each Python call and
    ``("c", name)`` for each C call to ``events``."""
    def prof(frame, event, arg):
        if event == "call":
            events.append(("py", frame.f_code.co_qualname))
        elif event == "c_call":
            events.append(("c", getattr(arg, "__qualname__", getattr(arg, "__name__", "?"))))
    return prof


def test_a_requests_path_builds_no_init_frame_no_ctypes_objects_and_writes_few_attributes(tmp_path):
    """What one ok request with a float32 output touches on the request thread, counted
    (never timed): next to a model each frame, object and attribute written costs several
    times its tight-loop cost. ``rec.request()`` and ``wrap()`` build the Request without an
    ``__init__`` frame (its defaults are class attributes), ``output()`` writes one
    attribute, and the BLAS finiteness call passes its length and stride as addresses of
    c_int64s kept per output length (no ``c_int64`` and three ``byref`` objects per call).
    The request writes only these attributes (before: also call, route and has_output)."""
    import sys

    from debugkit.recorder import serve as serve_mod

    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=1e9)
    x = {"input_ids": torch.ones(1, 3, dtype=torch.long)}
    out = torch.ones(2, 5)
    wrapped = rec.wrap(torch.neg)  # a C function: the model adds no Python frame
    with rec.request(x) as r:  # the signature cache, the first memory reading
        r.output(out)
    wrapped(out)
    events: list[tuple[str, str]] = []
    prof = _call_log(events)

    sys.setprofile(prof)
    try:
        with rec.request(x) as r:
            r.output(out)
        mark = len(events)
        wrapped(out)
    finally:
        sys.setprofile(None)
    rec.close()
    python = [name for kind, name in events[:mark] if kind == "py"]
    assert python == ["ServeRecorder.request", "Request.__enter__", "Request.output", "Request.__exit__"], events
    python = [name for kind, name in events[mark:] if kind == "py"]
    assert python == ["_Wrapped.__call__", "Request.__enter__", "Request.__exit__"], events
    c_calls = [name for kind, name in events if kind == "c"]
    if rec._sdot is not None:  # the BLAS path ran for the float32 outputs
        assert "byref" not in c_calls and "addressof" not in c_calls, events
        assert serve_mod._LENGTHS[out.numel()][0].value == out.numel()
    assert set(vars(r)) == {"rec", "inputs", "request", "signature", "rng", "t0", "out", "latency_ms",
                            "outcome", "wall_time"}, vars(r)
    assert r.out is None and r.outcome == "ok"  # the output is not kept past the request
    df = open_run(tmp_path / "r").requests()
    assert df["outcome"].tolist() == ["ok"] * 4


def test_a_cpu_requests_thread_path_is_enter_and_exit_and_c_calls(tmp_path):
    """The request thread's Python path of a CPU request that reads memory and may be
    captured: ``__enter__`` and ``__exit__`` and C calls only. The RSS is read inline from
    the kept ``/proc/self/statm`` descriptor (no ``_mem`` / ``_RSS.read`` frames), and the
    RNG is kept as a clone of the CPU generator (``Generator.clone_state``: no 5 KB state
    tensor built by ``get_state`` per request; the capture thread builds it). Counted with
    sys.setprofile, never timed."""
    import sys

    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=0)
    x = {"input_ids": torch.ones(1, 3, dtype=torch.long)}
    out = torch.ones(2, 5)
    with rec.request(x) as r:  # the signature cache and the first reading
        r.output(out)
    events: list[tuple[str, str]] = []
    prof = _call_log(events)

    r = rec.request(x)
    sys.setprofile(prof)
    try:
        r.__enter__()
        r.out = out
        r.__exit__(None, None, None)
    finally:
        sys.setprofile(None)
    rec.close()
    python = [name for kind, name in events if kind == "py"]
    assert python == ["Request.__enter__", "Request.__exit__"], events
    c_calls = [name for kind, name in events if kind == "c"]
    assert c_calls.count("pread") == 2, events  # before and after, one system call each
    if hasattr(torch.Generator, "clone_state"):
        assert "Generator.clone_state" in c_calls and "Generator.get_state" not in c_calls, events
    df = open_run(tmp_path / "r").requests()
    assert df["mem_before_bytes"].notna().all() and df["mem_after_bytes"].notna().all()
    assert (df["mem_before_bytes"] > 0).all()


def _judge_counted(rec, out, calls: list[str], mode) -> tuple[list[str], str | None]:
    """A request of ``rec`` whose output is ``out``, its end run under the counting
    TorchFunctionMode ``mode`` (which appends to ``calls``): the calls and the outcome."""
    r = rec.request({"input_ids": torch.ones(1, 3, dtype=torch.long)})
    r.__enter__()
    r.output(out)
    calls.clear()
    with mode():
        r.__exit__(None, None, None)
    return list(calls), r.outcome


def test_a_float32_output_without_memory_is_judged_without_a_blas_call(tmp_path):
    """A contiguous float32 CPU tensor whose data pointer is 0 (a ZeroTensor, as autograd
    makes for a gradient known to be zero; an empty tensor) is judged by the torch sum, not
    handed to BLAS: sdot on it read address 0 and killed the service (SIGSEGV) before this
    was checked. Run in a child process, so a crash fails this test, not the whole run."""
    import subprocess
    import sys

    code = (
        "import sys, torch, debugkit\n"
        "rec = debugkit.serve(torch.nn.Linear(2, 2), sys.argv[1], memory_every_s=1e9)\n"
        # a float32 output of the ZeroTensor's form first: its BLAS one-call test must refuse it
        "for out in (torch.ones(100000), torch._efficientzerotensor(100000), torch.ones(0), torch.ones(3)):\n"
        "    assert out.data_ptr() == 0 or out.numel() in (3, 100000)\n"
        "    with rec.request({'x': torch.ones(2)}) as r:\n"
        "        r.output(out)\n"
        "    print(r.outcome)\n"
        "rec.close()\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.split() == ["ok"] * 4


def test_a_float32_output_of_a_form_judged_before_is_tested_by_one_call_and_judged_alike(tmp_path):
    """The output form of the last float32 output judged by BLAS (its type, dispatch keys,
    dtype, sizes and strides: torch's C++ TensorGuards) is kept, and an output of that form
    is tested by that one C call: no property (``requires_grad``, ``dtype``, ``is_cpu``:
    ``__get__`` below) and no ``is_contiguous`` or ``numel`` call, only ``data_ptr`` and the
    BLAS dot, judged as before (inf, NaN, an overflowing square confirmed element-wise). An
    output of another form, a ZeroTensor, a subclass or one that requires grad takes the
    full path; a new float32 form switches the test off until the next build (at most one a
    second). Counted, never timed
    (docs/serving.md#ninth-round-one-c-call-for-the-outputs-form-a-crash-fixed)."""
    import weakref

    from torch.overrides import TorchFunctionMode

    calls: list[str] = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    rec = debugkit.serve(_model(), tmp_path / "r", memory_every_s=1e9)
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        # torch's x86 Linux wheels (CI's) export MKL's sdot and have TensorGuards: never skipped there
        assert rec._sdot is not None and rec._guards is not None
    elif rec._sdot is None or rec._guards is None:
        pytest.skip("no BLAS sdot or no TensorGuards in this torch build")

    def judge(out):
        return _judge_counted(rec, out, calls, Count)

    full = ["__get__", "__get__", "__get__", "is_contiguous", "numel", "data_ptr"]
    confirm = ["isfinite", "all", "__bool__"]
    first = torch.ones(4, 3)
    kept = weakref.ref(first)
    assert judge(first) == (full, "ok") and rec._fin_fast is not None
    del first
    assert kept() is None  # the kept form holds no reference to the output it came from
    inf, nan, big = torch.ones(4, 3), torch.ones(4, 3), torch.ones(4, 3)
    inf[2, 1], nan[0, 0], big[1, 1] = float("-inf"), float("nan"), 3e30
    assert judge(torch.full((4, 3), 2.0)) == (["data_ptr"], "ok")
    assert judge(inf) == (["data_ptr"] + confirm, "nonfinite")
    assert judge(nan) == (["data_ptr"] + confirm, "nonfinite")
    assert judge(big) == (["data_ptr"] + confirm, "ok")
    assert judge(torch.zeros(4, 6)[:, ::2]) == (full[:4] + ["sum", "tolist"], "ok")  # the sizes, not the strides
    assert judge(torch.ones(4, 3, dtype=torch.float64))[1] == "ok"
    assert judge(torch.ones(4, 3).requires_grad_())[1] == "ok"
    assert judge(torch.nn.Parameter(torch.full((4, 3), float("nan"))))[1] == "nonfinite"
    assert judge(torch._efficientzerotensor(4, 3))[1] == "ok"
    assert judge(torch.full((4, 3), 2.0)) == (["data_ptr"], "ok")  # the form is still kept
    assert judge(torch.ones(5)) == (full, "ok") and rec._fin_fast is None  # a new form: off
    assert judge(torch.ones(4, 3)) == (full, "ok") and rec._fin_fast is None
    rec._fin_next = 0.0  # a second later: the next float32 output's form is kept
    assert judge(torch.ones(5)) == (full, "ok")
    assert judge(torch.full((5,), float("inf"))) == (["data_ptr"] + confirm, "nonfinite")
    rec.close()
