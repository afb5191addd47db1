"""The Recorder's per-step hot path: rows written by index into blocks, no lock or writer
call per row, RSS on a timer, and every row on disk, in order, across blocks and
concurrent flushes."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from debugkit import Recorder, open_run
from debugkit.recorder import recorder as recmod
from debugkit.recorder.writer import BLOCK_STEPS


def _setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    return model, opt, x, y


def _train(rec, model, opt, x, y, steps, *, val_every=0, fail_at=()):
    for s in range(steps):
        try:
            with rec.step((x, y)):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss, acc=0.5)
                if s in fail_at:
                    raise RuntimeError(f"planted at {s}")
                opt.step()
        except RuntimeError:
            pass
        if val_every and s % val_every == 0:
            rec.log(val_loss=float(s))  # outside a step: belongs to step s


@pytest.mark.slow  # thousands of recorded steps: 7.9 CPU s (tests._cputime)
def test_every_row_reaches_disk_in_step_order_across_blocks_and_flushes(tmp_path):
    model, opt, x, y = _setup()
    steps = 2 * BLOCK_STEPS + 37  # three blocks, the last one partly filled
    with Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=0.05) as rec:
        _train(rec, model, opt, x, y, steps, val_every=50, fail_at={100, 300})
    run = open_run(tmp_path / "r")
    st = run.steps()
    assert st["step"].tolist() == list(range(steps))
    assert [s for s, ok in zip(st["step"], st["ok"]) if not ok] == [100, 300]
    assert run.memory()["step"].tolist() == list(range(steps))
    g = run.grad_norms()
    normed = [s for s in range(steps) if s not in (100, 300)]  # a failed step took none
    assert sorted(set(g["step"])) == normed and g["step"].is_monotonic_increasing
    assert len(g) == len(normed) * (len(run.layers()) + 1)
    sc = run.scalars()
    assert sc["step"].is_monotonic_increasing  # the out-of-step rows sit after their step's
    per_key = sc.groupby("key")["step"].apply(list).to_dict()
    assert per_key["loss"] == list(range(steps)) and per_key["acc"] == list(range(steps))
    assert per_key["lr"] == list(range(steps))
    assert per_key["val_loss"] == list(range(0, steps, 50))
    assert sc[sc["key"] == "val_loss"]["value"].tolist() == [float(s) for s in range(0, steps, 50)]


def test_rows_of_a_partly_filled_block_are_readable_while_the_run_goes_on(tmp_path):
    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    _train(rec, model, opt, x, y, 7)
    rec._writer.flush()  # what the writer thread does every flush_every_s
    run = open_run(tmp_path / "r")
    assert run.steps()["step"].tolist() == list(range(7))
    assert len(run.grad_norms()) == 7 * (len(run.layers()) + 1)
    _train(rec, model, opt, x, y, 3)
    rec.close()
    assert open_run(tmp_path / "r").steps()["step"].tolist() == list(range(10))


def test_a_step_queues_no_row_through_the_locked_path(tmp_path):
    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    calls = []
    add = rec._writer.add
    rec._writer.add = lambda table, row: (calls.append(table), add(table, row))[1]
    _train(rec, model, opt, x, y, 20)
    assert calls == []  # the steps' rows went into the block by index
    rec.log(after=1.0)  # outside a step: the rare, locked path
    assert calls == ["scalars"]
    rec.close()
    sc = open_run(tmp_path / "r").scalars()
    assert sc[sc["key"] == "after"]["step"].tolist() == [19]


def test_rss_is_read_on_a_timer_and_at_a_failed_step(tmp_path, monkeypatch):
    model, opt, x, y = _setup()
    monkeypatch.setattr(recmod, "RSS_EVERY_S", 3600.0)
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    reads = []
    read = rec._rss.read
    rec._rss.read = lambda: (reads.append(1), read())[1]
    _train(rec, model, opt, x, y, 30, fail_at={20})
    assert len(reads) == 2  # the first step, then the failed step 20
    rec.close()
    mem = open_run(tmp_path / "r").memory()
    assert mem["step"].tolist() == list(range(30))
    assert (mem["rss_bytes"] > 10_000_000).all()  # every row carries the latest reading


def test_healthy_steps_skip_the_full_nonfinite_check_and_a_nan_loss_is_still_caught(tmp_path):
    """A step whose total norm and logged scalars are finite floats is not judged in full
    (no NonFiniteMonitor call on the per-step path); the first NaN loss is, and captured."""
    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    calls = []
    check, check_loss = rec._nonfinite.check, rec._nonfinite.check_loss
    rec._nonfinite.check = lambda *a, **k: (calls.append("check"), check(*a, **k))[1]
    rec._nonfinite.check_loss = lambda *a, **k: (calls.append("loss"), check_loss(*a, **k))[1]
    _train(rec, model, opt, x, y, 12)  # loss logged before the optimizer step
    for _ in range(3):  # and after it: judged at the end of the step
        with rec.step((x, y)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.log(loss=loss)
    assert calls == []
    with rec.step((x, y)):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        rec.log(loss=loss * float("nan"), acc=float("inf"))
        opt.step()
    assert calls == ["check"]
    rec.close()
    run = open_run(tmp_path / "r")
    (f,) = run.failures()
    assert f["step"] == 15 and f["kind"] == "nonfinite" and "loss 'loss' is nan" in f["message"]


def _spy_on_spec_learning(monkeypatch, get_rec, *, dense, every, every_max, most=None) -> list:
    """Spec learning's constants set small; the returned list collects the steps whose
    batch the recorder ``get_rec()`` observed."""
    from debugkit.recorder import spec_sampler as sm
    from debugkit.recorder.batchspec import SpecBuilder

    monkeypatch.setattr(sm, "SPEC_DENSE", dense)
    monkeypatch.setattr(sm, "SPEC_EVERY", every)
    monkeypatch.setattr(sm, "SPEC_EVERY_MAX", every_max)
    if most is not None:
        monkeypatch.setattr(sm, "SPEC_MAX", most)
    seen: list = []
    observe = SpecBuilder.observe
    monkeypatch.setattr(SpecBuilder, "observe",
                        lambda self, batch: (seen.append(get_rec()._cur.step), observe(self, batch))[1])
    return seen


def test_spec_learning_observes_the_dense_steps_then_every_nth_then_stops(tmp_path, monkeypatch):
    seen = _spy_on_spec_learning(monkeypatch, lambda: rec, dense=4, every=3,
                                 every_max=3, most=7)  # no back-off: every 3rd step
    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    _train(rec, model, opt, x, y, 20, fail_at={1})  # a failed step's batch is not committed
    assert seen == [0, 1, 2, 3, 4, 6, 9, 12]  # 4 dense commits (0, 2, 3, 4), every 3rd to 7
    assert rec._specs.every == 0 and rec._specs._specs.n == 7
    rec.close()


def test_spec_learning_backs_off_while_the_batches_teach_it_nothing_new(tmp_path, monkeypatch):
    """Issue 32 item 1: past the dense start, each observed batch that adds no shape or
    value range doubles the interval (up to SPEC_EVERY_MAX); one that widens the spec sets
    it back, so the spec still learns what changes, at a fraction of the observations
    (every 16th step for ever, before)."""
    seen = _spy_on_spec_learning(monkeypatch, lambda: rec, dense=4, every=2, every_max=8)
    model, opt, x, y = _setup()
    y_wide = y.clone()
    y_wide[0] = 2  # a label value above the ones seen so far: the spec's range grows
    y[y == 2] = 1
    x_short = x[:3]  # a new batch size
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    for s in range(60):
        yb = y_wide if s >= 24 else y
        xb = x_short if s >= 44 else x
        yb = yb[:len(xb)]
        try:
            with rec.step((xb, yb)):
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                if s == 1:
                    raise RuntimeError("planted")
                opt.step()
        except RuntimeError:
            pass
    # dense 0-4 (1 failed), then every 2nd, 4th, 8th (the cap); at 24 the new label widens
    # the range: every 2nd again, backing off; at 48 the new batch size does the same
    assert seen == [0, 1, 2, 3, 4, 6, 8, 16, 24, 26, 28, 32, 40, 48, 50, 52, 56]
    got = rec._specs.spec(None)
    assert got["inferred_from"]["healthy_batches"] == len(seen) - 1  # all but the failed one
    assert got["tensors"]["1"]["range"] == [0, 3]  # the widened label range was learned
    assert rec._specs._specs.seen["0"]["distinct"] == {(5, 4), (3, 4)}  # and the new size
    rec.close()


def _debugkit_calls(fn) -> list[str]:
    """The Python functions of debugkit that ``fn()`` enters (sys.setprofile)."""
    import os
    import sys

    import debugkit

    root = os.path.dirname(debugkit.__file__)
    calls: list[str] = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_healthy_default_step_enters_recorder_code_in_few_python_calls(tmp_path):
    """Issue 32 item 1: the in-loop cost follows how often a step enters the Recorder's
    Python (it runs cold after backward), so the default (lean) path does the step's
    bookkeeping inline: 8 calls into debugkit per healthy step (the forward hook and
    the norms included), 11 before the optimizer post-hook, the norms' list
    comprehension and the step's __init__ went, 20 before the lean path."""
    model, opt, x, y = _setup()
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        assert rec._lean
        _train(rec, model, opt, x, y, 300)  # past the dense part of spec learning
        s = rec._step_no
        while s % rec._specs.every == 0:  # a step spec learning does not observe
            _train(rec, model, opt, x, y, 1)
            s = rec._step_no
        rec._rss_next = float("inf")  # the RSS read is on a timer: not in this step
        calls = _debugkit_calls(lambda: _train(rec, model, opt, x, y, 1))
    assert len(calls) <= 8, " ".join(calls)
    assert "take_rng_state" not in calls and "_scalar_value" not in calls


