"""What the Recorder records at start for comparing runs: every distribution, the machine,
the dataset's length and fingerprint (once per dataset), and the learned batch spec at close."""

from __future__ import annotations

import json
import random
from importlib import metadata

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from debugkit import Recorder, open_run
from debugkit.recorder.datafp import SAMPLE_ITEMS, describe_dataset, sample_indices
from debugkit.recorder.env import all_distributions, collect_env
from tests._training import train_step


def _train(run_dir, data, steps=6, loaders=1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(run_dir, model, optimizer=opt, num_classes=3, flush_every_s=0.05) as rec:
        done = 0
        for _ in range(loaders):
            for x, y in rec.track(DataLoader(data, batch_size=8)):
                train_step(rec, model, opt, (x, y))
                done += 1
                if done >= steps:
                    break
    return open_run(run_dir)


def _data(n=40):
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))


def test_env_lists_every_installed_distribution_and_the_machine():
    env = collect_env()
    d = env["distributions"]
    assert d["torch"] == metadata.version("torch") and d["numpy"] == metadata.version("numpy")
    assert d["scikit-learn"] == metadata.version("scikit-learn")  # PEP 503 names
    assert len(d) == len(all_distributions()) >= 50
    assert set(env["hardware"]) == {"cpu_model", "cpu_count", "machine", "gpu_model", "gpu_driver"}
    assert env["hardware"]["cpu_count"] >= 1 and env["os"]["system"] == "Linux"
    assert "nccl_version" in env  # None on a CPU-only build


def test_run_records_dataset_fingerprint_once_and_batch_spec_at_close(tmp_path):
    data = _data()
    run = _train(tmp_path / "r", data, steps=8, loaders=2)  # the same dataset tracked twice
    ds = run.datasets()
    assert len(ds) == 1
    d = ds[0]
    assert d["length"] == 40 and d["class"] == "torch.utils.data.dataset.TensorDataset"
    assert d["sampled_indices"] == sample_indices(40) and len(d["sampled_indices"]) == SAMPLE_ITEMS
    assert d["sampled_indices"][0] == 0 and d["sampled_indices"][-1] == 39
    assert d["first_step"] == 0 and d["error"] is None
    spec = run.batch_spec()
    assert spec["source"] == "rank 0"
    assert spec["tensors"]["1"]["range"] == [0, 3] and spec["tensors"]["0"]["dtype"] == "float32"
    assert spec["inferred_from"]["healthy_batches"] == 8
    # the same data in another run: the same fingerprint; one changed item: another
    again = _train(tmp_path / "r2", _data(), steps=2)
    assert again.datasets()[0]["fingerprint"] == d["fingerprint"]
    changed = _data()
    changed.tensors[1][39] = 2 if int(changed.tensors[1][39]) != 2 else 1
    other = _train(tmp_path / "r3", changed, steps=2).datasets()[0]
    assert other["fingerprint"] != d["fingerprint"]
    assert [a != b for a, b in zip(other["item_sha256"], d["item_sha256"])] == [False] * 15 + [True]


class _Augmented(Dataset):
    """Items with a random transform (as torchvision's RandomCrop would draw)."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.full((3,), float(i)) + torch.rand(3), random.random(), np.random.rand()


def test_fingerprint_is_stable_under_random_transforms_and_leaves_training_rng_alone():
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    expected = (torch.rand(2), random.random(), np.random.rand())
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    first = describe_dataset(_Augmented())
    second = describe_dataset(_Augmented())
    after = (torch.rand(2), random.random(), np.random.rand())
    assert first["fingerprint"] == second["fingerprint"] and first["error"] is None
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]


class _Stream(IterableDataset):
    def __iter__(self):
        yield from range(3)


class _Broken(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        raise OSError(f"image {i} unreadable")


@pytest.mark.parametrize("dataset, length, error", [
    (_Stream(), None, "no len()"),
    (_Broken(), 10, "OSError: image 0 unreadable"),
])
def test_datasets_that_cannot_be_sampled_say_why(dataset, length, error):
    d = describe_dataset(dataset)
    assert d["length"] == length and d["fingerprint"] is None and error in d["error"]


def _as_older_run(src, dest):
    """A copy of a sample as an older debugkit wrote it: no data.json, no batch_spec files."""
    import shutil

    shutil.copytree(src, dest)
    (dest / "data.json").unlink(missing_ok=True)
    for f in dest.glob("ranks/*/batch_spec-*.json"):
        f.unlink()
    return dest


def test_an_older_run_has_no_data_record_and_no_persisted_spec(sample_runs, tmp_path):
    run = open_run(_as_older_run(sample_runs / "digits-mlp", tmp_path / "mlp"))
    assert run.datasets() is None and run.batch_spec() is None
    # a failed older run: its capture's spec stands in
    bad = open_run(_as_older_run(sample_runs / "digits-bad-label", tmp_path / "bad"))
    assert bad.batch_spec()["source"].startswith("failure ")
    assert bad.batch_spec()["tensors"]["1"]["range"] == [0, 10]


def test_unreadable_data_record_is_unknown_with_a_warning(tmp_path):
    run = _train(tmp_path / "r", _data(), steps=2)
    (run.path / "data.json").write_text("{not json")
    assert run.datasets() is None
    assert any("data.json: unreadable" in w for w in run.warnings)
    json.loads((run.path / "manifest.json").read_text())  # the manifest is untouched
