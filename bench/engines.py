"""pandas (what debugkit uses) against Polars and DuckDB on a many-rank run's reductions.

The analyses that grow with ranks x steps are group-bys over every rank's Arrow streams:

- ``divergence``: per (step, layer) over every rank's gradient norms, the count, min,
  max, median and the rank furthest from the median
  (:func:`debugkit.analysis.distributed.compute_grad_divergence`; 7.7M rows at 256
  ranks x 5,000 steps x 6 layers);
- ``windows``: per (straggler window, rank), the medians of busy, data-wait and compute
  time (the grouped stage of :func:`debugkit.analysis.distributed.compute_straggler_windows`;
  1.28M rows).

The run is generated in debugkit's format by ``bench/distributed_scale.py``'s
``build_run`` (the schemas of the recorded ``sample_runs/ddp-straggler``). Each engine
reads the same Arrow IPC stream files itself (``read``: pandas through
``debugkit.io.run.Run``, Polars with ``pl.read_ipc_stream``, DuckDB over the pyarrow
tables, as it has no Arrow-stream reader of its own without a downloaded extension) and
then runs the reduction (``compute``); the results are checked equal to pandas'
(count/min/max/median exactly, the outlier rank wherever one rank is furthest).
Medians of ``--repeats`` rounds, engines interleaved within a round, in one process.

Polars and DuckDB are not debugkit dependencies: install them to run this bench
(``pip install polars duckdb``); an engine that is missing is reported and skipped.

    python bench/engines.py [--ranks 256] [--steps 5000] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402

from debugkit.analysis import distributed as dist  # noqa: E402
from debugkit.io.run import open_run  # noqa: E402


def _files(run: Path, table: str) -> list[tuple[int, Path]]:
    out = []
    for d in sorted((run / "ranks").iterdir(), key=lambda p: int(p.name)):
        for f in sorted(d.glob(f"{table}-*.arrows")):
            out.append((int(d.name), f))
    return out


def _arrow(run: Path, table: str) -> pa.Table:
    parts = []
    for rank, f in _files(run, table):
        with ipc.open_stream(f) as r:
            t = r.read_all()
        parts.append(t.append_column("rank", pa.array(np.full(t.num_rows, rank, np.int32))))
    return pa.concat_tables(parts)


# ------------------------------------------------------------------------------ divergence
def div_pandas_read(run):
    return open_run(run).grad_norms()


def div_pandas(g):
    return dist.compute_grad_divergence(g)


def div_polars_read(run):
    import polars as pl

    return pl.concat([pl.read_ipc_stream(f).with_columns(pl.lit(rank, pl.Int32).alias("rank"))
                      for rank, f in _files(run, "grads")])


def div_polars(g):
    import polars as pl

    dev = (pl.col("grad_norm") - pl.col("grad_norm").median()).abs()
    out = (g.group_by(["step", "layer_id"])
           .agg(pl.len().alias("ranks"), pl.col("grad_norm").min().alias("min"),
                pl.col("grad_norm").max().alias("max"), pl.col("grad_norm").median().alias("median"),
                pl.col("rank").get(dev.arg_max()).alias("outlier_rank"))
           .filter(pl.col("ranks") > 1)
           .with_columns(((pl.col("max") - pl.col("min"))
                          / pl.max_horizontal(pl.col("median").abs(), pl.lit(1e-12))).alias("rel_spread"))
           .sort(["step", "layer_id"]))
    return out


def div_duckdb_read(run):
    return _arrow(run, "grads")


def div_duckdb(g):
    import duckdb

    con = duckdb.connect()
    con.register("g", g)
    out = con.sql("""
        WITH m AS (SELECT step, layer_id, count(*) AS ranks, min(grad_norm) AS "min",
                          max(grad_norm) AS "max", median(grad_norm) AS "median"
                   FROM g GROUP BY step, layer_id HAVING count(*) > 1)
        SELECT m.step, m.layer_id, any_value(m.ranks) AS ranks, any_value(m."min") AS "min",
               any_value(m."max") AS "max", any_value(m."median") AS "median",
               arg_max(g.rank, abs(g.grad_norm - m."median")) AS outlier_rank,
               (any_value(m."max") - any_value(m."min"))
                 / greatest(abs(any_value(m."median")), 1e-12) AS rel_spread
        FROM g JOIN m USING (step, layer_id)
        GROUP BY m.step, m.layer_id ORDER BY m.step, m.layer_id""").to_arrow_table()
    con.close()
    return out


def _div_frame(result, layers) -> pd.DataFrame:
    """Any engine's result as pandas with the layer name, sorted like pandas'."""
    if isinstance(result, pd.DataFrame):
        df = result.copy()
        df["layer"] = df["layer"].astype(str)
    else:
        df = result.to_pandas() if hasattr(result, "to_pandas") else result.read_all().to_pandas()
        df["layer"] = np.asarray(layers, dtype=object)[df["layer_id"].to_numpy()]
    return df.sort_values(["step", "layer"]).reset_index(drop=True)


def _check_div(ref: pd.DataFrame, got: pd.DataFrame, g_pd: pd.DataFrame, name: str) -> None:
    assert len(ref) == len(got), (name, len(ref), len(got))
    for c in ("step", "ranks"):
        np.testing.assert_array_equal(ref[c].to_numpy(np.int64), got[c].to_numpy(np.int64), err_msg=name)
    assert (ref["layer"].to_numpy() == got["layer"].to_numpy()).all(), name
    for c in ("min", "max", "median", "rel_spread"):
        np.testing.assert_allclose(ref[c].to_numpy(float), got[c].to_numpy(float), rtol=1e-12, err_msg=name)
    # The outlier: where one rank alone is furthest from the median, every engine names it.
    j = g_pd.merge(ref[["step", "layer", "median"]].assign(layer=lambda d: d["layer"]),
                   left_on=["step", g_pd["layer"].astype(str)], right_on=["step", "layer"])
    dev = (j["grad_norm"] - j["median"]).abs()
    top = dev.groupby([j["step"], j["layer_x"].astype(str)]).transform("max")
    unique = (dev == top).groupby([j["step"], j["layer_x"].astype(str)]).sum()
    ok = unique[unique == 1].index
    a = ref.set_index(["step", "layer"]).loc[ok, "outlier_rank"].to_numpy()
    b = got.set_index(["step", "layer"]).loc[ok, "outlier_rank"].to_numpy()
    np.testing.assert_array_equal(a.astype(np.int64), b.astype(np.int64), err_msg=name)


# ------------------------------------------------------------------------------ windows
def _window_input(run: Path) -> pd.DataFrame:
    """The rows compute_straggler_windows groups: every full step, with its window."""
    times = dist.compute_rank_step_times(open_run(run).steps())
    n = times["rank"].nunique()
    counts = times.groupby("step")["rank"].nunique()
    full = counts.index[counts == n]
    t = times[times["step"].isin(full) & (times["step"] > times["step"].min())]
    steps = np.sort(t["step"].unique())
    chunk = pd.Series(np.arange(len(steps)) // dist.STRAGGLER_WINDOW, index=steps)
    t = t.assign(_chunk=t["step"].map(chunk).astype(np.int64))
    return t[["_chunk", "rank", "busy_s", "data_wait_s", "compute_s"]].reset_index(drop=True)


def win_pandas(t):
    return t.groupby(["_chunk", "rank"], sort=True)[["busy_s", "data_wait_s", "compute_s"]].median()


def win_polars(t):
    import polars as pl

    return (t.group_by(["_chunk", "rank"])
            .agg(pl.col("busy_s").median(), pl.col("data_wait_s").median(), pl.col("compute_s").median())
            .sort(["_chunk", "rank"]))


def win_duckdb(t):
    import duckdb

    con = duckdb.connect()
    con.register("t", t)
    out = con.sql("""SELECT _chunk, rank, median(busy_s) AS busy_s, median(data_wait_s) AS data_wait_s,
                                median(compute_s) AS compute_s
                         FROM t GROUP BY _chunk, rank ORDER BY _chunk, rank""").to_arrow_table()
    con.close()
    return out


def _check_win(ref, got, name):
    got = got.to_pandas() if hasattr(got, "to_pandas") else got.read_all().to_pandas()
    ref = ref.reset_index()
    assert len(ref) == len(got), (name, len(ref), len(got))
    for c in ref.columns:
        np.testing.assert_allclose(ref[c].to_numpy(float), got[c].to_numpy(float), rtol=1e-12, err_msg=name)


# ------------------------------------------------------------------------------ driver
def _timed(fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - t0, out


def _available(name: str) -> bool:
    try:
        __import__(name)
        return True
    except ImportError:
        print(f"{name}: not installed (pip install {name}); skipped")
        return False


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for Polars and DuckDB (default: all cores, as they run by default)")
    a = ap.parse_args(argv)
    if a.threads:
        os.environ["POLARS_MAX_THREADS"] = str(a.threads)
    engines = ["pandas"] + [e for e in ("polars", "duckdb") if _available(e)]
    if "duckdb" in engines and a.threads:
        import duckdb

        duckdb.execute(f"SET threads TO {a.threads}")
    import distributed_scale

    tmp = Path(tempfile.mkdtemp(prefix="debugkit-engines-"))
    try:
        run = distributed_scale.build_run(tmp, a.ranks, a.steps, min(137, a.ranks - 1),
                                          min(201, a.ranks - 2), int(a.steps * 0.84))
        layers = list(open_run(run).rank_meta(0, 0).get("layers") or []) + ["__total__"]
        t_pd = _window_input(run)
        t_in = {"pandas": t_pd}
        if "polars" in engines:
            import polars as pl

            t_in["polars"] = pl.from_pandas(t_pd)
        if "duckdb" in engines:
            t_in["duckdb"] = pa.Table.from_pandas(t_pd, preserve_index=False)
        read = {"pandas": div_pandas_read, "polars": div_polars_read, "duckdb": div_duckdb_read}
        comp = {"pandas": div_pandas, "polars": div_polars, "duckdb": div_duckdb}
        win = {"pandas": win_pandas, "polars": win_polars, "duckdb": win_duckdb}
        res = {e: {"read": [], "divergence": [], "windows": []} for e in engines}
        ref_div = ref_win = g_pd = None
        for rnd in range(a.repeats):
            for e in engines:
                tr, g = _timed(read[e], run)
                tc, out = _timed(comp[e], g)
                tw, wout = _timed(win[e], t_in[e])
                res[e]["read"].append(tr)
                res[e]["divergence"].append(tc)
                res[e]["windows"].append(tw)
                if e == "pandas":
                    g_pd, ref_div, ref_win = g, _div_frame(out, layers), wout
                elif rnd == 0:
                    _check_div(ref_div, _div_frame(out, layers), g_pd, e)
                    _check_win(ref_win, wout, e)
                del g, out, wout
        rows = len(g_pd)
        print(f"{a.ranks} ranks x {a.steps} steps: {rows:,} gradient-norm rows, {len(t_pd):,} step rows; "
              f"{os.cpu_count()} cores, medians of {a.repeats}; results equal to pandas'")
        print("| engine | read grads (s) | divergence (s) | straggler windows (s) | read + both | vs pandas |")
        print("|---|---|---|---|---|---|")
        base = None
        for e in engines:
            m = {k: statistics.median(v) for k, v in res[e].items()}
            total = m["read"] + m["divergence"] + m["windows"]
            base = total if base is None else base
            print(f"| {e} | {m['read']:.2f} | {m['divergence']:.2f} | {m['windows']:.3f} | "
                  f"{total:.2f} | {base / total:.1f}x |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