@pytest.mark.parametrize("plant", ["none", "nan_loss", "nan_after_step", "error"])
def test_the_lean_path_records_what_the_full_path_records(tmp_path, plant):
    """The same training through the lean and the full step path: the same rows, the same
    captures with the step-start RNG state (so replay reproduces), a NaN loss caught
    before the optimizer step."""
    import numpy as np
    from safetensors.torch import load_file

    out = {}
    for lean in (True, False):
        model, opt, x, y = _setup()
        torch.manual_seed(7)
        rng_at_start = None
        with Recorder(tmp_path / str(lean), model, optimizer=opt) as rec:
            assert rec._lean
            rec._lean_ok = rec._lean = lean
            for s in range(6):
                try:
                    with rec.step((x, y)):
                        if s == 3:
                            rng_at_start = torch.get_rng_state()
                        torch.rand(1)  # the step draws from the generator
                        loss = F.cross_entropy(model(x), y)
                        if s == 3 and plant == "nan_loss":
                            loss = loss * float("nan")
                        opt.zero_grad()
                        loss.backward()
                        rec.log(loss=loss, acc=torch.tensor(0.5))
                        if s == 3 and plant == "error":
                            raise RuntimeError("planted")
                        opt.step()
                        rec.log(aux_loss=float("nan") if s == 3 and plant == "nan_after_step" else 1.0)
                except RuntimeError:
                    pass
        run = open_run(tmp_path / str(lean))
        sc = run.scalars()
        caps = run.failures()
        for cap in caps:  # the generator's state at the step's start, whichever path
            saved = load_file(str(tmp_path / str(lean) / "failures" / cap["id"] / "rng.safetensors"))
            assert torch.equal(saved["torch_cpu"], rng_at_start)
        out[lean] = (run.steps()[["step", "ok"]].values.tolist(),
                     sc[["step", "key"]].values.tolist(),
                     np.nan_to_num(sc["value"].to_numpy(), nan=-1.0).round(6).tolist(),
                     run.grad_norms()["step"].tolist(),
                     [(e["kind"], e.get("step")) for e in run.events()
                      if e["kind"] in ("failure", "nonfinite")],
                     [(c["kind"], c["step"], c.get("optimizer_stepped")) for c in caps])
    assert out[True] == out[False]
    expect = {"none": [], "nan_loss": [("nonfinite", 3, False)], "error": [("exception", 3, False)],
              "nan_after_step": [("nonfinite", 3, True)]}[plant]
    assert out[True][5] == expect


