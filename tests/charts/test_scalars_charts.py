"""build_scalars_figure: what the figure draws (issue 35, item 5)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from debugkit.analysis.scalars import last_values, smooth_scalars, suggest_log_scale
from debugkit.charts.scalars import build_scalars_figure


def _frame():
    steps = np.arange(10)
    loss = np.r_[np.full(7, 2.3), 5e3, 2e9, np.nan]
    lr = np.r_[np.full(5, 0.1), np.full(5, 1.0)]
    return pd.DataFrame({"step": np.r_[steps, steps], "rank": 0,
                         "key": ["loss"] * 10 + ["lr"] * 10, "value": np.r_[loss, lr]})


def test_lr_is_raw_on_its_own_axis_and_nan_is_a_marker():
    sm = smooth_scalars(_frame(), 0.6)
    fig = build_scalars_figure(sm, ["loss", "lr"], log_y=True)
    by = {t.name: t for t in fig.data}
    assert list(by) == ["loss (raw)", "loss", "lr", "loss: NaN/inf"]
    np.testing.assert_array_equal(np.asarray(by["lr"].y), [0.1] * 5 + [1.0] * 5)  # never 0.8056
    assert by["lr"].yaxis == "y2" and by["loss"].yaxis == "y"
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type in (None, "linear")
    assert fig.layout.yaxis2.side == "right" and fig.layout.yaxis2.overlaying == "y"
    nan = by["loss: NaN/inf"]
    assert list(nan.x) == [9] and list(nan.customdata) == ["NaN"] and nan.y[0] == 2e9


def test_lr_alone_stays_on_the_main_axis():
    fig = build_scalars_figure(smooth_scalars(_frame(), 0.6), ["lr"])
    assert [t.yaxis for t in fig.data] == ["y"]
    assert "yaxis2" not in fig.to_plotly_json()["layout"]


def test_log_scale_suggested_for_decades_of_positive_values_only():
    df = _frame()
    assert suggest_log_scale(df, ["loss"])
    assert not suggest_log_scale(df, ["lr"])  # 0.1 .. 1: one decade
    neg = df.assign(value=np.where(df["key"] == "loss", -df["value"], df["value"]))
    assert not suggest_log_scale(neg, ["loss"])


def test_last_values_spell_out_nan_and_inf():
    df = _frame()
    df.loc[df.index[-1], "value"] = np.inf
    out = last_values(smooth_scalars(df, 0.0), ["loss", "lr"]).set_index("key")
    assert out.loc["loss", "last value"] == "NaN" and out.loc["lr", "last value"] == "inf"


def test_overlay_runs_names_each_run_s_series():
    from debugkit.analysis.scalars import overlay_runs

    a = smooth_scalars(_frame(), 0.0)
    b = smooth_scalars(_frame().query("key == 'loss'"), 0.0)
    data, keys = overlay_runs(a, {"run-b": b}, ["loss", "lr"])
    assert keys == ["loss", "lr", "loss · run-b"]  # run-b logged no lr
    fig = build_scalars_figure(data, keys)
    assert [t.name for t in fig.data if "NaN" not in t.name and "raw" not in t.name] == \
        ["loss", "loss · run-b", "lr"]
