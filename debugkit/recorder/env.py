"""Describe the environment a run was recorded in (Python, torch, CUDA, packages)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from importlib import metadata

PACKAGES = (
    "torch", "numpy", "pandas", "pyarrow", "safetensors", "scikit-learn", "streamlit",
    "plotly", "shap", "fairlearn", "debugkit", "torchvision", "transformers", "accelerate",
)


def package_versions(names=PACKAGES) -> dict[str, str]:
    """Installed versions of the packages a debugging session usually asks about."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def collect_env() -> dict:
    """Fast facts about this process's environment (no subprocesses)."""
    import torch

    env = {
        "python": sys.version.split()[0],
        "python_full": sys.version,
        "executable": sys.executable,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "argv": list(sys.argv),
        "torch": torch.__version__,
        "cuda_available": bool(torch.cuda.is_available()),
        "cuda_version": torch.version.cuda,
        "cudnn_version": None,
        "gpus": [],
        "packages": package_versions(),
    }
    if env["cuda_available"]:
        try:
            env["cudnn_version"] = torch.backends.cudnn.version()
            env["gpus"] = [
                {"index": i, "name": torch.cuda.get_device_name(i),
                 "total_memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                for i in range(torch.cuda.device_count())
            ]
        except RuntimeError as exc:
            env["gpu_error"] = str(exc)
    return env


def pip_check(timeout_s: float = 60.0) -> dict:
    """Run ``pip check`` and return ``{"ok", "conflicts", "checked_at"}``.

    ``conflicts`` holds pip's lines (one per broken requirement); ``ok`` is None when
    pip could not be run.
    """
    started = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": None, "conflicts": [], "error": str(exc), "checked_at": started}
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    ok = proc.returncode == 0
    conflicts = [] if ok else [ln for ln in lines if "No broken requirements" not in ln]
    return {"ok": ok, "conflicts": conflicts, "checked_at": started}