def test_an_unsampled_step_with_layer_stats_enters_debugkit_in_as_few_calls(tmp_path):
    """Issue 33 at its default: with layer_stats_every set, a healthy step that is not
    sampled takes the lean path (the trigger's band is checked inline in the optimizer
    pre-hook): as few calls as without layer statistics (8), none into LayerStats (the old
    path made ~20, five of them LayerStats')."""
    model, opt, x, y = _setup()
    with Recorder(tmp_path / "r", model, optimizer=opt, layer_stats_every=500) as rec:
        ls = rec._layer_stats
        _train(rec, model, opt, x, y, 300)  # past spec learning's and the band's dense start
        assert ls._quick
        s = rec._step_no
        while (s % rec._specs.every == 0 or s % ls.every == 0 or s in ls._forced
               or (ls._seen + 1) % ls.update_every == 0):  # a plain step, not a band update
            _train(rec, model, opt, x, y, 1)
            s = rec._step_no
        rec._rss_next = float("inf")
        seen = ls._seen
        calls = _debugkit_calls(lambda: _train(rec, model, opt, x, y, 1))
        assert ls._seen == seen + 1  # the step's norms were checked against the band
    assert len(calls) <= 8, " ".join(calls)
    assert not {"observe_norms", "begin", "grads_ready", "end", "after_update",
                "_take_grads", "_begin_step_full", "_end_step_full"} & set(calls), calls


