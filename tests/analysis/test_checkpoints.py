"""Checkpoint weight statistics, the change matrix, first NaN/Inf, and two-checkpoint diffs."""

from __future__ import annotations

import math

import numpy as np
import torch

from debugkit.analysis.checkpoints import (
    compute_change_matrix,
    compute_movement,
    detect_first_nonfinite,
    order_layers,
)
from debugkit.checkpoints import list_checkpoints, read_checkpoint_diff, read_weight_stats, write_checkpoint

ORDER = ["0.weight", "0.bias", "1.weight", "1.bias"]


def _run(tmp_path):
    """Checkpoints at steps 0..30: layer 0's weight grows 10 % each time, layer 1's bias
    goes NaN before the last one, the rest never moves."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    for s in (0, 10, 20):
        write_checkpoint(tmp_path, m, step=s)
        with torch.no_grad():
            m[0].weight.mul_(1.1)
    with torch.no_grad():
        m[1].bias[0] = float("nan")
    write_checkpoint(tmp_path, m, step=30)
    return list_checkpoints(tmp_path)


def test_weight_stats_match_torch(tmp_path):
    listing = _run(tmp_path)
    stats = read_weight_stats(listing)
    assert len(stats) == 4 * 4 and stats["checkpoint"].unique().tolist() == ["step 0", "step 10", "step 20", "step 30"]
    from safetensors.torch import load_file

    w10 = load_file(str(tmp_path / "checkpoints" / "000000010" / "model.safetensors"))
    w0 = load_file(str(tmp_path / "checkpoints" / "000000000" / "model.safetensors"))
    row = stats[(stats["step"] == 10) & (stats["layer"] == "0.weight")].iloc[0]
    assert math.isclose(row["norm"], float(w10["0.weight"].double().norm()), rel_tol=1e-12)
    assert math.isclose(row["delta_norm"], float((w10["0.weight"].double() - w0["0.weight"].double()).norm()),
                        rel_tol=1e-12)
    assert bool(row["changed"])
    bad = stats[(stats["step"] == 30) & (stats["layer"] == "1.bias")].iloc[0]
    assert bad["nan_count"] == 1 and bad["inf_count"] == 0 and math.isnan(bad["delta_norm"])
    first = stats[stats["order"] == 0]
    assert first["delta_norm"].isna().all() and not first["changed"].any()


def test_change_matrix_in_model_order_with_frozen_and_nonfinite_cells(tmp_path):
    m = compute_change_matrix(read_weight_stats(_run(tmp_path)), ORDER)
    assert m.layers == ORDER and m.labels == ["step 0", "step 10", "step 20", "step 30"]
    assert np.isnan(m.rel[:, 0]).all()
    assert np.allclose(m.rel[0, 1:], 0.1, rtol=1e-5)  # ||1.1 w - w|| / ||w||
    assert (m.rel[1:3, 1:] == 0).all() and m.unchanged[1:3, 1:].all() and not m.unchanged[0].any()
    assert m.nonfinite[3].tolist() == [False, False, False, True] and m.nonfinite.sum() == 1
    first = detect_first_nonfinite(read_weight_stats(list_checkpoints(tmp_path)), ORDER)
    assert first[["layer", "checkpoint", "step", "nan_count"]].values.tolist() == [["1.bias", "step 30", 30.0, 1]]


def test_compare_two_checkpoints(tmp_path):
    listing = _run(tmp_path)
    diff = read_checkpoint_diff(listing["path"][0], listing["path"][2])
    mv = compute_movement(diff, ORDER)
    assert mv["moved"]["layer"].tolist() == ["0.weight"]
    assert math.isclose(mv["moved"]["rel_change"][0], 0.21, rel_tol=1e-5)  # 1.1**2 - 1
    assert mv["never_moved"] == ["0.bias", "1.weight", "1.bias"] and mv["nonfinite"] == []
    late = compute_movement(read_checkpoint_diff(listing["path"][0], listing["path"][3]), ORDER)
    assert late["nonfinite"] == ["1.bias"] and "1.bias" in late["moved"]["layer"].tolist()


def test_compare_reports_tensors_in_one_checkpoint_only(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.ones(2), "b": torch.zeros(3)}, str(tmp_path / "one-1.safetensors"))
    save_file({"a": torch.ones(2) * 2, "c": torch.zeros(1)}, str(tmp_path / "two-2.safetensors"))
    diff = read_checkpoint_diff(tmp_path / "one-1.safetensors", tmp_path / "two-2.safetensors")
    mv = compute_movement(diff)
    assert mv["only_a"] == ["b"] and mv["only_b"] == ["c"]
    assert mv["moved"]["layer"].tolist() == ["a"] and math.isclose(mv["total_rel_change"], 1.0)


def test_user_state_dict_files_are_read_and_wrappers_unwrapped(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    torch.save({"model": m.state_dict(), "epoch": 1}, tmp_path / "epoch-1.pt")
    with torch.no_grad():
        m.weight.add_(1.0)
    torch.save(m.state_dict(), tmp_path / "epoch-2.pt")
    listing = list_checkpoints(tmp_path)
    assert listing["ok"].all() and listing["step"].tolist() == [1.0, 2.0]
    stats = read_weight_stats(listing)
    assert set(stats["layer"]) == {"weight", "bias"}
    row = stats[(stats["order"] == 1) & (stats["layer"] == "weight")].iloc[0]
    assert math.isclose(row["delta_norm"], math.sqrt(6), rel_tol=1e-6)


def test_order_layers_puts_unknown_names_last():
    assert order_layers(["b", "x", "a"], ["a", "b"]) == ["a", "b", "x"]
