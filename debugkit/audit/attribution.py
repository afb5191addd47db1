"""Attribution findings: which features matter, which of them stand for a sensitive
attribute, and how each feature pushes each group.

Association between a feature and a sensitive attribute's groups:

- a numeric feature with more than 10 distinct values: the correlation ratio η
  (square root of the share of the feature's variance explained by the groups);
- any other feature: Cramér's V with Bergsma's (2013) bias correction.

Both lie in [0, 1]; 0.1 is usually read as weak, 0.3 moderate, 0.5 strong. A feature at
or above ``proxy_threshold`` (default 0.3) is a likely proxy.
"""

from __future__ import annotations

import math

import numpy as np

from ..analysis.findings import Finding
from .groups import MAX_CATEGORIES, SensitiveAttribute


def cramers_v(a, b) -> float:
    """Bias-corrected Cramér's V between two categorical arrays (0 when either is constant)."""
    a = np.asarray(a, dtype=object).astype(str)
    b = np.asarray(b, dtype=object).astype(str)
    n = len(a)
    if n < 2:
        return 0.0
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    r, k = len(ua), len(ub)
    if r < 2 or k < 2:
        return 0.0
    table = np.zeros((r, k))
    np.add.at(table, (ia, ib), 1)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    phi2 = chi2 / n
    phi2c = max(0.0, phi2 - (k - 1) * (r - 1) / (n - 1))
    rc = r - (r - 1) ** 2 / (n - 1)
    kc = k - (k - 1) ** 2 / (n - 1)
    denom = min(kc - 1, rc - 1)
    if denom <= 0:
        return 0.0
    return float(min(1.0, math.sqrt(phi2c / denom)))


def correlation_ratio(x, groups) -> float:
    """η: sqrt(between-group sum of squares / total sum of squares) of numeric ``x``."""
    x = np.asarray(x, dtype=float)
    g = np.asarray(groups, dtype=object).astype(str)
    ok = np.isfinite(x)
    x, g = x[ok], g[ok]
    if len(x) < 2:
        return 0.0
    total = float(((x - x.mean()) ** 2).sum())
    if total == 0:
        return 0.0
    _, inv = np.unique(g, return_inverse=True)
    sums = np.bincount(inv, weights=x)
    counts = np.bincount(inv)
    means = sums / counts
    between = float((counts * (means - x.mean()) ** 2).sum())
    return float(min(1.0, math.sqrt(between / total)))


def association(values: np.ndarray, groups: np.ndarray) -> tuple[float, str]:
    """``(strength, measure)`` between a feature's values and a grouping."""
    v = np.asarray(values)
    if v.dtype.kind in "fiu" and len(np.unique(v[np.isfinite(v)])) > MAX_CATEGORIES:
        return correlation_ratio(v, groups), "correlation ratio"
    return cramers_v(v, groups), "Cramér's V"


def compute_associations(feature_values: dict[str, np.ndarray],
                         attrs: list[SensitiveAttribute]) -> list[dict]:
    """Association of every feature with every sensitive attribute.

    Returns
    -------
    list of ``{"attribute", "feature", "association", "measure", "is_source"}``, strongest
    first per attribute; ``is_source``: the feature is the attribute itself (or what it
    is derived from).
    """
    out = []
    for a in attrs:
        rows = []
        for f, vals in feature_values.items():
            strength, measure = association(vals, a.groups)
            rows.append({"attribute": a.name, "feature": f, "association": round(strength, 6),
                         "measure": measure, "is_source": f in a.source_features})
        rows.sort(key=lambda r: -r["association"])
        out.extend(rows)
    return out


def mean_abs(values: np.ndarray, features: list[str]) -> dict[str, float]:
    """Mean |SHAP| per feature, largest first."""
    m = np.abs(values).mean(axis=0) if len(values) else np.zeros(len(features))
    order = np.argsort(-m, kind="stable")
    return {features[i]: float(m[i]) for i in order}


def mean_by_group(values: np.ndarray, features: list[str], attr: SensitiveAttribute) -> dict:
    """``{group: {feature: mean SHAP}}``: the signed mean attribution within each group."""
    out = {}
    for g in attr.order:
        mask = attr.groups == g
        if mask.any():
            m = values[mask].mean(axis=0)
            out[g] = {f: float(m[j]) for j, f in enumerate(features)}
    return out


def attribution_flags(mean_abs_by_feature: dict[str, float], associations: list[dict],
                      attrs: list[SensitiveAttribute], by_group: dict[str, dict], *,
                      top_k: int, share: float, proxy_threshold: float, output: str) -> list[Finding]:
    """Flag sensitive features and likely proxies that weigh on the model's output.

    A feature is flagged when it is a sensitive attribute (or its source), or a likely
    proxy (association >= ``proxy_threshold``), and its mean |SHAP| ranks in the top
    ``top_k`` or is at least ``share`` of the total.

    Returns
    -------
    list of Finding
        One :meth:`~debugkit.analysis.findings.Finding.flag` per flagged feature (kind
        ``sensitive_feature`` or ``proxy``, severity ``info``: it asks for a review), with
        ``evidence`` ``{"attribute", "feature", "rank", "mean_abs", "share", "association",
        "measure", "group_means"}``; stored as :meth:`~debugkit.analysis.findings.Finding.to_flag_dict`.
    """
    total = sum(mean_abs_by_feature.values()) or 1.0
    rank = {f: i + 1 for i, f in enumerate(mean_abs_by_feature)}
    flags = []
    for a in attrs:
        cands = [(f, "sensitive_feature", None) for f in a.source_features]
        for r in associations:
            if r["attribute"] == a.name and not r["is_source"] and r["association"] >= proxy_threshold:
                cands.append((r["feature"], "proxy", r))
        for f, kind, assoc in cands:
            if f not in mean_abs_by_feature:
                continue
            s = mean_abs_by_feature[f] / total
            if rank[f] > top_k and s < share:
                continue
            gm = {g: by_group.get(a.name, {}).get(g, {}).get(f) for g in a.order}
            gm = {g: v for g, v in gm.items() if v is not None}
            lo_g = min(gm, key=gm.get) if gm else None
            hi_g = max(gm, key=gm.get) if gm else None
            what = (f"sensitive feature {f!r}" if kind == "sensitive_feature" else
                    f"{f!r}, a likely proxy of {a.name} ({assoc['measure']} {assoc['association']:.2f}),")
            msg = (f"{what} ranks #{rank[f]} of {len(rank)} by mean |SHAP| "
                   f"({s:.0%} of the total)")
            if lo_g is not None and hi_g is not None and lo_g != hi_g:
                if gm[lo_g] < 0 < gm[hi_g]:
                    msg += (f"; it pushes {a.name}={lo_g} toward the negative outcome (mean SHAP "
                            f"{gm[lo_g]:+.3f} {output}) and {a.name}={hi_g} toward the positive one "
                            f"({gm[hi_g]:+.3f})")
                else:
                    msg += (f"; its mean SHAP is lowest for {a.name}={lo_g} ({gm[lo_g]:+.3f} {output}) "
                            f"and highest for {a.name}={hi_g} ({gm[hi_g]:+.3f})")
            flags.append(Finding.flag(kind, msg, attribute=a.name, feature=f, rank=rank[f],
                                      mean_abs=mean_abs_by_feature[f], share=s,
                                      association=assoc["association"] if assoc else None,
                                      measure=assoc["measure"] if assoc else None,
                                      group_means=gm))
    return flags
