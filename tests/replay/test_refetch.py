"""How a data-loading replay compares a sample fetched again with the captured one."""

from __future__ import annotations

import numpy as np
import torch

from debugkit.replay.collate_child import sample_difference
from debugkit.tensortree import flatten_tree, unflatten_tree


def _as_captured(obj):
    """What the capture gives back for ``obj`` (its tree form, without pickle)."""
    structure, tensors = flatten_tree(obj)
    return unflatten_tree(structure, tensors)


def test_equal_samples_compare_equal_through_the_capture_form():
    s = {"x": torch.tensor([1.0, float("nan")]), "y": 3, "arr": np.arange(3), "t": (1, "a")}
    assert sample_difference(_as_captured(s), s) is None


def test_differences_are_named_with_their_path():
    s = {"x": torch.tensor([1.0, 2.0, 3.0]), "y": 3}
    assert sample_difference(s, {"x": torch.tensor([1.0, 2.5, 3.0]), "y": 3}) == \
        "['x']: 1 of 3 values differ (max |difference| 0.5)"
    assert sample_difference(s, {"x": torch.tensor([1.0, 2.0]), "y": 3}) == \
        "['x']: float32 [3] in the capture, float32 [2] now"
    assert sample_difference(s, {"x": s["x"], "y": 4}) == "['y']: 3 in the capture, 4 now"
    assert sample_difference(s, {"x": s["x"]}) == "sample: keys ['x', 'y'] in the capture, ['x'] now"
    assert sample_difference((torch.tensor([1, 2]),), (torch.tensor([1, 3]),)) == "[0]: 1 of 2 values differ"
    assert sample_difference([1, None], [1, 2]) == "[1]: None in the capture, 2 now"