def test_a_band_update_step_updates_the_layer_stats_band_in_one_call(tmp_path):
    """Issue 33 at its default: on every ``update_every``-th unsampled step the trigger's
    band is updated; the lean pre-hook checks the norms inline, then calls the band's
    plain-Python update directly: one call into LayerStats, where the path through
    ``_observe_norms`` -> ``observe_norms`` -> ``_update_band`` made four (and checked the
    band a second time on the way)."""
    model, opt, x, y = _setup()
    with Recorder(tmp_path / "r", model, optimizer=opt, layer_stats_every=500) as rec:
        ls = rec._layer_stats
        _train(rec, model, opt, x, y, 300)
        assert ls._quick
        s = rec._step_no
        while (s % rec._specs.every == 0 or s % ls.every == 0 or s in ls._forced
               or (ls._seen + 1) % ls.update_every):  # a band update, nothing else due
            _train(rec, model, opt, x, y, 1)
            s = rec._step_no
        rec._rss_next = float("inf")
        seen, lo = ls._seen, ls._lo
        calls = _debugkit_calls(lambda: _train(rec, model, opt, x, y, 1))
        assert ls._seen == seen + 1 and ls._lo is not lo  # the band was updated
    assert calls.count("_update_band_py") == 1, calls
    assert not {"observe_norms", "_observe_norms", "_update_band", "_take_grads",
                "_end_step_full"} & set(calls), calls
    assert len(calls) <= 9, " ".join(calls)


