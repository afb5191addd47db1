"""``audit_model``: SHAP attributions and group fairness of a model, stored in a run."""

from __future__ import annotations

import datetime as dt
import getpass
import hashlib
import math
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.findings import Finding
from ..errors import InvalidInputError, RunDirError
from ..location import as_path, load_safetensors
from . import fairness as fx
from .attribution import attribution_flags, compute_associations, mean_abs, mean_by_group
from .explain import explain
from .groups import SensitiveAttribute, resolve_sensitive
from .model_adapters import ModelAdapter, _jsonable, make_adapter, positive_mask, torch_state_fingerprint
from .settings import AuditSettings
from .stored_audits import Audit, clean_json, find_identical, write_audit

PASS, REVIEW, FAIL = "pass", "needs_review", "fail"
_RANK = {PASS: 0, REVIEW: 1, FAIL: 2}
METRIC_LABELS = {"selection_rate": "selection rate", "tpr": "true positive rate",
                 "fpr": "false positive rate", "fnr": "false negative rate",
                 "precision": "precision", "accuracy": "accuracy", "base_rate": "base rate"}
SUMMARY_LABELS = {"demographic_parity_difference": "demographic parity difference",
                  "demographic_parity_ratio": "demographic parity ratio",
                  "equalized_odds_difference": "equalized odds difference",
                  "equal_opportunity_difference": "equal opportunity difference"}
MIN_ROWS = 10
MSG_FEW_ROWS = "X: {n} rows; an audit needs at least {min} (and many more for tight intervals)"
MSG_LENGTH = "y: {got} values for {n} rows of X"
MSG_NAME = "name={value!r}: expected a non-empty string of at most 200 characters"
MSG_RUN_DIR = ("run_dir={value}: not a debugkit run directory (no manifest.json); audits are "
               "stored in the training run they belong to (record it with debugkit.Recorder)")
MSG_ONE_GROUP = ("sensitive attribute {name!r}: every row is in group {group!r}; there is "
                 "nothing to compare (check its values or bins)")
MSG_REFERENCE = "reference group {group!r} of {name!r}: not among its groups ({groups})"

Progress = Callable[[float, str], None]


def _nrows(X) -> int:
    if hasattr(X, "shape") and len(X.shape) >= 1:
        return int(X.shape[0])
    raise InvalidInputError(f"X: expected a DataFrame, a 2-d array or a tensor, got {type(X).__name__}")


def _versions(adapter: ModelAdapter) -> dict[str, str | None]:
    from importlib import metadata

    from .._version import __version__

    out: dict[str, str | None] = {"debugkit": __version__,
                                  "python": sys.version.split()[0]}
    for pkg, dist in (("shap", "shap"), ("fairlearn", "fairlearn"), ("sklearn", "scikit-learn"),
                      ("numpy", "numpy"), ("pandas", "pandas")):
        try:
            out[pkg] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    if adapter.kind == "torch" or "torch" in sys.modules:
        try:
            out["torch"] = metadata.version("torch")
        except metadata.PackageNotFoundError:
            out["torch"] = None
    return out


