"""TensorBoard import: every value checked against TensorBoard's own EventAccumulator on
event files written by SummaryWriter in the test."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from debugkit import format as fmt
from debugkit.cli import main
from debugkit.errors import InvalidInputError, RunDirError
from debugkit.io import tensorboard as tbio
from debugkit.io.run import open_run

LAYERS = ["encoder.0.weight", "encoder.0.bias", "head.weight"]


def _write_tb(logdir, steps=40, nan_at=None, seed=0, with_total=False, slash_layers=False):
    """A training-like TensorBoard log: grad_norm/<layer> per step, loss, lr, accuracy."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(seed)
    w = SummaryWriter(str(logdir), flush_secs=1)
    for s in range(steps):
        norms = {}
        for i, name in enumerate(LAYERS):
            v = float(np.exp(rng.standard_normal()) * (i + 1))
            if nan_at is not None and s >= nan_at and name == "head.weight":
                v = float("nan")
            norms[name] = v
            tag = name.replace(".", "/") if slash_layers else name
            w.add_scalar(f"grad_norm/{tag}", v, s)
        if with_total:
            w.add_scalar("grad_norm/total", math.sqrt(sum(v * v for v in norms.values())), s)
        w.add_scalar("train/loss", float(2.0 * math.exp(-s / 20) + rng.random() * 0.1), s)
        w.add_scalar("lr", 0.1 * (0.99 ** s), s)
        if s % 10 == 0:
            w.add_scalar("val/accuracy", float(s) / steps, s)
    w.close()


def _accumulator(d):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(d), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_every_value_matches_event_accumulator(tmp_path):
    logdir = tmp_path / "tb" / "exp1"
    _write_tb(logdir, nan_at=30)
    out = tmp_path / "run"
    res = tbio.convert_tensorboard(logdir, out)
    assert len(res) == 1 and res[0]["path"] == str(out)
    ea = _accumulator(logdir)
    run = open_run(out)
    assert run.manifest["schema_version"] == fmt.SCHEMA_VERSION
    assert run.manifest["imported_from"]["kind"] == "tensorboard"
    assert run.status == "finished"
    assert run.layers() == LAYERS
    g = run.grad_norms()
    sc = run.scalars()
    n_checked = 0
    for tag in ea.Tags()["scalars"]:
        events = ea.Scalars(tag)
        if tag.startswith("grad_norm/"):
            layer = tag[len("grad_norm/"):]
            got = g[g["layer"] == layer].sort_values("step", kind="stable")
        else:
            got = sc[sc["key"] == tag].sort_values("step", kind="stable")
            assert got["wall_time"].tolist() == [e.wall_time for e in events]
        assert got["step"].tolist() == [e.step for e in events]
        col = "grad_norm" if tag.startswith("grad_norm/") else "value"
        for mine, theirs in zip(got[col].tolist(), [e.value for e in events]):
            assert _same(float(np.float32(mine)) if col == "grad_norm" else mine, theirs)
            n_checked += 1
    assert n_checked == 40 * 3 + 40 * 2 + 4
    # the total is computed where every layer was logged
    tot = g[g["layer"] == fmt.TOTAL_LAYER].sort_values("step")
    assert len(tot) == 40
    first = g[(g["step"] == 0) & (g["layer"] != fmt.TOTAL_LAYER)]["grad_norm"].to_numpy()
    assert tot["grad_norm"].iloc[0] == pytest.approx(float(np.sqrt(np.sum(first ** 2))), rel=1e-6)
    assert math.isnan(tot["grad_norm"].iloc[35])
    assert run.steps()["step"].tolist() == list(range(40))