def _layer_job(run, *, lean, plant, steps=96, every=40):
    """A small MLP trained ``steps`` steps with ``layer_stats_every=every``, through the
    lean path (where it applies) or the full one; ``plant`` at step 75 (an unsampled step
    past the band's dense start and not a band update): a x1e3 loss ("scale", the trigger
    fires), a NaN loss, or an exception."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))  # full-batch: the
    with Recorder(run, model, opt, layer_stats_every=every) as rec:  # norms move smoothly
        assert rec._lean_ok
        rec._lean_ok = rec._lean = lean
        for s in range(steps):
            try:
                with rec.step((x, x[:, :1])):
                    loss = (model(x) - x[:, :1]).pow(2).mean()
                    if s == 75 and plant == "scale":
                        loss = loss * 1e3
                    if s == 75 and plant == "nan_loss":
                        loss = loss * float("nan")
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss)
                    if s == 75 and plant == "error":
                        raise RuntimeError("planted")
                    opt.step()
            except RuntimeError:
                pass
        if lean and plant == "scale":
            assert (75 + 1) % rec._layer_stats.update_every  # fired in the inline check
    return open_run(run)


@pytest.mark.parametrize("plant", ["none", "scale", "nan_loss", "error"])
def test_the_lean_path_with_layer_stats_records_what_the_full_path_records(tmp_path, plant):
    """The same training with layer statistics through the lean path and the full one:
    the same steps, scalars, norms, captures and the same layers table, for sampled steps,
    a step whose norms leave the band (sampled with its forward run again, and the next
    one), a non-finite loss and an exception (weights and gradients, the next step)."""
    import numpy as np

    out = {}
    for lean in (True, False):
        run = _layer_job(tmp_path / str(lean), lean=lean, plant=plant)
        sc = run.scalars()
        df = run.layer_stats().sort_values(["step", "module", "stat"])
        out[lean] = (run.steps()[["step", "ok"]].values.tolist(),
                     sc[["step", "key"]].values.tolist(),
                     np.nan_to_num(sc["value"].to_numpy(), nan=-1.0).round(6).tolist(),
                     run.grad_norms()["step"].tolist(),
                     [(c["kind"], c["step"]) for c in run.failures()],
                     df[["step", "module", "module_type", "stat"]].values.tolist(),
                     np.nan_to_num(df["value"].to_numpy(), nan=-1.0).round(5).tolist())
    assert out[True] == out[False]
    layer_steps = sorted({row[0] for row in out[True][5]})
    stats = {(row[0], row[3]) for row in out[True][5]}
    assert {0, 40, 80} <= set(layer_steps)
    # past the band's dense start (the early steps' norms move fast and may trip it):
    # only the sampled step 80, and the planted step 75 with the next one
    late = [s for s in layer_steps if s >= 64]
    if plant in ("scale", "nan_loss"):  # that step's update moves (or NaNs) the next ones
        assert late[:2] == [75, 76] and 80 in late, layer_steps
    else:
        assert late == ([80] if plant == "none" else [75, 76, 80]), layer_steps
    if plant == "scale":
        assert (75, "trigger_grad_norm") in stats and (75, "update_ratio") in stats
        assert (75, "max_abs") in stats  # its outputs, from the forward run again
    if plant in ("nan_loss", "error"):
        assert (75, "g_q50") in stats and (76, "max_abs") in stats
    assert (40, "update_ratio") in stats and (80, "update_ratio") in stats


class _CountingGenerator:
    """torch.default_generator as the Recorder sees it, counting its state getters."""

    def __init__(self, gen, clone=True):
        self.gen, self.calls = gen, []
        if clone:
            self.clone_state = lambda: (self.calls.append("clone_state"), gen.clone_state())[1]

    def get_state(self):
        self.calls.append("get_state")
        return self.gen.get_state()


@pytest.mark.parametrize("clone", [True, False])
def test_a_lean_step_clones_the_generator_and_a_capture_holds_its_step_start_state(
        tmp_path, monkeypatch, clone):
    """Issue 32 item 1: a lean step takes the CPU generator's state at its start by one
    ``clone_state`` (no 5 KB state tensor built per step, as ``get_state`` did); a capture
    turns the clone into the state tensor, the same the step started from, so replay's
    dropout draws are the step's. Before torch 2.4 (no ``clone_state``) it is get_state."""
    from safetensors.torch import load_file

    counting = _CountingGenerator(torch.default_generator, clone)
    monkeypatch.setattr(torch, "default_generator", counting)
    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    monkeypatch.undo()
    _train(rec, model, opt, x, y, 1)  # step 0: sampled by the layer statistics (full path)
    counting.calls.clear()
    _train(rec, model, opt, x, y, 3)
    want = "clone_state" if clone else "get_state"
    assert counting.calls == [want] * 3  # one per step, and the capture's below adds none
    counting.calls.clear()
    at_start = None
    with pytest.raises(RuntimeError):
        with rec.step((x, y)):
            at_start = torch.get_rng_state()
            torch.nn.functional.dropout(x, 0.5)  # the step draws from the generator
            raise RuntimeError("planted")
    assert counting.calls == [want]
    rec.close()
    (cap,) = open_run(tmp_path / "r").failures()
    saved = load_file(str(tmp_path / "r" / "failures" / cap["id"] / "rng.safetensors"))
    assert torch.equal(saved["torch_cpu"], at_start)