def dataset_fingerprint(X, y_true: np.ndarray, attrs: list[SensitiveAttribute]) -> str:
    """SHA-256 over X's column names, dtypes and values, the outcome and the groups."""
    h = hashlib.sha256()
    if hasattr(X, "columns"):
        import pandas as pd

        h.update("\0".join(f"{c}:{X[c].dtype}" for c in X.columns).encode())
        h.update(pd.util.hash_pandas_object(X, index=False).to_numpy().tobytes())
    else:
        arr = X.detach().cpu().numpy() if hasattr(X, "detach") else np.asarray(X)
        h.update(f"{arr.dtype}:{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(np.asarray(y_true, dtype=np.int8).tobytes())
    for a in attrs:
        h.update(a.name.encode() + b"\0" + "\0".join(map(str, a.groups.tolist())).encode())
    return h.hexdigest()


def _find_checkpoint(run_dir: Path, adapter: ModelAdapter) -> dict | None:
    """A safetensors file in the run holding exactly the audited torch parameters."""
    if adapter.kind != "torch":
        return None
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        return None
    want = torch_state_fingerprint(adapter.estimator.state_dict())
    seen = 0
    for p in sorted(run_dir.rglob("*.safetensors")):
        rel = p.relative_to(run_dir)
        if rel.parts[0] in ("failures", "audits") or any(s.startswith(".") for s in rel.parts):
            continue
        seen += 1
        if seen > 50:
            break
        try:
            if p.stat().st_size > (2 << 30):
                continue
            state = load_safetensors(p)
        except Exception:  # noqa: BLE001 - not a state_dict file; skip it
            continue
        if torch_state_fingerprint(state) == want:
            from .._fsutil import sha256_file

            return {"path": str(rel), "sha256": sha256_file(p),
                    "matched": "the file's tensors equal the audited model's state_dict"}
    return None


class Auditor:
    """Run audits with given settings and an optional progress callback.

    Parameters
    ----------
    settings : AuditSettings or dict, optional
        Thresholds (band, bootstrap size, proxy threshold, reference groups ...).
    progress : callable(fraction, message), optional
        Called as the audit moves through its stages (the page's progress bar).
    """

    def __init__(self, settings: AuditSettings | dict | None = None, progress: Progress | None = None):
        self.settings = AuditSettings.from_any(settings)
        self._progress = progress

    def _tick(self, frac: float, msg: str) -> None:
        if self._progress is not None:
            frac = round(max(0.0, min(1.0, frac)), 6)
            self._last = frac if frac == 0.0 else max(frac, getattr(self, "_last", 0.0))
            self._progress(self._last, msg)

    def audit_model(self, model, X, y, *, sensitive, run_dir, name, positive_label=1, predict=None,
                    explainer="auto", background=100, group_bins=None, store_in=None,
                    location=None) -> Audit:
        """See :func:`debugkit.audit.audit_model`; ``store_in``: the folder to store the
        audit in instead of the run's ``audits/`` (a server's, for a run outside its store:
        :func:`debugkit.audit.stored_audits.server_audits_dir`); ``location``: where the
        run lies, recorded in the provenance (default ``run_dir``; the audit worker audits
        a local copy of a run at a URL)."""
        s = self.settings
        self._tick(0.0, "Checking the model and the data")
        run_dir = as_path(run_dir)
        from ..io.run import open_run

        if not run_dir.is_dir():
            raise RunDirError(MSG_RUN_DIR.format(value=run_dir))
        try:
            run = open_run(run_dir)
        except RunDirError as exc:
            raise RunDirError(MSG_RUN_DIR.format(value=run_dir) + f" ({exc})") from exc
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise InvalidInputError(MSG_NAME.format(value=name))
        n = _nrows(X)
        if n < MIN_ROWS:
            raise InvalidInputError(MSG_FEW_ROWS.format(n=n, min=MIN_ROWS))
        y_len = len(y) if hasattr(y, "__len__") else None
        if y_len != n:
            raise InvalidInputError(MSG_LENGTH.format(got=y_len, n=n))
        y_true = positive_mask(y, positive_label)
        y_vals = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else
                            (y.detach().cpu().numpy() if hasattr(y, "detach") else y)).reshape(-1)
        labels = sorted({v.item() if hasattr(v, "item") else v for v in y_vals}, key=str)
        adapter = make_adapter(model, X, positive_label=positive_label, predict=predict,
                               threshold=s.decision_threshold, y_labels=labels)

        # SHAP first: it also yields the feature list the sensitive attributes map to.
        self._tick(0.05, "Explaining the model (SHAP)")
        shap_res, space, values = explain(
            adapter, X, explainer=explainer, background=background, seed=s.seed,
            progress=lambda f: self._tick(0.05 + 0.55 * f, "Explaining the model (SHAP)"))
        attrs = resolve_sensitive(sensitive, X, n, space.features, group_bins)
        for a in attrs:
            if len(a.order) < 2:
                raise InvalidInputError(MSG_ONE_GROUP.format(name=a.name, group=a.order[0] if a.order else None))
            ref = s.reference.get(a.name) or a.reference
            if ref is not None and ref not in a.order:
                raise InvalidInputError(MSG_REFERENCE.format(group=ref, name=a.name, groups=", ".join(a.order)))
        unknown_refs = sorted(set(s.reference) - {a.name for a in attrs})
        if unknown_refs:
            raise InvalidInputError(f"settings.reference: {', '.join(map(repr, unknown_refs))} not among "
                                    f"the sensitive attributes ({', '.join(a.name for a in attrs)})")

        self._tick(0.6, "Predictions")
        y_pred = adapter.decisions(X, scores=shap_res.output if adapter.preprocess is None
                                   and adapter.kind == "torch" else None)
        sens_doc = {}
        for i, a in enumerate(attrs):
            lo, hi = 0.62 + 0.3 * i / len(attrs), 0.62 + 0.3 * (i + 1) / len(attrs)
            self._tick(lo, f"Group metrics (fairlearn): {a.name}")
            sens_doc[a.name] = self._fairness(a, y_true, y_pred, lambda f, lo=lo, hi=hi, nm=a.name:
                                              self._tick(lo + (hi - lo) * (0.2 + 0.8 * f),
                                                         f"Bootstrap: {nm}"))

        self._tick(0.93, "Attribution flags and proxies")
        mabs = mean_abs(shap_res.values, space.features)
        by_group = {a.name: mean_by_group(shap_res.values, space.features, a) for a in attrs}
        assoc = compute_associations(values, attrs)
        flags = attribution_flags(mabs, assoc, attrs, by_group, top_k=s.top_k, share=s.share,
                                  proxy_threshold=s.proxy_threshold, output=shap_res.output_space)
        add_err = shap_res.additivity_max_error

        verdict, reasons = self._overall(sens_doc, flags, add_err, shap_res)
        rows = self._rows(y_true, y_pred, shap_res, space, values, attrs)
        import pandas as pd

        rows_sha = hashlib.sha256(pd.util.hash_pandas_object(rows, index=False).to_numpy().tobytes()
                                  + "\0".join(rows.columns).encode()).hexdigest()
        fp = adapter.fingerprint()
        data_sha = dataset_fingerprint(X, y_true, attrs)
        features_list = list(space.features)
        doc: dict[str, Any] = {
            "name": name.strip(),
            "verdict": verdict,
            "reasons": reasons,
            "model": {**adapter.describe(), "sha256": fp["sha256"], "hash_of": fp["of"]},
            "dataset": {"rows": n, "columns": _columns(X), "features": features_list,
                        "sha256": data_sha,
                        "hash_of": "column names and dtypes, every value, the outcome and the groups",
                        "positive_label": _jsonable(positive_label), "labels": [_jsonable(v) for v in labels],
                        "positive_rate": float(y_true.mean()),
                        "predicted_positive_rate": float(y_pred.mean())},
            "sensitive": sens_doc,
            "shap": {"explainer": shap_res.explainer, "output": shap_res.output_space,
                     "additivity_max_error": add_err, "mean_abs": mabs,
                     "base_value": shap_res.base_value, "features": features_list,
                     "feature_groups": space.describe(), "details": shap_res.details,
                     "by_group": by_group},
            "associations": assoc,
            "flags": [f.to_flag_dict() for f in flags],
            "rows_sha256": rows_sha,
        }
        prov = {"run": {"run_id": run.run_id, "name": run.name, "path": str(location or run.path)},
                "checkpoint": _find_checkpoint(run_dir, adapter),
                "model_sha256": fp["sha256"], "dataset_sha256": data_sha,
                "versions": _versions(adapter), "thresholds": s.to_dict(),
                "explainer_requested": explainer,
                "background": background if isinstance(background, int) else "given rows"}
        doc["provenance"] = prov
        substance = hashlib.sha256(_canon(clean_json(doc))).hexdigest()
        doc["substance_sha256"] = substance
        same = find_identical(run_dir, substance, base=store_in)
        if same is not None:
            self._tick(1.0, f"Identical to the stored audit {same.id}")
            return same
        prov["created_by"] = f"{_user()}@{socket.gethostname()}"
        prov["created_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        prov["command"] = [str(a) for a in sys.argv][:50]
        self._tick(0.97, "Storing the audit")
        audit = write_audit(run_dir, doc, rows, base=store_in)
        self._tick(1.0, f"Stored audit {audit.id}")
        return audit

    # ------------------------------------------------------------------ fairness
    def _fairness(self, a: SensitiveAttribute, y_true, y_pred, progress) -> dict:
        s = self.settings
        order = a.order
        table = fx.compute_group_metrics(y_true, y_pred, a.groups, order)
        undefined = fx.undefined_rates(y_true, y_pred, a.groups, order)
        summary = fx.compute_summary(y_true, y_pred, a.groups)
        ref = s.reference.get(a.name) or a.reference or max(order, key=lambda g: (int(table.loc[g, "count"]), g))
        progress(0.0)
        boot = fx.bootstrap(y_true, y_pred, a.groups, order, n_boot=s.n_boot, seed=s.seed, progress=progress)
        level = s.ci_level
        conf = fx.confusion_by_group(y_true, y_pred, a.groups, order)
        point = fx.rates_from_counts(conf, fairlearn_zero=False)
        sup = {g: fx.support(conf[gi]) for gi, g in enumerate(order)}
        ri = order.index(ref)
        groups, groups_ci, disp = {}, {}, {}
        for gi, g in enumerate(order):
            groups[g] = {m: (int(table.loc[g, m]) if m == "count" else
                             (None if m in undefined.get(g, []) else float(table.loc[g, m])))
                         for m in fx.METRICS}
            groups_ci[g] = {}
            for m in fx.RATE_METRICS:
                lo, hi = fx.percentile_ci(boot.rates[m][:, gi], level) if s.n_boot else (np.nan, np.nan)
                groups_ci[g][m] = [_f(lo), _f(hi)]
            if g == ref:
                continue
            disp[g] = {}
            for m in fx.RATE_METRICS:
                if m == "base_rate":
                    continue
                pv, rv = point[m][gi], point[m][ri]
                ratio = pv / rv if (math.isfinite(pv) and math.isfinite(rv) and rv > 0) else math.nan
                diff = pv - rv if (math.isfinite(pv) and math.isfinite(rv)) else math.nan
                with np.errstate(invalid="ignore", divide="ignore"):
                    rb = boot.rates[m][:, gi] / np.where(boot.rates[m][:, ri] > 0, boot.rates[m][:, ri], np.nan)
                db = boot.rates[m][:, gi] - boot.rates[m][:, ri]
                rci = fx.percentile_ci(rb, level) if s.n_boot else (np.nan, np.nan)
                dci = fx.percentile_ci(db, level) if s.n_boot else (np.nan, np.nan)
                entry = {"ratio": _f(ratio), "ratio_ci": [_f(rci[0]), _f(rci[1])],
                         "difference": _f(diff), "difference_ci": [_f(dci[0]), _f(dci[1])]}
                if m in s.judged_metrics:
                    dn = fx.denominator(m)
                    j = fx.judge_ratio(_f(ratio), (_f(rci[0]), _f(rci[1])), s.band)
                    entry["judgement"] = fx.cap_for_support(j, [sup[g][dn], sup[ref][dn]], s.min_group_size)
                disp[g][m] = entry
        summary_ci, summary_j = {}, {}
        extremes = fx.summary_extremes(fx.rates_from_counts(conf, fairlearn_zero=True), order)
        stat_ci = {}
        for k in fx.SUMMARY:
            # The interval judged is that of the comparison the metric makes in the data
            # (the two groups it sets apart): a percentile interval of a max-minus-min
            # statistic is biased upward and can exclude its own point estimate.
            m, g_hi, g_lo = extremes[k]
            top, bottom = boot.rates[m][:, order.index(g_hi)], boot.rates[m][:, order.index(g_lo)]
            with np.errstate(invalid="ignore", divide="ignore"):
                pair = (np.where(top > 0, bottom / np.where(top > 0, top, 1.0), np.nan)
                        if k == "demographic_parity_ratio" else top - bottom)
            lo, hi = fx.percentile_ci(pair, level) if s.n_boot else (np.nan, np.nan)
            summary_ci[k] = [_f(lo), _f(hi)]
            slo, shi = fx.percentile_ci(boot.summary[k], level) if s.n_boot else (np.nan, np.nan)
            stat_ci[k] = [_f(slo), _f(shi)]
            if k == "demographic_parity_ratio":
                j = fx.judge_at_least(summary[k], (_f(lo), _f(hi)), s.band[0])
            else:
                j = fx.judge_at_most(summary[k], (_f(lo), _f(hi)), s.max_difference)
            m, g_hi, g_lo = extremes[k]
            dn = fx.denominator(m)
            summary_j[k] = fx.cap_for_support(j, [sup[g_hi][dn], sup[g_lo][dn]], s.min_group_size)
        progress(1.0)
        small = [g for g in order if groups[g]["count"] < s.min_group_size]
        verdict, findings = self._judge_attribute(a.name, ref, groups, disp, summary, summary_ci,
                                                  summary_j, small, undefined, sup, extremes)
        return {"groups": groups, "reference_group": ref, **{k: _f(summary[k]) for k in fx.SUMMARY},
                "disparities": disp, "verdict": verdict, "reasons": [f.message for f in findings],
                "findings": [f.to_audit_dict() for f in findings],
                "groups_ci": groups_ci, "summary_ci": summary_ci, "summary_judgement": summary_j,
                "summary_statistic_ci": stat_ci,
                "undefined": undefined, "small_groups": small, "order": list(order),
                "support": {g: {fx.DENOMINATOR_NAMES[k].replace(" ", "_"): v for k, v in d.items()}
                            for g, d in sup.items()},
                "compared_groups": {k: {"metric": v[0], "highest": v[1], "lowest": v[2]}
                                    for k, v in extremes.items()},
                "binning": a.binning, "source_features": list(a.source_features),
                "derived_from": a.derived_from, "n_boot": s.n_boot, "ci_level": level}

    def _judge_attribute(self, name, ref, groups, disp, summary, summary_ci, summary_j, small,
                         undefined, sup, extremes) -> tuple[str, list[Finding]]:
        s = self.settings
        pct = f"{s.ci_level:.0%}"
        band = f"{s.band[0]:.2f}-{s.band[1]:.2f}"
        fails, reviews = [], []
        for g, metrics in disp.items():
            for m, e in metrics.items():
                j = e.get("judgement")
                if j not in (fx.OUTSIDE, fx.OUTSIDE_UNCERTAIN, fx.OUTSIDE_TOO_FEW):
                    continue
                lo, hi = e["ratio_ci"]
                ci = f"{pct} CI {lo:.2f}-{hi:.2f}" if lo is not None and hi is not None else "no CI"
                text = (f"{name}={g}: {METRIC_LABELS[m]} {groups[g][m]:.3f} is {e['ratio']:.2f}x that of "
                        f"{name}={ref} ({groups[ref][m]:.3f}), outside the band {band} ")
                if j == fx.OUTSIDE:
                    fails.append(text + f"({ci}, entirely outside)")
                elif j == fx.OUTSIDE_TOO_FEW:
                    dn = fx.denominator(m)
                    few = min((g, ref), key=lambda k: sup[k][dn])
                    reviews.append(text + f"({ci}), but {name}={few} has only {sup[few][dn]} "
                                   f"{fx.DENOMINATOR_NAMES[dn]}: too few to judge")
                else:
                    reviews.append(text + f"(but the {ci} overlaps the band)")
        for k, j in summary_j.items():
            if j not in (fx.OUTSIDE, fx.OUTSIDE_UNCERTAIN, fx.OUTSIDE_TOO_FEW):
                continue
            lo, hi = summary_ci[k]
            limit = (f"below {s.band[0]:.2f}" if k == "demographic_parity_ratio"
                     else f"above {s.max_difference:.2f}")
            ci = f"{pct} CI {lo:.3f}-{hi:.3f}" if lo is not None and hi is not None else "no CI"
            text = f"{name}: {SUMMARY_LABELS[k]} {summary[k]:.3f} is {limit} ({ci}"
            if j == fx.OUTSIDE:
                fails.append(text + ", entirely beyond the limit)")
            elif j == fx.OUTSIDE_TOO_FEW:
                m, g_hi, g_lo = extremes[k]
                dn = fx.denominator(m)
                few = min((g_hi, g_lo), key=lambda g: sup[g][dn])
                reviews.append(text + f"), but {name}={few} has only {sup[few][dn]} "
                               f"{fx.DENOMINATOR_NAMES[dn]}: too few to judge")
            else:
                reviews.append(text + ", which reaches back within the limit)")
        for g in small:
            reviews.append(f"{name}={g} has only {groups[g]['count']} rows (fewer than "
                           f"{s.min_group_size}): its metrics are too noisy to judge")
        for g, ms in undefined.items():
            judged = [m for m in ms if m in s.judged_metrics]
            if judged:
                reviews.append(f"{name}={g}: {', '.join(METRIC_LABELS[m] for m in judged)} undefined "
                               "(no rows to compute it from); fairlearn counts it as 0 in its "
                               "summary metrics")
        verdict = FAIL if fails else (REVIEW if reviews else PASS)
        return verdict, ([Finding.for_audit(FAIL, t, attribute=name) for t in fails] +
                         [Finding.for_audit(REVIEW, t, attribute=name) for t in reviews])

    def _overall(self, sens_doc, flags: list[Finding], add_err, shap_res) -> tuple[str, list[str]]:
        worst = PASS
        fails, reviews = [], []
        for d in sens_doc.values():
            worst = max(worst, d["verdict"], key=_RANK.get)
            for f in map(Finding.from_audit_dict, d["findings"]):
                (fails if f.audit_level == FAIL else reviews).append(f.message)
        for f in flags:
            reviews.append(f.message)
        scale = max(1.0, float(np.abs(shap_res.output).max()) if len(shap_res.output) else 1.0)
        if add_err > self.settings.additivity_tolerance * scale:
            reviews.append(f"SHAP values do not add up to the model output (largest error {add_err:.3g} "
                           f"{shap_res.output_space}): {shap_res.explainer}'s attributions are approximate")
        if flags or reviews:
            worst = max(worst, REVIEW, key=_RANK.get)
        return worst, fails + reviews

    @staticmethod
    def _rows(y_true, y_pred, shap_res, space, values, attrs):
        import pandas as pd

        data: dict[str, Any] = {"row": np.arange(len(y_true), dtype=np.int64),
                                "y_true": np.asarray(y_true, dtype=np.int8),
                                "y_pred": np.asarray(y_pred, dtype=np.int8),
                                "output": shap_res.output}
        for j, f in enumerate(space.features):
            data[f"shap:{f}"] = shap_res.values[:, j]
        for f in space.features:
            v = values[f]
            data[f"value:{f}"] = v.astype(float) if v.dtype.kind in "fiub" else v.astype(str)
        for a in attrs:
            data[f"group:{a.name}"] = a.groups.astype(str)
            data[f"raw:{a.name}"] = a.raw.astype(float) if a.numeric else \
                np.asarray([None if v is None else str(v) for v in a.raw], dtype=object)
        return pd.DataFrame(data)


def _canon(doc: dict) -> bytes:
    import json

    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _columns(X) -> list[str]:
    if hasattr(X, "columns"):
        return [str(c) for c in X.columns]
    return [f"x{i}" for i in range(int(X.shape[1]))] if hasattr(X, "shape") and len(X.shape) == 2 else []


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _f(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def audit_model(model, X, y, *, sensitive, run_dir, name, positive_label=1, predict=None,
                explainer="auto", background=100, group_bins=None) -> Audit:
    """Audit a binary classifier for group fairness and explain it with SHAP; store the
    audit under ``run_dir/audits/<id>/`` (immutable; ``id`` derived from the content).

    Parameters
    ----------
    model : sklearn estimator or Pipeline, torch.nn.Module, or callable
        A fitted binary classifier: tree ensembles, linear models, pipelines or any
        estimator with ``predict_proba``; a torch module mapping a float tensor to a
        logit (or two); or a function returning the probability of ``positive_label``.
    X : DataFrame, 2-d array or tensor
        The audited rows, as the model takes them (raw columns for a pipeline).
    y : array-like
        The actual outcome per row (two distinct labels).
    sensitive : list of str or dict
        Sensitive attributes: column names of X (continuous ones binned), ``"sex"``
        derived from a ``personal_status_and_sex``-style column, or
        ``{name: column | values | Attribute(...)}``. See :mod:`debugkit.audit.groups`.
    run_dir : path
        The debugkit run the model was trained in.
    name : str
        A display name for the audit.
    positive_label : object
        The label of the favourable outcome (e.g. ``"good"`` credit). Default 1.
    predict : callable, optional
        ``predict(X) -> labels`` giving the model's decisions, if not its own
        ``predict`` (or probability >= 0.5); e.g. to audit a different threshold.
    explainer : str
        ``auto`` (by model kind), ``tree``, ``linear``, ``deep``, ``gradient``,
        ``permutation`` or ``kernel``.
    background : int or array
        Rows of the background sample (drawn from X) for explainers that need one, or
        the background rows themselves. TreeExplainer ignores a number (it uses the
        trees' own cover).
    group_bins : dict, optional
        ``{attribute: cut points or number of quantile bins}`` for continuous attributes.

    Returns
    -------
    Audit
        The stored audit (``.id``, ``.verdict``, ``.doc``, ``.rows``).

    Notes
    -----
    Thresholds (the 0.8-1.25 band, bootstrap size, reference groups...) take their
    defaults from :class:`~debugkit.audit.settings.AuditSettings`; use
    ``Auditor(settings).audit_model(...)`` to change them.
    """
    return Auditor().audit_model(model, X, y, sensitive=sensitive, run_dir=run_dir, name=name,
                                 positive_label=positive_label, predict=predict, explainer=explainer,
                                 background=background, group_bins=group_bins)
