"""What a data-loading capture records so that replay can fetch the batch again: the
dataset's factory (``rec.track(loader, dataset_factory=...)``) and the collate function's
identity, and which samples of a padded batch are odd."""

from __future__ import annotations

import functools
import json

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from debugkit import Recorder
from debugkit.errors import InvalidInputError
from debugkit.recorder.codespec import MSG_LOCAL, callable_spec
from debugkit.recorder.dataload import ADVICE_SHAPE_CUSTOM, describe_failed_batch


class Ragged(Dataset):
    """Sequences of lengths 3..10 with 2 features; index 6 has 3 features."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.ones(3 + i % 8, 3 if i == 6 else 2)


def make_ragged():
    return Ragged()


def pad(samples):
    return torch.nn.utils.rnn.pad_sequence(samples, batch_first=True)


class Padder:
    def __call__(self, samples):
        return pad(samples)


def test_callable_spec_names_module_level_functions_only():
    assert callable_spec(pad) == (f"{__name__}:pad", None)
    assert callable_spec(Padder) == (f"{__name__}:Padder", None)
    spec, why = callable_spec(lambda s: s)
    assert spec is None and why == MSG_LOCAL.format(name="test_callable_spec_names_module_level_"
                                                         "functions_only.<locals>.<lambda>")

    def inner(s):
        return s

    assert callable_spec(inner)[0] is None and "defined inside another function" in callable_spec(inner)[1]
    spec, why = callable_spec(functools.partial(pad))
    assert spec is None and "a partial, not a module-level function" in why
    spec, why = callable_spec(Padder())
    assert spec is None and "a Padder, not a module-level function" in why


def test_padded_batch_names_only_the_sample_unlike_the_rest():
    exc = RuntimeError("x")
    custom = describe_failed_batch(Ragged(), list(range(8)), exc, stacks=False)
    assert (custom["phase"], custom["odd"], custom["advice"]) == ("collate", [6], ADVICE_SHAPE_CUSTOM)
    stacked = describe_failed_batch(Ragged(), list(range(8)), exc, stacks=True)
    assert stacked["odd"] == [1, 2, 3, 4, 5, 6, 7]  # torch's collate stacks: every length counts


@pytest.mark.parametrize("spec, kwargs, match", [
    ("no_colon", None, "expected 'module:callable'"),
    (f"{__name__}:make_ragged", {"shape": (1, 2)}, "dataset_kwargs: values change in a JSON round trip"),
    (f"{__name__}:make_ragged", {"ds": Ragged()}, "dataset_kwargs: Object of type Ragged"),
    (f"{__name__}:make_ragged", {"x": float("nan")}, "dataset_kwargs: Out of range float"),
])
def test_bad_dataset_factory_is_refused_at_track(tmp_path, spec, kwargs, match):
    m = torch.nn.Linear(2, 2)
    with Recorder(tmp_path / "run", m) as rec:
        with pytest.raises(InvalidInputError, match=match):
            rec.track(DataLoader(Ragged(), batch_size=8, collate_fn=pad), dataset_factory=spec,
                      dataset_kwargs=kwargs)


def _capture(tmp_path, collate_fn, **track):
    m = torch.nn.Linear(2, 2)
    rec = Recorder(tmp_path / "run", m)
    loader = rec.track(DataLoader(Ragged(), batch_size=8, collate_fn=collate_fn), **track)
    with pytest.raises(RuntimeError):
        with rec:
            for _ in loader:
                pass
    (f,) = (tmp_path / "run" / "failures").iterdir()
    return json.loads((f / "failure.json").read_text())


def test_capture_records_the_dataset_factory_and_the_collate_fn(tmp_path):
    rec = _capture(tmp_path, pad, dataset_factory=f"{__name__}:make_ragged",
                   dataset_kwargs={"split": "train"})
    assert rec["kind"] == "data_loading"
    assert rec["code"]["dataset_factory"]["spec"] == f"{__name__}:make_ragged"
    assert rec["code"]["dataset_factory"]["file"] == __file__
    assert len(rec["code"]["dataset_factory"]["sha256"]) == 64
    assert rec["code"]["collate_fn"]["spec"] == f"{__name__}:pad"
    dl = rec["data_loading"]
    assert (dl["collate_fn"], dl["dataset_kwargs"], dl["odd"]) == (f"{__name__}:pad", {"split": "train"}, [6])
    assert "collate_fn_not_replayable" not in dl


def test_capture_says_a_lambda_collate_is_not_replayable(tmp_path):
    rec = _capture(tmp_path, lambda s: pad(s))
    assert "collate_fn" not in rec["code"] and "dataset_factory" not in rec["code"]
    dl = rec["data_loading"]
    assert dl["collate_fn"].endswith("<lambda>")
    assert "lambda or a function defined inside another function" in dl["collate_fn_not_replayable"]
