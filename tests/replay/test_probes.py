"""The hooks that watch a replayed step, on small models run in this process."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from debugkit.replay.child import run_pass
from debugkit.replay.probes import Probe, expected_shape, shape_ok, user_frame


class Dist(nn.Module):
    def forward(self, a, b):
        return torch.sqrt(((a - b) ** 2).sum(dim=1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.dist = Dist()
        self.emb = nn.Embedding(5, 3)

    def forward(self, x):
        z = self.enc(x)
        return self.dist(z, z[[0, 0, 2, 3]])


def run(model, batch, fn, anomaly=True):
    refs = {t.untyped_storage().data_ptr(): (i,) for i, t in enumerate(batch)}
    probe = Probe(model, refs, n_batch=len(batch[0])).install()
    out = run_pass(model, batch, "step_fn", fn, probe, torch.device("cpu"), anomaly=anomaly)
    probe.remove()
    return probe, out


def test_backward_culprit_is_the_sqrt_node_of_the_distance_module():
    torch.manual_seed(0)
    model = Net()
    batch = (torch.randn(4, 3), torch.tensor([0, 1, 2, 3]))
    probe, out = run(model, batch, lambda m, b: m(b[0]).mean())
    b = probe.backward
    assert (b["op"], b["module"], b["samples"][0]["sample"]) == ("SqrtBackward0", "dist", 0)
    # Samples 0, 2 and 3 are paired with themselves: distance exactly 0.
    assert [s["sample"] for s in b["samples"]] == [0, 2, 3] and b["n_samples"] == 3
    assert b["created_at"]["code"] == "return torch.sqrt(((a - b) ** 2).sum(dim=1))"
    assert b["created_at"]["function"] == "forward"
    assert out["anomaly"]["op"] in ("SqrtBackward0", "PowBackward0", "SubBackward0")
    assert out["error"]["type"] == "RuntimeError"
    assert probe.forward_born is None


def test_inf_in_backward_is_found_even_without_anomaly_mode():
    torch.manual_seed(0)
    model = Net()
    batch = (torch.randn(4, 3), torch.tensor([0, 1, 2, 3]))
    probe, out = run(model, batch, lambda m, b: m(b[0]).mean(), anomaly=False)
    assert probe.backward["op"] == "SqrtBackward0" and probe.backward["kind"] == "inf"
    assert out["error"] is None
    assert out["grads_nonfinite"] == ["enc.0.weight", "enc.0.bias"]


def test_embedding_indices_out_of_range_name_module_sample_and_position():
    model = Net()
    ids = torch.tensor([[0, 1], [4, 5], [7, 2]])
    probe, out = run(model, (ids,), lambda m, b: m.emb(b[0]).sum())
    e = probe.embeddings[0]
    assert (e["module"], e["num_embeddings"], e["count"], e["path"]) == ("emb", 5, 2, "batch[0]")
    assert e["samples"] == [{"sample": 1, "positions": [1], "values": [5]},
                            {"sample": 2, "positions": [0], "values": [7]}]
    assert out["error"]["type"] == "IndexError"
    assert out["error"]["module_stack"] == ["emb"]


def test_shape_error_leaves_the_raising_module_on_the_stack():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(5, 2))
    batch = (torch.randn(2, 3),)
    probe, out = run(model, batch, lambda m, b: m(b[0]).sum())
    assert out["error"]["module_stack"] == ["", "2"]
    assert out["error"]["raising_frame"]["inputs"][0]["shape"] == [2, 4]
    assert probe.shape_findings == [{"module": "2", "type": "Linear", "actual": [2, 4],
                                     "expected": "last dimension 5 (in_features)", "path": None}]


def test_dtype_mismatch_is_reported():
    model = nn.Linear(3, 2)
    batch = (torch.randn(2, 3, dtype=torch.float64),)
    probe, out = run(model, batch, lambda m, b: m(b[0]).sum())
    assert probe.mismatches == [{"module": "", "type": "Linear", "path": "batch[0]",
                                 "problem": "input of dtype float64, parameters of dtype float32"}]
    assert out["error"]["type"] == "RuntimeError"


def test_first_module_with_non_finite_output_from_finite_inputs():
    class Log(nn.Module):
        def forward(self, x):
            return torch.log(x)

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), Log(), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        model[0].bias.zero_()
    batch = (torch.tensor([[1.0, 2.0], [3.0, 4.0]]),)
    probe, out = run(model, batch, lambda m, b: m(b[0]).sum(), anomaly=False)
    born = probe.forward_born
    assert (born["module"], born["type"], born["kind"]) == ("2", "Log", "inf")
    assert [s["sample"] for s in born["samples"]] == [0, 1]
    assert out["loss_finite"] is False


def test_non_finite_input_enters_at_the_first_leaf():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    x = torch.tensor([[1.0, float("nan")]])
    probe, _ = run(model, (x,), lambda m, b: m(b[0]).sum(), anomaly=False)
    assert probe.forward_entry["module"] == "0" and probe.forward_entry["path"] == "batch[0]"
    assert probe.forward_born is None


@pytest.mark.parametrize("module, shape, ok", [
    (nn.Linear(3, 4), [2, 3], True),
    (nn.Linear(3, 4), [2, 5, 3], True),
    (nn.Linear(3, 4), [2, 4], False),
    (nn.Conv2d(3, 8, 3), [2, 3, 9, 9], True),
    (nn.Conv2d(3, 8, 3), [2, 1, 9, 9], False),
    (nn.BatchNorm1d(4), [2, 4], True),
    (nn.LayerNorm([4]), [2, 5], False),
    (nn.ReLU(), [2, 5], None),
])
def test_shape_ok(module, shape, ok):
    assert shape_ok(module, shape) is ok


def test_expected_shape_texts():
    assert expected_shape(nn.Conv2d(3, 8, 3), []) == "3-D or 4-D input with 3 channels at dimension -3 (in_channels)"
    assert expected_shape(nn.LSTM(7, 3), []) == "last dimension 7 (input_size)"


def test_user_frame_skips_torch_frames():
    trace = ['  File "/proj/model.py", line 12, in forward\n    y = torch.sqrt(x)\n',
             '  File "/usr/lib/python3/site-packages/torch/_tensor.py", line 39, in wrapped\n    return f(self)\n']
    assert user_frame(trace) == {"file": "/proj/model.py", "line": 12, "function": "forward",
                                 "code": "y = torch.sqrt(x)"}
    assert user_frame(None) is None


def test_a_column_slice_of_a_batch_tensor_names_its_position():
    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Embedding(4, 2)
            self.b = nn.Embedding(3, 2)

        def forward(self, codes):
            return torch.cat([self.a(codes[:, 0]), self.b(codes[:, 1])], dim=1)

    codes = torch.tensor([[0, 1], [3, 2], [1, 3]])
    refs = {codes.untyped_storage().data_ptr(): (0,)}
    probe = Probe(Enc(), refs, n_batch=3)
    probe.batch_bases = {codes.untyped_storage().data_ptr(): codes}
    probe.install()
    out = run_pass(probe.model, (codes,), "step_fn", lambda m, b: m(b[0]).sum(), probe,
                   torch.device("cpu"), anomaly=False)
    probe.remove()
    e = probe.embeddings[0]
    assert (e["module"], e["path"], e["input_position"]) == ("b", "batch[0]", 1)
    assert e["samples"] == [{"sample": 2, "positions": [], "values": [3]}]
    assert out["error"]["type"] == "IndexError"
