"""Value checks on a batch: labels, non-finite inputs, index ranges (exact outputs)."""

from __future__ import annotations

import math

import pytest
import torch

from debugkit.replay import datachecks as D


def test_labels_outside_the_range_with_ignore_index():
    y = torch.tensor([1, 12, 3, -100, -5, 9])
    out = D.find_bad_labels(y, 10)
    assert out == {"path": [1], "num_classes": 10, "source": "num_classes", "count": 2, "total": 6,
                   "samples": [{"sample": 1, "positions": [], "values": [12]},
                               {"sample": 4, "positions": [], "values": [-5]}],
                   "n_samples": 2}


def test_sequence_labels_name_sample_and_position():
    y = torch.tensor([[0, 1, 2], [3, 7, 1]])
    out = D.find_bad_labels(y, 4, n_batch=2)
    assert out["count"] == 1
    assert out["samples"] == [{"sample": 1, "positions": [1], "values": [7]}]


def test_all_labels_fine():
    assert D.find_bad_labels(torch.arange(5), 5)["count"] == 0


@pytest.mark.parametrize("batch, path", [
    ((torch.zeros(2, 3), torch.tensor([0, 1])), (1,)),
    ([torch.zeros(2, 3), torch.tensor([0, 1])], (1,)),
    ({"x": torch.zeros(2), "label": torch.tensor([0, 1])}, ("label",)),
    ({"x": torch.zeros(2), "targets": torch.tensor([0, 1])}, ("targets",)),
])
def test_find_target(batch, path):
    assert D.find_target(batch)[0] == path


@pytest.mark.parametrize("batch", [
    (torch.zeros(2, 3), torch.zeros(2)),             # float target: regression
    torch.zeros(2, 3),
    {"x": torch.zeros(2), "label": torch.tensor([True, False])},
    (torch.zeros(2), torch.zeros(2), torch.zeros(2)),
])
def test_no_target(batch):
    assert D.find_target(batch) is None


def test_nonfinite_inputs_by_sample_and_feature():
    x = torch.zeros(4, 3)
    x[2, 1] = float("nan")
    x[2, 2] = float("-inf")
    x[0, 0] = float("inf")
    out = D.find_nonfinite((x, torch.tensor([0, 1, 0, 1])), skip=(1,))
    assert len(out) == 1
    f = out[0]
    assert (f["path"], f["shape"], f["nan"], f["posinf"], f["neginf"], f["n_samples"]) == \
        ([0], [4, 3], 1, 1, 1, 2)
    assert f["samples"][0] == {"sample": 0, "positions": [0], "values": [math.inf]}
    assert f["samples"][1]["sample"] == 2 and f["samples"][1]["positions"] == [1, 2]
    assert math.isnan(f["samples"][1]["values"][0]) and f["samples"][1]["values"][1] == -math.inf


def test_nonfinite_in_nested_dict_and_images():
    img = torch.zeros(3, 1, 2, 2)
    img[1, 0, 1, 0] = float("nan")
    out = D.find_nonfinite({"a": {"img": img}, "n": torch.tensor([1, 2, 3])})
    assert out[0]["path"] == ["a", "img"]
    assert out[0]["samples"] == [{"sample": 1, "positions": [[0, 1, 0]], "values": [out[0]["samples"][0]["values"][0]]}]


def test_finite_batch_has_no_findings():
    assert D.find_nonfinite((torch.ones(3, 2), torch.tensor([0, 1, 0]))) == []


def test_index_range():
    idx = torch.tensor([[1, 2, 9], [0, -1, 3]])
    out = D.check_index_range(idx, 4, n_batch=2)
    assert out == {"count": 2, "total": 6, "min": -1, "max": 9, "n_samples": 2,
                   "samples": [{"sample": 0, "positions": [2], "values": [9]},
                               {"sample": 1, "positions": [1], "values": [-1]}]}
    assert D.check_index_range(torch.tensor([0, 3]), 4, 2) is None


def test_group_by_sample_limits():
    mask = torch.ones(50, 30, dtype=torch.bool)
    samples, n = D.group_by_sample(mask, torch.zeros(50, 30), 50)
    assert n == 50 and len(samples) == D.MAX_SAMPLES
    assert len(samples[0]["positions"]) == D.MAX_POSITIONS


def test_not_batched_when_dim0_is_not_the_batch():
    samples, n = D.group_by_sample(torch.tensor([False, True]), torch.tensor([1.0, 2.0]), n_batch=5)
    assert (samples, n) == ([{"sample": None, "positions": [1], "values": [2.0]}], 1)