def test_rec_log_reads_a_cpu_loss_without_a_dispatched_op_and_other_values_as_before(tmp_path):
    """Issue 32 item 1: ``rec.log(loss=loss)`` reads a CPU loss with ``.tolist()``, which
    dispatches no aten op (``.item()`` dispatched ``aten::_local_scalar_dense``, ~1.6 us
    more in place, cold after backward); an integer, a one-element 1-d tensor and a
    float64 one are logged as before, a tensor that is not one element is refused."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from debugkit.errors import InvalidInputError

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    model, opt, x, y = _setup()
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600)
    _train(rec, model, opt, x, y, 2)
    with rec.step((x, y)):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        with Ops() as ops:
            rec.log(loss=loss)
        assert ops.ops == []
        rec.log(n=torch.tensor(3), one=torch.tensor([0.25]), d=torch.tensor(0.5, dtype=torch.float64),
                flag=torch.tensor(True))
        with pytest.raises(InvalidInputError, match=r"rec.log\(two=...\).*shape \(2,\)"):
            rec.log(two=torch.tensor([1.0, 2.0]))
        opt.step()
    rec.close()
    sc = open_run(tmp_path / "r").scalars()
    got = dict(zip(sc[sc["step"] == 2]["key"], sc[sc["step"] == 2]["value"]))
    assert got == {"loss": pytest.approx(loss.item()), "n": 3.0, "one": 0.25, "d": 0.5,
                   "flag": 1.0, "lr": 0.01}


def test_a_healthy_step_hands_the_writer_one_tuple_and_the_writer_builds_the_rows(tmp_path):
    """Issue 32 item 1: a step's rows go into its block slot as one tuple (one store; the
    norms, the RSS and the learning rates as they are), and the writer thread builds the
    steps, memory, grads and lr rows from it: no memory, grads or lr row tuple and no
    append of the lr row on the training thread. Several parameter groups: lr/0, lr/1."""
    model, _, x, y = _setup()
    opt = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.1},
                           {"params": model[2].parameters(), "lr": torch.tensor(0.2)}])
    rec = Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=3600,
                   layer_stats_every=None)
    _train(rec, model, opt, x, y, 5)
    b = rec._writer.block
    assert b.n == 5 and all(type(r) is tuple for r in b.rows[:5])
    slot = b.rows[4]
    assert [row[1] for row in slot[8]] == ["loss", "acc"]  # the logged rows only
    assert slot[6] is rec._step_grads and slot[9] == [("lr/0", 0.1), ("lr/1", pytest.approx(0.2))]
    rec.close()
    run = open_run(tmp_path / "r")
    sc = run.scalars()
    assert sc[sc["step"] == 4]["key"].tolist() == ["loss", "acc", "lr/0", "lr/1"]
    assert run.memory()["step"].tolist() == list(range(5))
    assert (run.memory()["device"] == "cpu").all() and (run.memory()["rss_bytes"] > 0).all()
    assert run.grad_norms()["step"].tolist() == [s for s in range(5) for _ in range(5)]


def test_a_lean_step_runs_no_optimizer_post_hook_and_no_python_frame_for_the_gradients(tmp_path):
    """Seventh session: with the norms taken in the optimizer's pre-hook (the default), the
    Recorder registers no step post-hook (the pre-hook marks the step optimizer-stepped as
    it returns, the update ratio of a sampled step is taken as the step ends), so torch's
    loop after the update calls nothing of debugkit's; the norms gather the gradients with
    ``map`` (no list comprehension frame), and ``rec.step()`` builds the step without a
    ``_Step.__init__`` frame. A framework's Recorder without the pre-hook
    (``grads_hook=False``) keeps the post-hook that marks its steps."""
    for kw in ({}, {"layer_stats_every": 500}, {"layer_stats_every": None}):
        model, opt, x, y = _setup()
        with Recorder(tmp_path / f"r{len(kw)}{kw.get('layer_stats_every')}", model,
                      optimizer=opt, **kw) as rec:
            assert len(opt._optimizer_step_pre_hooks) == 1 and not opt._optimizer_step_post_hooks
            _train(rec, model, opt, x, y, 300)
            s = rec._step_no
            while s % rec._specs.every == 0:
                _train(rec, model, opt, x, y, 1)
                s = rec._step_no
            rec._rss_next = float("inf")
            calls = _debugkit_calls(lambda r=rec, m=model, o=opt, a=x, b=y: _train(r, m, o, a, b, 1))
            assert rec._opt_stepped  # marked by the pre-hook (reset as the next step begins)
        assert "_post_optimizer_step" not in calls and "<listcomp>" not in calls, calls
        assert calls.count("compute") == 1 and calls[:2] == ["step", "__enter__"], calls
    model, opt, x, y = _setup()
    with Recorder(tmp_path / "framework", model, optimizer=opt, grads_hook=False) as rec:
        assert not opt._optimizer_step_pre_hooks and len(opt._optimizer_step_post_hooks) == 1
        with rec.step((x, y)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            rec.record_grads()
            assert not rec._opt_stepped
            opt.step()
            assert rec._opt_stepped


class _Planted(Exception):
    pass


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("plant,stepped", [
    ("body_before_step", False),   # raised in the body before optimizer.step()
    ("pre_hook", False),           # a later pre-hook of the user's raises: no update
    ("closure", False),            # the closure passed to step() raises inside it
    ("post_hook", True),           # a post-hook of the user's raises after the update
    ("body_after_step", True),     # raised in the body after optimizer.step()
    ("second_step", True),         # the second step() of the step raises before its update
])
def test_a_capture_says_whether_the_optimizer_stepped_without_a_post_hook(
        tmp_path, lean, plant, stepped):
    """The pre-hook marks the step optimizer-stepped as it returns (no post-hook); an
    exception that came out of ``optimizer.step()`` before its update returned is told
    apart by torch's wrapper frame in its traceback, so a capture's ``optimizer_stepped``
    is what the old post-hook made it, on the lean and the full path."""
    model, opt, x, y = _setup()
    armed = [False]

    def pre(o, a, k):
        if armed[0] and plant == "pre_hook":
            raise _Planted("pre")

    def post(o, a, k):
        if armed[0] and plant == "post_hook":
            raise _Planted("post")

    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        opt.register_step_pre_hook(pre)
        opt.register_step_post_hook(post)
        rec._lean_ok = rec._lean = lean
        for s in range(4):
            armed[0] = s == 2
            try:
                with rec.step((x, y)):
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss)
                    if armed[0] and plant == "body_before_step":
                        raise _Planted("before")
                    if armed[0] and plant == "closure":
                        def closure():
                            raise _Planted("closure")
                        opt.step(closure)
                    if armed[0] and plant == "second_step":
                        opt.step()
                        armed[0] = False
                        plant_pre = opt.register_step_pre_hook(
                            lambda o, a, k: (_ for _ in ()).throw(_Planted("second")))
                        try:
                            opt.step()
                        finally:
                            plant_pre.remove()
                    opt.step()
                    if armed[0] and plant == "body_after_step":
                        raise _Planted("after")
            except _Planted:
                pass
    (cap,) = open_run(tmp_path / "r").failures()
    assert cap["step"] == 2 and cap["kind"] == "exception"
    assert cap["optimizer_stepped"] is stepped


@pytest.mark.parametrize("layer_stats", [500, None])
def test_a_healthy_step_calls_the_model_without_torchs_forward_hook_path(tmp_path, layer_stats):
    """Issue 32 item 1: the model's output (for a non-finite capture's ``model_outputs``)
    is kept by the model's own class (recorder/keep_output.py), not a forward hook: the
    step's forward does not take nn.Module's hook path (``inner``, ``is_compiling``,
    ``is_scripting``, then the hook: 4 Python frames and a tuple of the hooks per forward),
    and calls torch's ``_call_impl`` once per module, as the bare model does."""
    import sys

    model, opt, x, y = _setup()

    def frames(fn):
        names: list[tuple[str, str]] = []

        def prof(frame, event, arg):
            if event == "call":
                names.append((frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_code.co_name))

        sys.setprofile(prof)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return names

    bare = frames(lambda: model(x))
    with Recorder(tmp_path / "r", model, optimizer=opt, layer_stats_every=layer_stats) as rec:
        _train(rec, model, opt, x, y, 300)
        s = rec._step_no
        while s % rec._specs.every == 0 or (layer_stats and s % layer_stats == 0):
            _train(rec, model, opt, x, y, 1)
            s = rec._step_no
        assert not model._forward_hooks
        step = frames(lambda: _train(rec, model, opt, x, y, 1))
        fwd = frames(lambda: model(x))
        assert rec._last_output is not None
    assert ("module.py", "inner") not in step and ("recorder.py", "_keep_output") not in step
    assert step.count(("module.py", "_call_impl")) == bare.count(("module.py", "_call_impl")) == 4
    # the recorded model's forward: its class's __call__ in place of _wrapped_call_impl
    assert len(fwd) == len(bare) and fwd[1] == ("keep_output.py", "__call__")
