"""scan_dataset: which dataset indices break a BatchSpec, with per-sample blame."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import IterableDataset

from debugkit import InvalidInputError
from debugkit.recorder.batchspec import BatchSpec, Dim
from debugkit.recorder.scan import relax_batch_dim, scan_dataset


class Samples:
    """A map-style dataset of (x[4] float, y int) with chosen bad rows."""

    def __init__(self, n=50, *, nan=(), wide=(), raises=(), as_double=()):
        self.n, self.nan, self.wide, self.raises, self.as_double = n, nan, wide, raises, as_double

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.raises:
            raise OSError(f"cannot read row {i}")
        x = torch.full((5 if i in self.wide else 4,), float(i))
        if i in self.nan:
            x[1] = float("nan")
        if i in self.as_double:
            x = x.double()
        return x, torch.tensor(i % 3)


SPEC = BatchSpec({0: {"dtype": "float32", "shape": (("batch", 1, 8), 4), "finite": True},
                  1: {"dtype": "int64", "shape": (("batch", 1, 8),), "range": (0, 3)}})


def test_clean_with_a_batch_size_above_the_spec_bound():
    out = scan_dataset(Samples(), SPEC, batch_size=32)
    assert out["violations"] == [] and out["samples"] == 50 and out["complete"]
    # Without the relaxation, batches of 32 break the spec's batch dim (max 8).
    x, y = torch.zeros(32, 4), torch.zeros(32, dtype=torch.long)
    assert [v.rule for v in SPEC.check((x, y))] == ["shape", "shape"]


def test_relax_batch_dim():
    r = relax_batch_dim(SPEC)
    assert r.tensors["0"].shape == (Dim("batch", 0, None), 4)
    assert r.structure == "sequence" and r.tensors["1"].range == (0, 3)
    fixed = relax_batch_dim(BatchSpec({"x": {"shape": (16, 4)}}))
    assert fixed.tensors["x"].shape == (Dim("batch", 0, None), 4)


def test_per_sample_rules_and_batch_level_rules_blame_only_the_bad_samples():
    ds = Samples(nan=(3,), wide=(17,), raises=(40,), as_double=(25,))
    out = scan_dataset(ds, SPEC, batch_size=10)
    by_index = {r["index"]: r for r in out["violations"]}
    assert out["violating_indices"] == [3, 17, 25, 40] and len(out["violations"]) == 4
    assert by_index[3]["rule"] == "finite" and by_index[3]["message"] == "contains NaN"
    assert by_index[17]["rule"] == "shape" and by_index[17]["tensor"] == "0"
    assert by_index[25]["rule"] == "dtype" and "float64" in by_index[25]["message"]
    assert by_index[40]["rule"] == "load" and "OSError: cannot read row 40" in by_index[40]["message"]
    assert out["samples"] == 50


def test_workers_give_the_same_result():
    ds = Samples(nan=(3,), wide=(17,))
    assert scan_dataset(ds, SPEC, batch_size=7, num_workers=2)["violating_indices"] == [3, 17]


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(30):
            yield torch.full((4,), float("inf") if i == 11 else 0.0), torch.tensor(0)


def test_iterable_datasets_and_plain_iterables():
    out = scan_dataset(Stream(), SPEC, batch_size=4)
    assert out["violating_indices"] == [11] and out["samples"] == 30 and out["complete"]
    gen = ((torch.zeros(4), torch.tensor(5 if i == 2 else 0)) for i in range(9))
    out = scan_dataset(gen, SPEC, batch_size=4)
    assert out["violating_indices"] == [2] and out["samples"] == 9


def test_limit_on_map_style_and_iterable():
    out = scan_dataset(Samples(nan=(30,)), SPEC, batch_size=8, limit=20)
    assert out["samples"] == 20 and out["stopped"] == "limit" and out["violations"] == []
    out = scan_dataset(Samples(n=20), SPEC, limit=20)
    assert out["complete"] and out["stopped"] is None
    out = scan_dataset(Stream(), SPEC, batch_size=8, limit=12)
    assert out["samples"] == 12 and out["stopped"] == "limit" and out["violating_indices"] == [11]
    out = scan_dataset(Stream(), SPEC, batch_size=10, limit=30)
    assert out["samples"] == 30 and out["complete"]


@pytest.mark.parametrize("kwargs,msg", [
    ({"batch_size": 0}, r"batch_size=0: expected an integer >= 1"),
    ({"num_workers": -1}, r"num_workers=-1: expected an integer >= 0"),
    ({"max_seconds": 0}, r"max_seconds=0: expected a number > 0 or None"),
    ({"limit": 0}, r"limit=0: expected an integer >= 1 or None"),
])
def test_bad_arguments(kwargs, msg):
    with pytest.raises(InvalidInputError, match=msg):
        scan_dataset(Samples(), SPEC, **kwargs)


def test_not_a_dataset():
    with pytest.raises(InvalidInputError, match=r"dataset is a int: expected a torch Dataset"):
        scan_dataset(3, SPEC)
