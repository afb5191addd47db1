"""Compare two runs: what differs before step 0, where they diverge, findings in one only.

Every function here is pure: it takes what :func:`debugkit.io.compare_facts.read_compare_facts`
reads from each run (dicts and DataFrames) and returns rows, DataFrames and
:class:`~debugkit.analysis.findings.Finding` objects. ``run`` is the run under
suspicion (A), ``base`` the run that worked (B); bands are learned from the base.

A fact that one of the runs did not record (an older run without ``data.json``, a run
recorded before every installed distribution was listed) is ``unknown``, never
``equal``. Row ``status`` values are :data:`STATUSES`.

The divergence band
-------------------
For each series (a loss key, a layer's gradient norm) the base's step-to-step noise is
``sigma = 1.4826 * MAD(diff(x)) / sqrt(2)``: the median absolute deviation of its first
differences, scaled to a standard deviation and divided by sqrt 2 because a difference
of two noisy points has twice the variance of one. The band at step ``t`` is
``base[t] +- band_sigmas * sigma`` (never narrower than ``rel_floor * |base[t]|``).
Gradient norms are compared in log space (their noise is multiplicative); losses as they
are. The run diverges at the first common step where it is outside the band and stays
outside for ``persist`` consecutive common steps (or until one of the runs ends).
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from .. import format as fmt
from .findings import Finding, sort_findings

EQUAL, DIFFERS, UNKNOWN = "equal", "differs", "unknown"
ONLY_RUN, ONLY_BASE = "only in run", "only in base"
STATUSES = (EQUAL, DIFFERS, UNKNOWN, ONLY_RUN, ONLY_BASE)

#: Thresholds of :func:`compute_divergence` (override any through ``config``).
DEFAULTS: dict[str, Any] = {
    # Band half-width in robust standard deviations of the base's step-to-step noise.
    # 6 keeps two runs with different data orders (independent noise, so their
    # difference has sqrt(2) x the spread) inside the band ~all of the time.
    "band_sigmas": 6.0,
    # ... and never narrower than this fraction of the base's value (a bit-identical or
    # constant base has zero noise; float rounding of a re-run must not count).
    "rel_floor": 1e-6,
    # Outside the band at this many consecutive common logged steps (fewer when the
    # runs end sooner): one noisy point is not a divergence.
    "persist": 3,
    # The base needs this many logged points of a series to learn its noise.
    "min_points": 5,
    # Which scalars are losses: None means every key whose last '/'-part contains "loss".
    "loss_keys": None,
}

#: Environment facts compared one by one: (row name, how to read it from an env dict).
ENV_FIELDS = (
    ("python", lambda e: e.get("python")),
    ("torch", lambda e: e.get("torch")),
    ("cuda", lambda e: e.get("cuda_version") if "cuda_version" in e else _MISSING),
    ("cudnn", lambda e: e.get("cudnn_version") if "cudnn_version" in e else _MISSING),
    ("nccl", lambda e: e.get("nccl_version") if "nccl_version" in e else _MISSING),
    ("gpu_model", lambda e: _hw(e, "gpu_model", lambda: _first_gpu(e))),
    ("gpu_count", lambda e: len(e["gpus"]) if isinstance(e.get("gpus"), list) else _MISSING),
    ("gpu_driver", lambda e: _hw(e, "gpu_driver")),
    ("cpu_model", lambda e: _hw(e, "cpu_model")),
    ("os", lambda e: (e.get("os") or {}).get("distro") if isinstance(e.get("os"), dict) else _MISSING),
    ("kernel", lambda e: (e.get("os") or {}).get("release") if isinstance(e.get("os"), dict) else _MISSING),
    ("platform", lambda e: e.get("platform")),
)


class _Missing:
    def __repr__(self):
        return "unknown"


_MISSING = _Missing()


def _hw(env: dict, key: str, fallback=None):
    hw = env.get("hardware")
    if isinstance(hw, dict) and key in hw:
        return hw[key]
    return fallback() if fallback is not None else _MISSING


def _first_gpu(env: dict):
    gpus = env.get("gpus")
    if not isinstance(gpus, list):
        return _MISSING
    return gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None


def _status(a, b) -> str:
    if a is _MISSING or b is _MISSING:
        return UNKNOWN
    return EQUAL if a == b else DIFFERS


def _row(name: str, a, b, **extra) -> dict:
    return {"name": name, "run": None if a is _MISSING else a,
            "base": None if b is _MISSING else b, "status": _status(a, b), **extra}


# ---------------------------------------------------------------------------- config
def flatten_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """``{"opt": {"lr": 0.1}}`` -> ``{"opt.lr": 0.1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in (config or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out


def diff_config(config_run: dict | None, config_base: dict | None) -> dict:
    """The flattened config keys that differ.

    Returns ``{"status", "rows"}``: ``rows`` of ``name, run, base, status`` (``differs``,
    ``only in run``, ``only in base``) for the differing keys only; ``status`` is
    ``unknown`` when either run recorded no config, else ``equal`` or ``differs``.
    """
    if not isinstance(config_run, dict) or not isinstance(config_base, dict):
        return {"status": UNKNOWN, "rows": []}
    a, b = flatten_config(config_run), flatten_config(config_base)
    rows = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            rows.append({"name": key, "run": a[key], "base": None, "status": ONLY_RUN})
        elif key not in a:
            rows.append({"name": key, "run": None, "base": b[key], "status": ONLY_BASE})
        elif a[key] != b[key]:
            rows.append({"name": key, "run": a[key], "base": b[key], "status": DIFFERS})
    return {"status": DIFFERS if rows else EQUAL, "rows": rows}


# ---------------------------------------------------------------------------- environment
def _packages(env: dict) -> tuple[dict[str, str] | None, bool]:
    """(versions by normalised name, complete?) from an env dict."""
    if isinstance(env.get("distributions"), dict):
        return {k.lower(): str(v) for k, v in env["distributions"].items()}, True
    if isinstance(env.get("packages"), dict):  # older runs: a fixed short list only
        return {k.lower().replace("_", "-"): str(v) for k, v in env["packages"].items()}, False
    return None, False


def _pip_check(env: dict) -> dict:
    pc = env.get("pip_check")
    if not isinstance(pc, dict):
        return {"ok": None, "conflicts": [], "status": UNKNOWN}
    ok = pc.get("ok")
    return {"ok": ok, "conflicts": list(pc.get("conflicts") or []),
            "status": UNKNOWN if ok is None else ("ok" if ok else "broken")}


def diff_environment(env_run: dict | None, env_base: dict | None) -> dict:
    """Python, torch, CUDA/cuDNN/NCCL, GPU, driver, CPU, OS and package versions.

    Returns
    -------
    dict with ``fields`` (a row per :data:`ENV_FIELDS` entry: ``name, run, base,
    status``), ``packages`` (rows for every package whose version differs or that only
    one run has, plus ``unknown`` rows for packages one run did not list),
    ``packages_complete`` (``{"run": bool, "base": bool}``: whether each run listed every
    installed distribution), ``pip_check`` (``{"run": {...}, "base": {...}}``) and
    ``status`` (``differs`` when any row differs, ``unknown`` when none differs but
    something is unknown, else ``equal``).
    """
    ea = env_run if isinstance(env_run, dict) else {}
    eb = env_base if isinstance(env_base, dict) else {}
    fields = []
    for name, get in ENV_FIELDS:
        a = get(ea) if ea else _MISSING
        b = get(eb) if eb else _MISSING
        a = _MISSING if a is None and name in ("python", "torch", "platform") else a
        b = _MISSING if b is None and name in ("python", "torch", "platform") else b
        fields.append(_row(name, a, b))
    pa, full_a = _packages(ea)
    pb, full_b = _packages(eb)
    packages = []
    if pa is not None and pb is not None:
        for name in sorted(set(pa) | set(pb)):
            if name in pa and name in pb:
                if pa[name] != pb[name]:
                    packages.append({"name": name, "run": pa[name], "base": pb[name],
                                     "status": DIFFERS})
            elif name in pa:
                st = ONLY_RUN if full_b else UNKNOWN
                packages.append({"name": name, "run": pa[name], "base": None, "status": st})
            else:
                st = ONLY_BASE if full_a else UNKNOWN
                packages.append({"name": name, "run": None, "base": pb[name], "status": st})
    rows = fields + packages
    statuses = {r["status"] for r in rows}
    pkg_unknown = pa is None or pb is None or not (full_a and full_b)
    if statuses & {DIFFERS, ONLY_RUN, ONLY_BASE}:
        status = DIFFERS
    elif UNKNOWN in statuses or pkg_unknown:
        status = UNKNOWN
    else:
        status = EQUAL
    return {"status": status, "fields": fields, "packages": packages,
            "packages_complete": {"run": pa is not None and full_a, "base": pb is not None and full_b},
            "pip_check": {"run": _pip_check(ea), "base": _pip_check(eb)}}


# ---------------------------------------------------------------------------- code
def diff_code(code_run: dict | None, code_base: dict | None,
              text_run: str | None = None, text_base: str | None = None) -> dict:
    """The model factory's file hash and, when both texts are given, a unified diff.

    ``code_*`` are the manifests' ``code.model_factory`` records (``spec, file,
    sha256``); ``text_*`` the files' current contents, given only when they still hash
    to the recorded ``sha256`` (see :func:`debugkit.io.compare_facts.read_code_text`).

    Returns ``{"status", "rows", "diff", "diff_note"}``: rows for ``spec``, ``file`` and
    ``sha256``; ``diff`` the unified diff (base -> run) or None, ``diff_note`` why not.
    """
    ca = code_run if isinstance(code_run, dict) else None
    cb = code_base if isinstance(code_base, dict) else None
    rows = []
    for key in ("spec", "file", "sha256"):
        a = ca.get(key) if ca and ca.get(key) is not None else _MISSING
        b = cb.get(key) if cb and cb.get(key) is not None else _MISSING
        rows.append(_row(key, a, b))
    sha = rows[2]["status"]
    diff, note = None, None
    if sha == EQUAL:
        note = "the model factory files are identical (same SHA-256)"
    elif text_run is None or text_base is None:
        note = ("unknown: a run recorded no model factory file" if sha == UNKNOWN else
                "no diff: a file is no longer at its recorded path or has changed since "
                "the run (its SHA-256 no longer matches)")
    else:
        diff = "".join(difflib.unified_diff(
            text_base.splitlines(keepends=True), text_run.splitlines(keepends=True),
            fromfile=f"base: {cb.get('file')}", tofile=f"run: {ca.get('file')}"))
    return {"status": sha, "rows": rows, "diff": diff, "diff_note": note}


# ---------------------------------------------------------------------------- data
def _spec_fields(spec: dict) -> dict[tuple[str, str], Any]:
    out = {}
    for name, t in (spec.get("tensors") or {}).items():
        if not isinstance(t, dict):
            continue
        for field in ("dtype", "shape", "range", "finite"):
            out[(str(name), field)] = _jsonish(t.get(field))
    return out


def _jsonish(v):
    if isinstance(v, (list, tuple)):
        return [_jsonish(x) for x in v]
    return v


def diff_batch_spec(spec_run: dict | None, spec_base: dict | None) -> dict:
    """The learned batch specs, tensor by tensor: dtype, shape, value range, finiteness.

    Returns ``{"status", "rows", "structure"}``; rows (``tensor, field, run, base,
    status``) for the fields that differ, or all ``unknown`` when a run has no spec.
    """
    if not isinstance(spec_run, dict) or not isinstance(spec_base, dict):
        return {"status": UNKNOWN, "rows": [], "structure": _row(
            "structure", (spec_run or {}).get("structure", _MISSING) if spec_run else _MISSING,
            (spec_base or {}).get("structure", _MISSING) if spec_base else _MISSING)}
    fa, fb = _spec_fields(spec_run), _spec_fields(spec_base)
    rows = []
    for key in sorted(set(fa) | set(fb)):
        a = fa.get(key, _MISSING)
        b = fb.get(key, _MISSING)
        if key not in fa or key not in fb:
            rows.append({"tensor": key[0], "field": key[1], "run": fa.get(key), "base": fb.get(key),
                         "status": ONLY_BASE if key not in fa else ONLY_RUN})
        elif a != b:
            rows.append({"tensor": key[0], "field": key[1], "run": a, "base": b, "status": DIFFERS})
    structure = _row("structure", spec_run.get("structure"), spec_base.get("structure"))
    differs = bool(rows) or structure["status"] == DIFFERS
    return {"status": DIFFERS if differs else EQUAL, "rows": rows, "structure": structure}


def diff_datasets(ds_run: list | None, ds_base: list | None) -> dict:
    """Dataset class, length and fingerprint of each tracked dataset, in order.

    Returns ``{"status", "rows"}``; rows ``dataset, name, run, base, status`` plus
    ``items_differing`` on fingerprint rows (how many of the sampled items differ, when
    both sampled the same indices).
    """
    if not isinstance(ds_run, list) or not isinstance(ds_base, list):
        return {"status": UNKNOWN, "rows": [
            {"dataset": 0, "name": n, "run": None, "base": None, "status": UNKNOWN}
            for n in ("length", "fingerprint")]}
    rows = []
    for i in range(max(len(ds_run), len(ds_base))):
        a = ds_run[i] if i < len(ds_run) else None
        b = ds_base[i] if i < len(ds_base) else None
        for name in ("class", "length", "fingerprint"):
            va = a.get(name, _MISSING) if a else _MISSING
            vb = b.get(name, _MISSING) if b else _MISSING
            va = _MISSING if va is None else va
            vb = _MISSING if vb is None else vb
            row = {"dataset": i, **_row(name, va, vb)}
            if a is None or b is None:
                row["status"] = ONLY_BASE if a is None else ONLY_RUN
            if name == "fingerprint" and a and b and a.get("sampled_indices") == b.get("sampled_indices") \
                    and a.get("item_sha256") and b.get("item_sha256"):
                row["items_differing"] = sum(x != y for x, y in zip(a["item_sha256"], b["item_sha256"]))
                row["items_sampled"] = len(a["item_sha256"])
            rows.append(row)
    return {"status": _worst(r["status"] for r in rows), "rows": rows}


def _worst(statuses) -> str:
    s = set(statuses)
    if s & {DIFFERS, ONLY_RUN, ONLY_BASE}:
        return DIFFERS
    return UNKNOWN if UNKNOWN in s or not s else EQUAL


def diff_topology(run: dict, base: dict) -> dict:
    """World size and ranks (``run``/``base``: ``{"world_size", "ranks", "backend"}``)."""
    def get(d, k):
        return _MISSING if k not in d or (d[k] is None and k != "backend") else d[k]

    rows = [_row(k, get(run, k), get(base, k)) for k in ("world_size", "ranks", "backend")]
    return {"status": _worst(r["status"] for r in rows), "rows": rows}


# ---------------------------------------------------------------------------- divergence
def _loss_keys(scalars, config: dict) -> list[str]:
    keys = config.get("loss_keys")
    present = sorted(set(scalars["key"])) if len(scalars) else []
    if keys is not None:
        return [k for k in keys if k in present]
    return [k for k in present if "loss" in k.rsplit("/", 1)[-1].lower()]


def _series_of(df, value_col: str, rank: int | None):
    """(steps, values) of one series, one value per step (the last one logged)."""
    if rank is not None and "rank" in df.columns:
        df = df[df["rank"] == rank]
    df = df.drop_duplicates("step", keep="last").sort_values("step")
    return df["step"].to_numpy(np.int64), df[value_col].to_numpy(np.float64)


def noise_sigma(values: np.ndarray) -> float | None:
    """Robust per-point noise of a series: 1.4826 x MAD of first differences / sqrt 2.

    Non-finite points are dropped first; None with fewer than 3 finite points.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size < 3:
        return None
    d = np.diff(v)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def _transform(values: np.ndarray, log: bool) -> np.ndarray:
    if not log:
        return values
    # A zero norm becomes a very small one (log 1e-30); NaN and Inf stay non-finite.
    with np.errstate(invalid="ignore"):
        floor = np.where(np.isnan(values), np.nan, 1e-30)
        return np.log(np.where(values > 0, values, floor))


def compute_band(steps: np.ndarray, values: np.ndarray, *, log: bool,
                 config: dict | None = None):
    """The band learned from a base series: DataFrame ``step, value, lo, hi`` (in the
    series' own units) and the noise sigma (in compared units: log for ``log=True``).
    None when the base has fewer than ``min_points`` finite points."""
    import pandas as pd

    cfg = {**DEFAULTS, **(config or {})}
    x = _transform(np.asarray(values, np.float64), log)
    finite = np.isfinite(x)
    if finite.sum() < max(int(cfg["min_points"]), 3):
        return None, None
    sigma = noise_sigma(x)
    half = np.maximum(cfg["band_sigmas"] * sigma, cfg["rel_floor"] * np.abs(x))
    lo, hi = x - half, x + half
    if log:
        lo, hi = np.exp(lo), np.exp(hi)
    return pd.DataFrame({"step": steps, "value": values, "lo": lo, "hi": hi}), sigma


def series_band(base_frame, series: str, key: str, rank: int | None = None,
                config: dict | None = None):
    """The base's band for one series, to draw behind the curves: DataFrame ``step,
    value, lo, hi`` (see :func:`compute_band`), or None.

    ``series`` is ``loss`` (``base_frame`` a :meth:`Run.scalars` frame, ``key`` its key)
    or ``grad_norm`` (a :meth:`Run.grad_norms` frame, ``key`` a layer).
    """
    if not len(base_frame):
        return None
    if rank is None:
        rank = int(base_frame["rank"].min())
    if series == "loss":
        steps, values = _series_of(base_frame[base_frame["key"] == key], "value", rank)
    else:
        steps, values = _series_of(base_frame[base_frame["layer"] == key], "grad_norm", rank)
    band, _ = compute_band(steps, values, log=series != "loss", config=config)
    return band


def _first_divergence(steps_a, va, steps_b, vb, *, log: bool, cfg: dict):
    """(result dict) for one series: first step outside the base's band, sustained."""
    common, ia, ib = np.intersect1d(steps_a, steps_b, return_indices=True)
    out = {"common_steps": int(common.size), "step": None, "value_run": None,
           "value_base": None, "noise_sigma": None, "band_halfwidth": None, "excess": None}
    xb_all = _transform(vb, log)
    if np.isfinite(xb_all).sum() < max(int(cfg["min_points"]), 3) or common.size == 0:
        out["reason"] = "too few points to learn the base's noise"
        return out
    sigma = noise_sigma(xb_all)
    out["noise_sigma"] = sigma
    xa, xb = _transform(va[ia], log), xb_all[ib]
    half = np.maximum(cfg["band_sigmas"] * sigma, cfg["rel_floor"] * np.abs(np.nan_to_num(xb)))
    fa, fb = np.isfinite(xa), np.isfinite(xb)
    with np.errstate(invalid="ignore"):
        dist = np.abs(xa - xb)
    outside = np.where(fa & fb, dist > half, fa != fb)
    persist = max(int(cfg["persist"]), 1)
    for i in np.flatnonzero(outside):
        window = outside[i:i + persist]
        if window.all():  # sustained (or outside until the common steps end)
            out.update(step=int(common[i]), value_run=float(va[ia][i]), value_base=float(vb[ib][i]),
                       band_halfwidth=float(half[i]),
                       excess=float(dist[i] / half[i]) if fa[i] and fb[i] and half[i] > 0 else math.inf)
            break
    return out


def compute_divergence(scalars_run, grads_run, scalars_base, grads_base,
                       config: dict | None = None, layer_order: list[str] | None = None):
    """Where the run leaves the base's band: per loss key and per layer's gradient norm.

    Parameters
    ----------
    scalars_run, scalars_base : DataFrame
        :meth:`debugkit.Run.scalars` frames.
    grads_run, grads_base : DataFrame
        :meth:`debugkit.Run.grad_norms` frames.
    config : dict, optional
        Overrides of :data:`DEFAULTS`.
    layer_order : list of str, optional
        Model order of the layers (ties between layers diverging at the same step with
        the same excess go to the earlier one).

    Returns
    -------
    dict with ``rank`` (the rank compared: the lowest both have), ``series`` (DataFrame
    ``series`` (``loss`` | ``grad_norm``), ``key``, ``step`` (first divergent step or
    NA), ``value_run``, ``value_base``, ``band_halfwidth`` and ``noise_sigma`` (in
    compared units: log for gradient norms), ``excess`` (distance / band half-width at
    that step), ``common_steps``), ``step`` (the first divergent step over all series or
    None), ``first_layer`` (the layer whose gradient norm diverges first, or None),
    ``first_loss_step``, and ``status`` (``diverged`` | ``no divergence`` | ``unknown``
    when there are no common steps to compare).
    """
    import pandas as pd

    cfg = {**DEFAULTS, **(config or {})}
    ranks_a = set(scalars_run["rank"]) | set(grads_run["rank"])
    ranks_b = set(scalars_base["rank"]) | set(grads_base["rank"])
    common_ranks = sorted(int(r) for r in ranks_a & ranks_b)
    rank = common_ranks[0] if common_ranks else None
    rows = []
    if rank is not None:
        for key in _loss_keys(scalars_base, cfg):
            sa, sb = scalars_run[scalars_run["key"] == key], scalars_base[scalars_base["key"] == key]
            if not len(sa):
                continue
            res = _first_divergence(*_series_of(sa, "value", rank), *_series_of(sb, "value", rank),
                                    log=False, cfg=cfg)
            rows.append({"series": "loss", "key": key, **res})
        order = list(layer_order or [])
        layers_b = [str(x) for x in grads_base["layer"].unique()] if len(grads_base) else []
        layers_a = set(str(x) for x in grads_run["layer"].unique()) if len(grads_run) else set()
        for layer in layers_b:
            if layer not in layers_a:
                continue
            ga = grads_run[grads_run["layer"] == layer]
            gb = grads_base[grads_base["layer"] == layer]
            res = _first_divergence(*_series_of(ga, "grad_norm", rank),
                                    *_series_of(gb, "grad_norm", rank), log=True, cfg=cfg)
            rows.append({"series": "grad_norm", "key": layer, **res})
    cols = ["series", "key", "step", "value_run", "value_base", "band_halfwidth", "noise_sigma",
            "excess", "common_steps"]
    df = pd.DataFrame(rows, columns=cols)
    df["step"] = df["step"].astype("Int64")
    compared = df[df["common_steps"] > 0] if len(df) else df
    hit = compared[compared["step"].notna()] if len(compared) else compared
    out = {"rank": rank, "series": df, "step": None, "first_layer": None, "first_loss_step": None,
           "status": "unknown" if not len(compared) else "no divergence"}
    if len(hit):
        out["status"] = "diverged"
        out["step"] = int(hit["step"].min())
        losses = hit[hit["series"] == "loss"]
        if len(losses):
            out["first_loss_step"] = int(losses["step"].min())
        layers = hit[(hit["series"] == "grad_norm") & (hit["key"] != fmt.TOTAL_LAYER)]
        if len(layers):
            pos = {n: i for i, n in enumerate(order)}
            best = sorted(layers.itertuples(index=False),
                          key=lambda r: (int(r.step), -float(r.excess), pos.get(r.key, len(pos)), r.key))
            out["first_layer"] = best[0].key
            out["first_layer_step"] = int(best[0].step)
    return out


def divergence_finding(div: dict, following: Finding | dict | None = None) -> Finding | None:
    """The divergence as a Finding (kind ``runs_diverge``), or None without one."""
    if div.get("status") != "diverged":
        return None
    parts = [f"the run leaves the base run's band at step {div['step']}"]
    if div.get("first_layer"):
        parts.append(f"the first layer to diverge is {div['first_layer']!r} "
                     f"(step {div['first_layer_step']})")
    if div.get("first_loss_step") is not None:
        parts.append(f"the loss diverges at step {div['first_loss_step']}")
    msg = "; ".join(parts).capitalize() + "."
    follow = following.to_dict() if isinstance(following, Finding) else following
    if follow:
        msg += f" Then: {follow.get('kind')} at step {follow.get('step')}."
    return Finding(kind="runs_diverge", step=div["step"], rank=div.get("rank"),
                   layer=div.get("first_layer"), severity="warning", message=msg,
                   evidence={"first_loss_step": div.get("first_loss_step"),
                             "first_layer_step": div.get("first_layer_step"),
                             "following": follow})


def following_event(step: int | None, failures: list[dict], findings: list[Finding]):
    """The failure capture, else the finding, of the run at or after ``step`` (the first
    one): what the divergence led to. A dict ``kind, step, rank, layer, message, source``."""
    if step is None:
        return None
    fails = [f for f in failures if isinstance(f.get("step"), int) and f["step"] >= step]
    if fails:
        f = min(fails, key=lambda f: (f["step"], f.get("rank") or 0))
        return {"source": "failure", "id": f.get("id"), "kind": f.get("kind"), "step": f["step"],
                "rank": f.get("rank"), "layer": None,
                "message": f.get("message") or f.get("error_type")}
    later = [f for f in sort_findings(findings) if f.step is not None and f.step >= step]
    if later:
        f = later[0]
        return {"source": "finding", "kind": f.kind, "step": f.step, "rank": f.rank,
                "layer": f.layer, "message": f.message}
    return None


# ---------------------------------------------------------------------------- findings
def _finding_key(f: Finding) -> tuple:
    return (f.kind, f.layer)


def findings_only_in(findings_run: list[Finding], findings_base: list[Finding]) -> dict:
    """Findings of one run whose ``(kind, layer)`` the other run has no finding of.

    Returns ``{"run": [...], "base": [...]}`` (each sorted as :func:`sort_findings`).
    """
    ka = {_finding_key(f) for f in findings_base}
    kb = {_finding_key(f) for f in findings_run}
    return {"run": sort_findings([f for f in findings_run if _finding_key(f) not in ka]),
            "base": sort_findings([f for f in findings_base if _finding_key(f) not in kb])}


# ---------------------------------------------------------------------------- all of it
def compare_runs(run: dict, base: dict, config: dict | None = None) -> dict:
    """The whole comparison, its sections in the order the page and command show them.

    Parameters
    ----------
    run, base : dict
        What :func:`debugkit.io.compare_facts.read_compare_facts` returns for each run, with
        ``findings`` (list of Finding) added.

    Returns
    -------
    dict ``{"run", "base", "before_step_0": {"config", "environment", "code", "data":
    {"datasets", "batch_spec"}, "topology"}, "divergence": {... of
    :func:`compute_divergence` without ``series``, "series": list of row dicts,
    "following", "finding"}, "findings": {"run": [...], "base": [...]}}``.
    """
    before = {
        "config": diff_config(run.get("config"), base.get("config")),
        "environment": diff_environment(run.get("env"), base.get("env")),
        "code": diff_code(run.get("code"), base.get("code"), run.get("code_text"),
                          base.get("code_text")),
        "data": {"datasets": diff_datasets(run.get("datasets"), base.get("datasets")),
                 "batch_spec": diff_batch_spec(run.get("batch_spec"), base.get("batch_spec"))},
        "topology": diff_topology(run.get("topology") or {}, base.get("topology") or {}),
    }
    div = compute_divergence(run["scalars"], run["grad_norms"], base["scalars"], base["grad_norms"],
                             config, layer_order=run.get("layers"))
    following = following_event(div["step"], run.get("failures") or [], run.get("findings") or [])
    finding = divergence_finding(div, following)
    series = div.pop("series")
    div["series"] = _records(series)
    div["following"] = following
    div["finding"] = finding.to_dict() if finding else None
    only = findings_only_in(run.get("findings") or [], base.get("findings") or [])
    return {"run": run.get("name"), "base": base.get("name"), "before_step_0": before,
            "divergence": div,
            "findings": {k: [f.to_dict() for f in v] for k, v in only.items()}}


def _records(df) -> list[dict]:
    out = []
    for r in df.to_dict("records"):
        out.append({k: (None if v is None or (not isinstance(v, str) and _isna(v)) else
                        (int(v) if k in ("step", "common_steps") else v)) for k, v in r.items()})
    return out


def _isna(v) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