def test_imported_run_is_diagnosed(tmp_path, capsys):
    logdir = tmp_path / "tb"
    _write_tb(logdir, nan_at=30, with_total=True)
    assert main(["import", "tensorboard", str(logdir), str(tmp_path / "run"), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)["runs"]
    assert written[0]["layers"] == LAYERS and written[0]["steps"] == 40
    assert main(["diagnose", str(tmp_path / "run"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    ng = [f for f in found if f["kind"] == "nonfinite_grad"]
    assert [(f["step"], f["layer"]) for f in ng] == [(30, "head.weight")]
    assert ng[0]["evidence"]["loss_finite"] is True


def test_slash_layers_and_custom_pattern(tmp_path):
    logdir = tmp_path / "tb"
    _write_tb(logdir, steps=5, slash_layers=True)
    tbio.convert_tensorboard(logdir, tmp_path / "a")
    assert open_run(tmp_path / "a").layers() == LAYERS  # grad_norm/encoder/0/weight -> encoder.0.weight
    tbio.convert_tensorboard(logdir, tmp_path / "b", grad_pattern=r"^grad_norm/(?P<layer>encoder/.*)$")
    r = open_run(tmp_path / "b")
    assert r.layers() == LAYERS[:2]
    assert "grad_norm/head/weight" in set(r.scalars()["key"])


def test_tensor_scalars_of_the_scalars_plugin(tmp_path):
    """TF2's tf.summary.scalar writes 0-d float tensors tagged with the scalars plugin."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path / "tf2"))
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    for s, v in enumerate([0.5, 0.25, float("inf")]):
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                   float_val=[v])
        d = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                   double_val=[v * 2])
        val = [summary_pb2.Summary.Value(tag="loss", tensor=t, metadata=meta),
               summary_pb2.Summary.Value(tag="grad_norm/w", tensor=d, metadata=meta)]
        w.add_event(event_pb2.Event(step=s, wall_time=1000.0 + s, summary=summary_pb2.Summary(value=val)))
    w.close()
    ea = _accumulator(tmp_path / "tf2")
    from tensorboard.util import tensor_util

    want = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in ea.Tensors("loss")]
    tbio.convert_tensorboard(tmp_path / "tf2", tmp_path / "run")
    r = open_run(tmp_path / "run")
    assert r.scalars()["value"].tolist() == want == [0.5, 0.25, float("inf")]
    assert r.grad_norms().query("layer == 'w'")["grad_norm"].tolist() == [1.0, 0.5, float("inf")]


def test_several_runs_become_a_folder_of_runs(tmp_path):
    _write_tb(tmp_path / "tb" / "a", steps=3)
    _write_tb(tmp_path / "tb" / "b" / "seed1", steps=4, seed=1)
    res = tbio.convert_tensorboard(tmp_path / "tb", tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["a", "b-seed1"]
    assert [r["steps"] for r in res] == [3, 4]
    assert open_run(tmp_path / "out" / "b-seed1").name == "b-seed1"


def test_open_run_converts_a_tensorboard_dir_once(tmp_path):
    logdir = tmp_path / "tb"
    _write_tb(logdir, steps=6)
    before = {p: p.stat().st_mtime_ns for p in logdir.iterdir()}
    r1 = open_run(logdir)
    assert r1.source == logdir and r1.path != logdir
    assert r1.path.name == "tb" and len(r1.grad_norms()) == 6 * 4
    stamp = (r1.path / fmt.MANIFEST).stat().st_mtime_ns
    r2 = open_run(logdir)
    assert r2.path == r1.path and (r2.path / fmt.MANIFEST).stat().st_mtime_ns == stamp
    assert {p: p.stat().st_mtime_ns for p in logdir.iterdir()} == before  # the log is only read
    # new events: a new conversion replaces the old one in the cache
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(logdir))
    w.add_scalar("train/loss", 0.5, 6)
    w.close()
    r3 = open_run(logdir)
    assert r3.path != r1.path and not r1.path.exists()
    assert r3.scalars().query("key == 'train/loss'")["step"].max() == 6


def test_open_run_on_several_tensorboard_runs_names_them(tmp_path):
    _write_tb(tmp_path / "tb" / "a", steps=2)
    _write_tb(tmp_path / "tb" / "b", steps=2)
    with pytest.raises(RunDirError, match=r"holds 2 TensorBoard runs \(a, b\); open one of them"):
        open_run(tmp_path / "tb")


def test_torn_last_record_is_skipped(tmp_path):
    logdir = tmp_path / "tb"
    _write_tb(logdir, steps=10)
    f = next(logdir.iterdir())
    full = tbio.read_records(f)
    data = f.read_bytes()
    f.write_bytes(data[:-7])
    cut = tbio.read_records(f)
    assert cut.truncated and len(cut.records) == len(full.records) - 1
    assert not full.truncated


def test_corrupt_record_is_a_clear_error(tmp_path):
    logdir = tmp_path / "tb"
    _write_tb(logdir, steps=10)
    f = next(logdir.iterdir())
    data = bytearray(f.read_bytes())
    data[200] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(RunDirError, match=r"corrupt TensorBoard record at byte \d+ \((data|length) CRC mismatch\)"):
        tbio.convert_tensorboard(logdir, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.tmp")]


@pytest.mark.parametrize("setup,match,exc", [
    ("no_events", r"no TensorBoard event files", RunDirError),
    ("target_exists", r"already exists and is not empty", InvalidInputError),
    ("bad_pattern", r"needs a named group \(\?P<layer>\.\.\.\)", InvalidInputError),
    ("bad_regex", r"not a valid regular expression", InvalidInputError),
    ("not_a_dir", r"not a directory", RunDirError),
])
def test_bad_input(tmp_path, setup, match, exc):
    tb = tmp_path / "tb"
    tb.mkdir()
    pattern = None
    target = tmp_path / "run"
    if setup != "no_events":
        _write_tb(tb, steps=2)
    if setup == "target_exists":
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    if setup == "bad_pattern":
        pattern = r"^grad_norm/(.+)$"
    if setup == "bad_regex":
        pattern = r"^grad_norm/(?P<layer>"
    if setup == "not_a_dir":
        tb = tmp_path / "file.txt"
        tb.write_text("x")
    with pytest.raises(exc, match=match):
        tbio.convert_tensorboard(tb, target, grad_pattern=pattern)
    if setup == "target_exists":
        assert (target / "keep.txt").read_text() == "mine"


def test_cli_bad_input_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["import", "tensorboard", str(tmp_path / "empty"), str(tmp_path / "run")]) == 2
    assert "no TensorBoard event files" in capsys.readouterr().err
