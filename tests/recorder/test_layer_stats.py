"""Recorder(layer_stats_every=N): what is recorded on which step, the grad-norm trigger,
failure steps, and reading runs of format 1.0 that have no layers table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from debugkit import Recorder, open_run
from debugkit import format as fmt
from debugkit.errors import InvalidInputError

from ..conftest import SAMPLE_RUNS


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Sigmoid(),
                         nn.Linear(16, 1))


def _loop(run, *, steps, every, scale_at=None, fail_at=None, log_every=1):
    m = _net()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    hooks = {}
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
    rec = Recorder(run, m, opt, layer_stats_every=every, log_every=log_every)
    for i in range(steps):
        try:
            with rec.step(x):
                hooks[i] = len(m[1]._forward_hooks)
                loss = m(x).pow(2).mean() * (1e4 if i == scale_at else 1.0)
                opt.zero_grad()
                loss.backward()
                if i == fail_at:
                    raise RuntimeError("planted failure")
                opt.step()
                rec.log(loss=loss)
        except RuntimeError:
            pass
    rec.close()
    return open_run(run), hooks


def test_only_sampled_steps_carry_hooks_and_rows(tmp_path):
    run, hooks = _loop(tmp_path / "r", steps=12, every=5)
    df = run.layer_stats()
    steps = set(df["step"])
    assert {0, 5, 10} <= steps
    assert all(hooks[s] == 1 for s in (0, 5, 10))
    assert all(hooks[s] == 0 for s in range(12) if s not in steps)  # no hook cost elsewhere
    assert all(len(m._forward_hooks) == 0 for m in _net().modules())
    at0 = df[df["step"] == 0]
    relu = at0[at0["module"] == "1"].set_index("stat")["value"]
    assert set(relu.index) == {"mean", "std", "max_abs", "frac_zero", "frac_nonfinite",
                               "frac_dead_units"}
    assert 0 < relu["frac_zero"] < 1 and relu["mean"] > 0
    sig = at0[at0["module"] == "3"]
    assert "frac_saturated" in set(sig["stat"]) and (sig["module_type"] == "Sigmoid").all()
    w = at0[(at0["module"] == "0.weight")].set_index("stat")["value"]
    qs = [w[f"w_q{q}"] for q in ("01", "05", "25", "50", "75", "95", "99")]
    assert qs == sorted(qs) and qs[0] < 0 < qs[-1]
    assert w["ndim"] == 2 and 0 < w["update_ratio"] < 1
    wt = _net()[0].weight.detach()
    for q in (0.05, 0.5, 0.95):  # read from 1,024 evenly spaced elements of the 2,048
        full = float(wt.reshape(-1).quantile(q))
        assert w[f"w_q{round(q * 100):02d}"] == pytest.approx(full, abs=0.02 * float(wt.std()))
    assert run.manifest["layer_stats_every"] == 5


def test_a_gradient_norm_leaving_its_band_samples_its_step_and_the_next(tmp_path):
    """The norms of step 14 leave their band (a planted x1e4 loss): step 14's outputs are
    recorded by running its forward again before the optimizer step, its rows name the
    layers that moved, and step 15 is sampled too."""
    run, hooks = _loop(tmp_path / "r", steps=20, every=100, scale_at=14)
    df = run.layer_stats()
    assert set(df["step"]) == {0, 14, 15}, sorted(set(df["step"]))  # nothing else moved
    assert hooks[14] == 0  # step 14 ran without hooks: its outputs come from the re-run
    at14 = df[df["step"] == 14]
    trig = at14[at14["stat"] == "trigger_grad_norm"]
    assert len(trig) and set(trig["module"]) <= {"0.weight", "0.bias", "2.weight", "2.bias",
                                                 "4.weight", "4.bias"}
    outs = at14[at14["module_type"] != "param"]
    assert set(outs["module"]) == {"0", "1", "2", "3", "4"}
    # step 15 (hooks on its own forward) records the same statistics, and step 14 its
    # update ratio (the re-run came before the optimizer step)
    at15 = df[(df["step"] == 15) & (df["module_type"] != "param")]
    a = outs.set_index(["module", "stat"])["value"]
    b = at15.set_index(["module", "stat"])["value"]
    assert set(a.index) == set(b.index)
    assert "update_ratio" in set(at14["stat"])


def test_a_failure_step_records_weights_and_grads_and_samples_the_next(tmp_path):
    run, _ = _loop(tmp_path / "r", steps=10, every=100, fail_at=6)
    df = run.layer_stats()
    at6 = df[df["step"] == 6]
    assert {"w_q50", "g_q50"} <= set(at6["stat"]) and (at6["module_type"] == "param").all()
    assert 7 in set(df["step"]) and "max_abs" in set(df[df["step"] == 7]["stat"])
    assert run.failures()


def test_layer_stats_every_is_checked(tmp_path):
    for bad in (-1, 2.5, "10", True, False):
        with pytest.raises(InvalidInputError, match="layer_stats_every"):
            Recorder(tmp_path / "r", _net(), layer_stats_every=bad)
    assert not (tmp_path / "r").exists()


def test_layer_stats_are_on_by_default_every_500_steps_and_off_with_none_or_0(tmp_path):
    """Issue 33: the default Recorder samples every 500th step (its manifest says so) and
    takes the lean path on the others; None and 0 turn the layer statistics off."""
    from debugkit.recorder.recorder import LAYER_STATS_EVERY

    assert LAYER_STATS_EVERY == 500
    m = _net()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    x = torch.randn(32, 8)
    with Recorder(tmp_path / "d", m, opt) as rec:
        assert rec._layer_stats is not None and rec._layer_stats.every == 500 and rec._lean_ok
        for _ in range(3):
            with rec.step(x):
                opt.zero_grad()
                m(x).pow(2).mean().backward()
                opt.step()
    run = open_run(tmp_path / "d")
    assert run.manifest["layer_stats_every"] == 500
    assert set(run.layer_stats()["step"]) == {0}
    for off in (None, 0):
        with Recorder(tmp_path / f"off{off}", m, opt, layer_stats_every=off) as rec:
            assert rec._layer_stats is None
        assert open_run(tmp_path / f"off{off}").manifest["layer_stats_every"] is None


def test_a_format_1_0_run_reads_with_an_empty_layers_table():
    run = open_run(SAMPLE_RUNS / "digits-mlp")
    assert run.manifest["schema_version"] == "1.0"
    assert run.manifest["_read_as_version"] == fmt.SCHEMA_VERSION == "1.3"
    df = run.layer_stats()
    assert list(df.columns) == ["step", "rank", "order", "module", "module_type", "stat", "value"]
    assert df.empty and run.row_counts()["layers"] == 0


def test_watch_records_layer_stats_once_per_module_and_step(tmp_path):
    import torch.nn.functional as F

    import debugkit

    m = _net()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    with debugkit.watch(m, opt, run_dir=tmp_path / "w", layer_stats_every=2):
        for _ in range(5):
            opt.zero_grad()
            for _j in range(2):  # two micro-batches per optimizer step
                F.mse_loss(m(torch.randn(16, 8)), torch.zeros(16, 1)).backward()
            opt.step()
    df = open_run(tmp_path / "w").layer_stats()
    assert {0, 2, 4} <= set(df["step"])
    assert not df.duplicated(["step", "module", "stat"]).any()  # the first forward only
    assert (df[df["stat"] == "update_ratio"]["value"] > 0).all()


class _Plant(nn.Module):
    """A leaf module that plants one NaN and one inf in its output."""

    def forward(self, x):
        y = x.clone()
        y[0, 0], y[1, 1] = float("nan"), float("inf")
        return y


def _reference(y, cls, bounds=None):
    """The output statistics by their definitions (docs/layers.md), one module at a time,
    in float64."""
    y = y.double()
    finite = torch.isfinite(y)
    z = torch.where(finite, y, torch.zeros((), dtype=y.dtype))
    out = {"mean": z.mean(), "std": z.std(correction=0), "max_abs": z.abs().max(),
           "frac_zero": (y == 0).float().mean(), "frac_nonfinite": 1 - finite.float().mean()}
    if bounds is not None:
        b0, b1 = bounds
        m = 0.01 * (b1 - b0)
        out["frac_saturated"] = ((y <= b0 + m) | (y >= b1 - m)).float().mean()
    if cls == "ReLU":
        out["frac_dead_units"] = (y == 0).all(0).float().mean()
    return {k: float(v) for k, v in out.items()}


def test_output_statistics_match_their_definitions_module_by_module(tmp_path):
    """Outputs are reduced in stacked groups (same shape and kind): each module still gets
    its own values, an in-place ReLU after a Linear does not change the Linear's, and
    NaN/inf count as non-finite, not as zeros, saturated or dead."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), _Plant(),
                      nn.Tanh(), nn.Linear(16, 16), nn.Sigmoid(), nn.Linear(16, 16),
                      nn.ReLU(), nn.Hardtanh(-0.5, 0.5))
    with torch.no_grad():
        m[0].bias[:5] = -100.0  # five dead units after the first ReLU
        m[5].weight.mul_(100.0)  # a saturating sigmoid
        m[7].weight.mul_(1e25)  # outputs near 1e25: their squares overflow float32
    seen = {}

    def keep(name):
        def hook(mod, args, y):
            seen.setdefault(name, y.detach().clone())
        return hook

    for name, mod in m.named_children():
        mod.register_forward_hook(keep(name))
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(3))
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    rec = Recorder(tmp_path / "r", m, opt, layer_stats_every=1)
    with rec.step(x):
        out = m(x)
        opt.zero_grad()
        torch.nan_to_num(out).sum().backward()
        opt.step()
    rec.close()
    df = open_run(tmp_path / "r").layer_stats()
    got = df[df["module_type"] != "param"]
    bounds = {"Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0), "Hardtanh": (-0.5, 0.5)}
    assert set(got["module"]) == set(seen)
    for name, y in seen.items():
        cls = type(m[int(name)]).__name__
        ref = _reference(y, cls, bounds.get(cls))
        rows = got[got["module"] == name]
        assert (rows["module_type"] == cls).all() and (rows["order"] == int(name)).all()
        vals = rows.set_index("stat")["value"].to_dict()
        assert set(vals) == set(ref), name
        for k, v in ref.items():
            assert vals[k] == pytest.approx(v, rel=1e-4, abs=1e-6), (name, cls, k)
    assert 0.3 < got[(got["module"] == "1") & (got["stat"] == "frac_dead_units")]["value"].iloc[0]
    assert got[(got["module"] == "6") & (got["stat"] == "frac_saturated")]["value"].iloc[0] > 0.5
    assert got[(got["module"] == "3") & (got["stat"] == "frac_nonfinite")]["value"].iloc[0] > 0


def _nan_loss_job(run, every, steps=6, nan_at=5):
    """BatchNorm and Dropout in the model; the loss of step ``nan_at`` is made NaN after a
    finite forward. Returns the model and its Dropout outputs per step."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5),
                      nn.Linear(16, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    seen: dict = {}
    step = {"i": 0}
    m[3].register_forward_hook(lambda mod, a, y: seen.setdefault(step["i"], y.detach().clone()))
    rec = Recorder(run, m, opt, layer_stats_every=every)
    for i in range(steps):
        step["i"] = i
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(i))
        with rec.step((x, x[:, :1])):
            loss = m(x).pow(2).mean() * (float("nan") if i == nan_at else 1.0)
            opt.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            opt.step()
    rec.close()
    return m, seen


def test_a_nonfinite_step_records_its_outputs_as_its_forward_produced_them(tmp_path):
    """Step 5's loss is NaN on an unsampled step: the capture runs its forward again with
    the hooks, from the step's RNG state (Dropout draws the same mask), and leaves the
    model's buffers and the RNG as they were (a twin without layer statistics ends with
    the same BatchNorm statistics and generator state)."""
    m, seen = _nan_loss_job(tmp_path / "r", every=100)
    rng_after = torch.get_rng_state()
    twin, twin_seen = _nan_loss_job(tmp_path / "twin", every=None)
    assert torch.equal(seen[5], twin_seen[5])
    assert torch.equal(rng_after, torch.get_rng_state())
    assert torch.equal(m[1].running_mean, twin[1].running_mean)
    assert torch.equal(m[1].running_var, twin[1].running_var)
    run = open_run(tmp_path / "r")
    assert len(run.failures()) == 1
    df = run.layer_stats()
    assert set(df["step"]) == {0, 5}
    drop = df[(df["step"] == 5) & (df["module"] == "3")].set_index("stat")["value"]
    ref = _reference(seen[5], "Dropout")
    for k in ("mean", "std", "max_abs", "frac_zero"):
        assert drop[k] == pytest.approx(ref[k], rel=1e-5), k
    assert {"w_q50", "g_q50"} <= set(df[df["step"] == 5]["stat"])


def _trigger(n_layers):
    from debugkit.recorder.layerstats import LayerStats

    params = [(f"p{i}", torch.zeros(1)) for i in range(n_layers)]
    return LayerStats(nn.Linear(2, 2), params, None, 10**9, lambda *a: None, False)


def _norm_rows(n_layers, steps, seed=0, planted=()):
    """Per-step norms (layers + total) with +-20 % noise around fixed levels; ``planted``:
    ``(step, layer, factor)`` (factor NaN plants a NaN)."""
    import math

    import numpy as np

    rng = np.random.default_rng(seed)
    level = rng.uniform(0.01, 2.0, n_layers)
    rows = []
    for s in range(steps):
        v = (level * rng.uniform(0.8, 1.2, n_layers)).tolist()
        for ps, layer, factor in planted:
            if ps == s:
                v[layer] = math.nan if factor != factor else v[layer] * factor
        v.append(math.hypot(*v) if all(x == x for x in v) else math.nan)
        rows.append(v)
    return rows


@pytest.mark.parametrize("n_layers", [50, 200])  # the plain-Python check, then numpy's
def test_the_trigger_checks_every_step_and_names_only_the_layer_that_moved(n_layers):
    """The band is updated every TRIGGER_UPDATE_EVERY observations after the first ones,
    but every step is checked against it: a x10 jump on a step between two updates fires
    on that step, naming that layer; +-20 % noise never fires; a NaN fires and leaves the
    band as it was."""
    from debugkit.recorder import layerstats as ls_mod

    jump = 1001  # not an update step: (jump + 1) % TRIGGER_UPDATE_EVERY != 0
    assert (jump + 1) % ls_mod.TRIGGER_UPDATE_EVERY and jump + 1 > ls_mod.TRIGGER_DENSE
    rows = _norm_rows(n_layers, 1600, planted=[(jump, 7, 10.0), (1500, 3, float("nan"))])
    t = _trigger(n_layers)
    fired, named, kept = [], {}, None
    for s, v in enumerate(rows):
        band = (list(t._lo), list(t._hi)) if t._lo is not None else None
        if t.observe_norms(s, v):
            fired.append(s)
            named[s] = [name for name, _ in t._triggered]
        if s == 1500:
            kept = band == (t._lo, t._hi)
    assert fired == [jump, 1500]
    assert named[jump] == ["p7"] and named[1500] == ["p3"]
    assert {jump + 1, 1501} <= t._forced
    assert kept  # the blow-up did not widen the band


def test_the_trigger_fires_on_the_same_steps_in_python_and_numpy(monkeypatch):
    from debugkit.recorder import layerstats as ls_mod

    planted = [(300, 5, 8.0), (301, 5, 8.0), (650, 40, 0.05), (900, 0, 30.0)]
    rows = _norm_rows(60, 1000, seed=3, planted=planted)
    runs = []
    for py_layers in (10**6, 0):
        monkeypatch.setattr(ls_mod, "TRIGGER_PY_LAYERS", py_layers)
        t = _trigger(60)
        runs.append([(s, tuple(n for n, _ in t._triggered)) for s, v in enumerate(rows)
                     if t.observe_norms(s, v)])
    assert runs[0] == runs[1]
    assert [s for s, _ in runs[0]][:1] == [300] and (650, ("p40",)) in runs[0]
    assert (900, ("p0",)) in runs[0]


def test_a_sampled_step_holds_at_most_the_output_budget_and_frees_its_copies(tmp_path, monkeypatch):
    """Memory per sampled step is bounded: copied outputs are reduced whenever they pass
    OUTPUT_BUDGET elements (the statistics are the same as with the whole step's copies
    held), and the weights copied for the update ratio are freed when the step ends."""
    import numpy as np

    from debugkit.recorder import layerstats as ls_mod

    def run(name, budget):
        monkeypatch.setattr(ls_mod, "OUTPUT_BUDGET", budget)
        torch.manual_seed(0)
        m = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(6)])
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        rec = Recorder(tmp_path / name, m, opt, layer_stats_every=2)
        ls = rec._layer_stats
        held, after_step = [], []
        stash = ls._stash
        monkeypatch.setattr(ls, "_stash", lambda *a: (stash(*a), held.append(ls._out_elems))[0])
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
        for _ in range(4):
            with rec.step(x):
                loss = m(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            after_step.append(ls._w0)
        rec.close()
        df = open_run(tmp_path / name).layer_stats()
        return held, after_step, df.sort_values(["step", "module", "stat"])["value"].to_numpy()

    budget = 3 * 32 * 64  # three layers' outputs
    held, after_step, bounded = run("bounded", budget)
    assert held and max(held) <= budget  # 12 outputs of 2,048 per sampled step
    assert all(w is None for w in after_step)
    _, _, whole = run("whole", 1 << 30)
    np.testing.assert_allclose(bounded, whole, rtol=1e-6)


def test_the_band_updated_in_plain_python_is_numpys(monkeypatch):
    """Up to TRIGGER_PY_LAYERS layers the band is updated by a plain loop (numpy runs
    cache-cold right after backward); the bounds are numpy's, a NaN step included."""
    import math

    from debugkit.recorder import layerstats as ls_mod

    rows = _norm_rows(60, 300, seed=5, planted=[(120, 4, 50.0), (200, 9, float("nan"))])
    bands = []
    for py_layers in (10**6, 0):
        monkeypatch.setattr(ls_mod, "TRIGGER_PY_LAYERS", py_layers)
        t = _trigger(60)
        for s, v in enumerate(rows):
            t.observe_norms(s, v)
        bands.append((list(t._lo), list(t._hi), list(t._ema), list(t._dev)))
    assert type(_trigger(60)._ema) is type(None)
    for a, b in zip(bands[0], bands[1]):
        assert len(a) == len(b) == 60
        assert all(math.isclose(x, y, rel_tol=1e-12) for x, y in zip(a, b))
