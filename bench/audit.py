"""Benchmark: the German credit bias audit end to end, stage by stage, against the usual way.

    python bench/audit.py [--repeat 3] [--n-boot 1000] [--kernel-rows 10] [--mlp]

Audits the gradient-boosting pipeline of ``examples/credit.py`` on all 1,000 applicants
(20 features; sensitive: age_in_years, sex, foreign_worker) with ``debugkit.audit``, and
prints the median time per stage over ``--repeat`` runs. Then, side by side in this
process, the way a notebook would do the expensive parts:

- SHAP: ``shap.KernelExplainer`` on the pipeline's ``predict_proba`` with a 100-row
  background (the model-agnostic default of most notebooks), timed on ``--kernel-rows``
  rows and reported per row, against debugkit's TreeExplainer per row;
- bootstrap: fairlearn's own ``MetricFrame(n_boot=...)`` with the same eight metrics,
  per attribute, against debugkit's vectorised bootstrap with the same number of
  resamples.

Each audit is stored into a temporary run (deleted at the end). Times are wall-clock on
whatever machine runs this; a shared machine makes them noisy, so compare the ratios.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_run(tmp: Path) -> Path:
    import torch

    from debugkit import Recorder

    run = tmp / "bench-run"
    model = torch.nn.Linear(2, 1)
    with Recorder(run, model, name="bench-audit", flush_every_s=0.2) as rec:
        with rec.step():
            rec.log(loss=0.0)
    return run


def stage_times(events: list[tuple[float, str]]) -> dict[str, float]:
    """Durations per stage from (time, message) progress events."""
    names = {"Checking": "checks", "Explaining": "shap", "Predictions": "predict",
             "Group metrics": "group metrics (fairlearn)", "Bootstrap": "bootstrap + intervals",
             "Attribution": "proxies + flags",
             "Storing": "store", "Stored": "store", "Identical": "store"}
    out: dict[str, float] = {}
    for (t0, msg), (t1, _) in zip(events, events[1:]):
        key = next((v for k, v in names.items() if msg.startswith(k)), msg)
        out[key] = out.get(key, 0.0) + (t1 - t0)
    return out


def debugkit_audit(run: Path, model, X, y, n_boot: int, seed: int):
    from debugkit.audit import Auditor

    events: list[tuple[float, str]] = []
    auditor = Auditor({"n_boot": n_boot, "seed": seed},
                      progress=lambda f, m: events.append((time.perf_counter(), m)))
    t0 = time.perf_counter()
    audit = auditor.audit_model(model, X, y, sensitive=["age_in_years", "sex", "foreign_worker"],
                                run_dir=run, name=f"bench seed {seed}", positive_label="good")
    total = time.perf_counter() - t0
    return audit, total, stage_times(events)


def fairlearn_bootstrap(y_true, y_pred, groups, n_boot: int) -> float:
    from fairlearn.metrics import MetricFrame

    from debugkit.audit.fairness import metric_functions

    t0 = time.perf_counter()
    MetricFrame(metrics=metric_functions(), y_true=y_true, y_pred=y_pred, sensitive_features=groups,
                n_boot=n_boot, ci_quantiles=[0.025, 0.975], random_state=0)
    return time.perf_counter() - t0


def debugkit_bootstrap(y_true, y_pred, groups, n_boot: int) -> float:
    from debugkit.audit.fairness import bootstrap

    order = sorted(set(groups.tolist()))
    t0 = time.perf_counter()
    bootstrap(y_true, y_pred, groups, order, n_boot=n_boot, seed=0)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--kernel-rows", type=int, default=10)
    p.add_argument("--fairlearn-boot", type=int, default=100,
                   help="resamples for fairlearn's MetricFrame bootstrap (it is slow)")
    p.add_argument("--mlp", action="store_true", help="also audit the torch MLP (DeepExplainer)")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")

    from examples.credit import build_gbm, load_credit

    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-audit-"))
    try:
        run = make_run(tmp)
        X, y = load_credit()
        t0 = time.perf_counter()
        gbm = build_gbm(X).fit(X, y)
        fit_s = time.perf_counter() - t0
        print(f"German credit: {len(X)} rows x {X.shape[1]} features; GBM pipeline fit {fit_s:.2f} s "
              "(not part of the audit)")

        totals, stages = [], []
        for r in range(a.repeat):
            audit, total, st = debugkit_audit(run, gbm, X, y, a.n_boot, seed=r)
            totals.append(total)
            stages.append(st)
        print(f"\ndebugkit audit_model, {a.n_boot} bootstrap resamples x 3 attributes "
              f"(median of {a.repeat}):")
        keys = list(stages[0])
        for k in keys:
            vals = [s.get(k, 0.0) for s in stages]
            print(f"  {k:<26} {statistics.median(vals):7.2f} s")
        med_total = statistics.median(totals)
        print(f"  {'total':<26} {med_total:7.2f} s   (target: under 20 s)")
        print(f"  verdict {audit.verdict}; TreeExplainer additivity max error "
              f"{audit.doc['shap']['additivity_max_error']:.2e}")

        # --- SHAP: TreeExplainer (debugkit's choice) vs KernelExplainer (the notebook way)
        import shap

        Xt = gbm[:-1].transform(X)
        t0 = time.perf_counter()
        shap.TreeExplainer(gbm[-1]).shap_values(Xt, check_additivity=False)
        tree_per_row = (time.perf_counter() - t0) / len(X)
        bg = shap.sample(X, 100, random_state=0)
        from debugkit.audit.explain import CategoricalCodes

        codes = CategoricalCodes(X)
        f = lambda Z: gbm.predict_proba(codes.decode(Z))[:, 1]  # noqa: E731
        ke = shap.KernelExplainer(f, codes.encode(bg))
        rows = codes.encode(X.iloc[: a.kernel_rows])
        t0 = time.perf_counter()
        ke.shap_values(rows, silent=True)
        kernel_per_row = (time.perf_counter() - t0) / len(rows)
        print(f"\nSHAP per row: TreeExplainer {tree_per_row * 1e3:.3f} ms, KernelExplainer "
              f"(100 background rows, nsamples auto; {a.kernel_rows} rows timed) "
              f"{kernel_per_row * 1e3:.0f} ms: {kernel_per_row / tree_per_row:,.0f}x slower; "
              f"{kernel_per_row * len(X) / 60:.1f} min for all {len(X)} rows")

        # --- bootstrap: fairlearn MetricFrame(n_boot) vs debugkit's vectorised one
        rows_df = audit.rows
        yt = rows_df["y_true"].to_numpy()
        yp = rows_df["y_pred"].to_numpy()
        fl, dk, dk_full = [], [], []
        for attr in ("age_in_years", "sex", "foreign_worker"):
            g = rows_df[f"group:{attr}"].to_numpy(dtype=object)
            fl.append(fairlearn_bootstrap(yt, yp, g, a.fairlearn_boot))
            dk.append(min(debugkit_bootstrap(yt, yp, g, a.fairlearn_boot) for _ in range(3)))
            dk_full.append(min(debugkit_bootstrap(yt, yp, g, a.n_boot) for _ in range(3)))
        fl_s, dk_s = sum(fl), sum(dk)
        print(f"\nBootstrap, 3 attributes x 8 metrics, {a.fairlearn_boot} resamples: fairlearn "
              f"MetricFrame(n_boot) {fl_s:.2f} s, debugkit {dk_s * 1e3:.1f} ms: {fl_s / dk_s:,.0f}x faster; "
              f"fairlearn at {a.n_boot} resamples would take about {fl_s * a.n_boot / a.fairlearn_boot:.0f} s "
              f"(debugkit {sum(dk_full):.2f} s)")

        if a.mlp:
            from debugkit.audit import Auditor
            from examples.credit import audit_target

            sample = ROOT / "sample_runs" / "credit-audit"
            args = audit_target(sample, "mlp")
            events: list[tuple[float, str]] = []
            auditor = Auditor({"n_boot": a.n_boot}, progress=lambda f, m: events.append((time.perf_counter(), m)))
            t0 = time.perf_counter()
            args.pop("candidates", None)
            auditor.audit_model(args.pop("model"), args.pop("X"), args.pop("y"), run_dir=run, **args)
            print(f"\nTorch MLP of the credit-audit sample (held-out 400 rows, DeepExplainer, "
                  f"{a.n_boot} resamples): "
                  f"{time.perf_counter() - t0:.2f} s; stages " +
                  ", ".join(f"{k} {v:.2f} s" for k, v in stage_times(events).items()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
