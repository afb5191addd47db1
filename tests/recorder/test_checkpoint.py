"""Checkpoints: atomic writes, hash verification, resume_latest, safe loading."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from debugkit import Recorder, open_run, resume_latest
from debugkit.checkpoints import CheckpointWarning, read_index, verify, write_checkpoint
from debugkit.errors import InvalidInputError
from tests.checkpoint_factory import train_with_checkpoints as _train_with_checkpoints

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_round_trip_and_index(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
    with Recorder(tmp_path / "r", m, optimizer=opt) as rec:
        e = rec.checkpoint(step=7, extra={"epoch": 1})
    assert e["step"] == 7 and set(e["files"]) == {"model.safetensors", "optimizer.pt", "extra.json"}
    df = open_run(tmp_path / "r").checkpoints()
    assert list(df.columns[:5]) == ["step", "path", "bytes", "sha256", "ok"]
    assert df["step"].tolist() == [7.0] and df["ok"].tolist() == [True]
    assert df["sha256"][0] == e["files"]["model.safetensors"]["sha256"]
    m2 = _model()
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(1.0)
    opt2 = torch.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9)
    assert resume_latest(tmp_path / "r", m2, opt2) == 7
    assert _same(m.state_dict(), m2.state_dict())
    mom = [opt2.state_dict()["state"][i]["momentum_buffer"] for i in range(4)]
    assert all(torch.equal(a, opt.state_dict()["state"][i]["momentum_buffer"]) for i, a in enumerate(mom))
    assert json.loads((Path(df["path"][0]) / "extra.json").read_text()) == {"epoch": 1}


def test_keep_last_prunes_old_checkpoints(tmp_path):
    m = _model()
    for s in range(5):
        write_checkpoint(tmp_path, m, step=s, keep_last=2)
    assert [e["step"] for e in read_index(tmp_path)] == [3, 4]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["000000003", "000000004", "index.json"]


def test_sigkill_then_resume_skips_the_truncated_newest_and_is_bit_identical(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(HERE / "_checkpoint_child.py"), str(run)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        seen = []
        for line in proc.stdout:
            seen.append(int(line.split()[1]))
            if len(seen) == 4:
                break
        os.kill(proc.pid, signal.SIGKILL)  # possibly in the middle of the next checkpoint()
    finally:
        proc.wait(30)
    # whatever the kill interrupted, no temporary folder is taken as a checkpoint
    steps = [e["step"] for e in read_index(run)]
    assert steps and steps == sorted(steps) and all(verify(run, e) is None for e in read_index(run))
    newest = steps[-1]
    # truncate the newest checkpoint's weights: resume must fall back to the one before
    f = run / "checkpoints" / f"{newest:09d}" / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    m = _model()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    with pytest.warns(CheckpointWarning, match=f"step {newest} fails verification.*model.safetensors has"):
        got = resume_latest(run, m, opt)
    assert got == steps[-2]
    ref = torch.load(run / f"expected-{got}.ref", weights_only=True)
    assert _same(m.state_dict(), ref["model"])
    st = opt.state_dict()["state"]
    assert all(torch.equal(st[i]["exp_avg"], ref["opt"]["state"][i]["exp_avg"]) for i in st)
    df = open_run(run).checkpoints()
    assert df.loc[df["step"] == newest, "ok"].tolist() == [False]


def test_no_checkpoint_gives_none(tmp_path):
    assert resume_latest(tmp_path, _model()) is None


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = None


def test_user_state_dict_files_load_safely_and_a_malicious_pickle_never_runs(tmp_path):
    global MARKER
    from safetensors.torch import save_file

    MARKER = str(tmp_path / "pwned")
    m = _model()
    torch.save(m.state_dict(), tmp_path / "ckpt-epoch-3.pt")
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(tmp_path / "weights-10.safetensors"))
    (tmp_path / "evil-5.pth").write_bytes(pickle.dumps(_Evil()))
    (tmp_path / "cut-7.safetensors").write_bytes((tmp_path / "weights-10.safetensors").read_bytes()[:100])
    from debugkit.checkpoints import list_checkpoints

    df = list_checkpoints(tmp_path).set_index("step")
    assert df.loc[3.0, "ok"] and df.loc[10.0, "ok"]
    assert not df.loc[5.0, "ok"] and "not a loadable state_dict" in df.loc[5.0, "problem"]
    assert not df.loc[7.0, "ok"]
    assert not Path(MARKER).exists()


@pytest.mark.parametrize("kw, match", [({"step": -1}, "step=-1"), ({"step": 1, "keep_last": 0}, "keep_last=0")])
def test_bad_arguments(tmp_path, kw, match):
    with pytest.raises(InvalidInputError, match=match):
        write_checkpoint(tmp_path, _model(), **kw)


def test_unreadable_index_is_a_clear_error(tmp_path):
    from debugkit.errors import RunDirError

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "index.json").write_text("{not json")
    with pytest.raises(RunDirError, match="checkpoint index is unreadable"):
        resume_latest(tmp_path, _model())


def test_diagnose_frozen_layer_and_nonfinite_weights(tmp_path):
    from debugkit.diagnose import diagnose

    _train_with_checkpoints(tmp_path / "ok")
    assert not [f for f in diagnose(open_run(tmp_path / "ok")) if f.kind in ("frozen_layer", "nonfinite_weights")]

    _train_with_checkpoints(tmp_path / "frozen", freeze_first=True)
    f = [f for f in diagnose(open_run(tmp_path / "frozen")) if f.kind == "frozen_layer"]
    assert len(f) == 1 and f[0].layer == "0.weight" and set(f[0].evidence["layers"]) == {"0.weight", "0.bias"}

    _train_with_checkpoints(tmp_path / "nan", nan_at=3)  # just before the checkpoint at step 4
    f = [f for f in diagnose(open_run(tmp_path / "nan")) if f.kind == "nonfinite_weights"]
    assert len(f) == 1 and f[0].step == 4 and f[0].layer == "2.weight" and f[0].severity == "error"
