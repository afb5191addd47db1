"""The environment of two runs: hardware, Python, torch and CUDA, installed packages and
what ``pip check`` said.
"""

from __future__ import annotations

from .rows import _MISSING, DIFFERS, EQUAL, ONLY_BASE, ONLY_RUN, UNKNOWN, _row

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
