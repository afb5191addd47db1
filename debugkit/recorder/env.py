"""Describe the environment a run was recorded in (Python, torch, CUDA, packages)."""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from importlib import metadata
from pathlib import Path

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
        # What `debugkit compare` needs (see docs/compare.md): every distribution, the
        # machine, the OS, NCCL.
        "distributions": all_distributions(),
        "hardware": hardware(),
        "os": os_info(),
        "nccl_version": nccl_version(),
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
    if env["gpus"]:
        env["hardware"]["gpu_model"] = env["gpus"][0]["name"]
    return env


_DIST_INFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+)\.dist-info$")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def all_distributions() -> dict[str, str]:
    """``{name: version}`` of every installed distribution on ``sys.path``.

    Names are normalised as PEP 503 does (lower case, runs of ``-_.`` as ``-``) so that
    two environments compare by name; when one name is installed twice, the first one
    on ``sys.path`` (the one Python imports) wins. A ``.dist-info`` folder is read from
    its name (``<name>-<version>.dist-info``, as wheels install it), which is ~20x
    faster than parsing every METADATA file; other installs (``.egg-info``) are read
    through :mod:`importlib.metadata`.
    """
    out: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for fname in names:
            m = _DIST_INFO.match(fname)
            if m:
                out.setdefault(_normalise(m.group("name")), m.group("version"))
            elif fname.endswith(".egg-info"):
                try:
                    dist = metadata.PathDistribution(Path(entry or ".") / fname)
                    name, version = dist.metadata["Name"], dist.version
                except (OSError, KeyError, ValueError, TypeError):
                    continue
                if name and version:
                    out.setdefault(_normalise(name), str(version))
    return dict(sorted(out.items()))


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``, else :func:`platform.processor`)."""
    info = _read_text("/proc/cpuinfo") or ""
    m = re.search(r"^(?:model name|Hardware|cpu model)\s*:\s*(.+)$", info, re.MULTILINE)
    if m:
        return m.group(1).strip()
    return platform.processor() or None


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version (``/proc/driver/nvidia/version``; no nvidia-smi)."""
    text = _read_text("/proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else None


def nccl_version() -> str | None:
    """NCCL's version as torch was built with it (None on CPU-only builds)."""
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def hardware() -> dict:
    """``{"cpu_model", "cpu_count", "machine", "gpu_model", "gpu_driver"}`` of this host."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "gpu_model": None,
            "gpu_driver": nvidia_driver_version()}


def os_info() -> dict:
    """``{"system", "release", "distro"}`` (distro: ``PRETTY_NAME`` of /etc/os-release)."""
    text = _read_text("/etc/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', text, re.MULTILINE)
    return {"system": platform.system(), "release": platform.release(),
            "distro": m.group(1) if m else None}
