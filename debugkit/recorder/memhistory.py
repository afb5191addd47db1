"""Memory capacity facts and CUDA memory history for the Recorder.

Two jobs, both small:

- :func:`memory_capacity` says how much memory this rank may use: the host's physical
  memory and the cgroup (container) limit, and the CUDA device's total memory. The
  Memory page draws them as capacity lines and the leak detector projects when a
  growing series would reach them.
- :class:`MemoryHistory` is what ``Recorder(record_memory_history=True)`` runs. On a
  CUDA device it turns on PyTorch's allocator history
  (``torch.cuda.memory._record_memory_history``), takes a snapshot at the moment of an
  out-of-memory error (an allocator OOM observer, called before the stack unwinds and
  frees the step's tensors), and writes snapshots into the run's
  ``memory_snapshots/`` folder when a step fails and when the recorder closes. Without
  CUDA there is no allocator history to record: it is a no-op that says so once (a
  :class:`~debugkit.errors.DebugkitWarning`) and records a ``memory_history`` event.

The snapshot files are exactly what ``torch.cuda.memory._dump_snapshot`` writes (a
pickle of plain dicts, lists, strings and numbers), so they also open in
pytorch.org/memory_viz; debugkit reads them only through its restricted unpickler.
"""

from __future__ import annotations

import os
import pickle
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json, fsync_dir, sha256_file
from ..errors import DebugkitWarning, InvalidInputError

# Larger values seen in cgroup files mean "no limit" (v1 writes a page-rounded 2**63).
_NO_LIMIT = 1 << 60

MSG_NO_CUDA = ("record_memory_history=True: the model is on {device}, not a CUDA device; "
               "PyTorch records allocator history only for CUDA memory, so no memory "
               "snapshots will be written (RSS is still recorded every step)")
MSG_BAD_OPTION = ("record_memory_history={value!r}: expected True, False or a dict with "
                  "keys from {keys}")

DEFAULTS = {
    # Ring buffer of allocator events; each costs a few hundred bytes plus its stack.
    "max_entries": 100_000,
    # "python" stacks are cheap; "all" adds C++ frames (slower, much larger snapshots).
    "stacks": "python",
    # Write a snapshot when the recorder closes (in addition to failures).
    "dump_at_close": True,
}


# ---------------------------------------------------------------------------- capacity
def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 0 < v < _NO_LIMIT else None


def host_total_memory() -> int | None:
    """Physical memory of this machine in bytes (``MemTotal`` of /proc/meminfo)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_memory_limit(proc_cgroup: str = "/proc/self/cgroup",
                        root: str = "/sys/fs/cgroup") -> int | None:
    """The memory limit of this process's cgroup (a container's limit), or None.

    cgroup v2 (``memory.max``) and v1 (``memory.limit_in_bytes``) are both read, at the
    process's own cgroup path and at the mount's root (where a container usually sees
    its own cgroup).
    """
    candidates: list[str] = []
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # v2 unified hierarchy
            candidates.append(os.path.join(root, rel, "memory.max"))
        elif "memory" in controllers.split(","):
            candidates.append(os.path.join(root, "memory", rel, "memory.limit_in_bytes"))
    candidates += [os.path.join(root, "memory.max"),
                   os.path.join(root, "memory", "memory.limit_in_bytes")]
    limits = [v for v in (_read_int(p) for p in candidates) if v is not None]
    return min(limits) if limits else None


def memory_capacity(device) -> dict[str, Any]:
    """Capacity facts for one rank, as stored in its ``meta-<seg>.json``.

    Returns
    -------
    dict with ``host_memory_bytes`` (physical memory), ``host_memory_limit_bytes`` (the
    cgroup limit, None when unlimited) and ``device_memory_bytes`` (total memory of the
    rank's CUDA device, None on CPU).
    """
    out: dict[str, Any] = {"host_memory_bytes": host_total_memory(),
                           "host_memory_limit_bytes": cgroup_memory_limit(),
                           "device_memory_bytes": None}
    if getattr(device, "type", None) == "cuda":
        try:
            import torch

            out["device_memory_bytes"] = int(torch.cuda.get_device_properties(device).total_memory)
        except (RuntimeError, AssertionError, ValueError):
            pass
    return out


# ---------------------------------------------------------------------------- history
def parse_option(value) -> dict | None:
    """``record_memory_history`` as options (None when off)."""
    if value is None or value is False:
        return None
    if value is True:
        return dict(DEFAULTS)
    if isinstance(value, dict) and set(value) <= set(DEFAULTS):
        opts = {**DEFAULTS, **value}
        if not isinstance(opts["max_entries"], int) or opts["max_entries"] < 1:
            raise InvalidInputError(MSG_BAD_OPTION.format(value=value, keys=sorted(DEFAULTS)))
        if opts["stacks"] not in ("python", "all"):
            raise InvalidInputError(MSG_BAD_OPTION.format(value=value, keys=sorted(DEFAULTS)))
        return opts
    raise InvalidInputError(MSG_BAD_OPTION.format(value=value, keys=sorted(DEFAULTS)))


def snapshot_id(rank: int, step: int | None, reason: str) -> str:
    """``r<rank>-s<step, 7 digits>-<reason>`` (``s-------`` before the first step)."""
    s = f"{step:07d}" if isinstance(step, int) and step >= 0 else "-------"
    return f"r{rank}-s{s}-{reason}"


def write_snapshot(run_dir: Path, snap: dict, *, rank: int, step: int | None, reason: str,
                   device: str, failure: str | None = None, extra: dict | None = None) -> str:
    """Pickle a snapshot dict into ``memory_snapshots/`` with its JSON sidecar; return its id.

    The pickle goes to a hidden temporary file that is renamed into place; the sidecar is
    written last, so a snapshot with a sidecar is complete.
    """
    d = Path(run_dir) / fmt.MEMORY_SNAPSHOTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    base = snapshot_id(rank, step, reason)
    sid, n = base, 1
    while (d / f"{sid}{fmt.SNAPSHOT_SUFFIX}").exists():
        n += 1
        sid = f"{base}-{n}"
    tmp = d / f".tmp-{sid}-{os.getpid()}{fmt.SNAPSHOT_SUFFIX}"
    with open(tmp, "wb") as f:
        pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
    final = d / f"{sid}{fmt.SNAPSHOT_SUFFIX}"
    os.replace(tmp, final)
    fsync_dir(d)
    atomic_write_json(d / f"{sid}{fmt.SNAPSHOT_META_SUFFIX}", {
        "id": sid, "rank": rank, "step": step, "reason": reason, "device": device,
        "failure": failure, "time": time.time(), "source": "recorder",
        "size_bytes": final.stat().st_size, "sha256": sha256_file(final), **(extra or {}),
    })
    return sid


class MemoryHistory:
    """CUDA allocator history for one Recorder (see the module docstring).

    Parameters
    ----------
    option : bool or dict
        ``record_memory_history`` as given to the Recorder.
    device : torch.device
        The model's device.
    run_dir : Path
        The run directory.
    rank : int
        This process's rank.
    event : callable
        ``event(kind, **fields)``: the writer's event log.
    """

    def __init__(self, option, device, run_dir: Path, rank: int, event):
        self.options = parse_option(option)
        self.device = device
        self.run_dir = Path(run_dir)
        self.rank = rank
        self._event = event
        self.active = False
        self._oom_snapshot: dict | None = None
        self.written: list[str] = []
        if self.options is None:
            return
        if getattr(device, "type", None) != "cuda":
            msg = MSG_NO_CUDA.format(device=device)
            warnings.warn(msg, DebugkitWarning, stacklevel=3)
            event("memory_history", enabled=False, message=msg)
            return
        import torch

        torch.cuda.memory._record_memory_history(
            enabled="all", context="all", stacks=self.options["stacks"],
            max_entries=self.options["max_entries"], device=device)
        self.active = True
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            # The allocator keeps its observers for the life of the process and has no
            # detach, so the observer holds the recorder weakly and checks it is active.
            ref = weakref.ref(self)

            def _observer(dev, alloc, device_allocated, device_free):
                me = ref()
                if me is not None and me.active:
                    me._on_oom(dev, alloc, device_allocated, device_free)

            attach(_observer)
        event("memory_history", enabled=True, max_entries=self.options["max_entries"],
              stacks=self.options["stacks"], device=str(device))

    def _on_oom(self, dev, alloc, device_allocated, device_free) -> None:
        # Runs inside the allocator's OOM path with its lock released; keep it to one
        # in-memory snapshot (no file I/O) and write it once the exception reaches the step.
        try:
            import torch

            self._oom_snapshot = torch.cuda.memory._snapshot()
            self._oom_info = {"oom_device": int(dev), "oom_requested_bytes": int(alloc),
                              "oom_device_allocated_bytes": int(device_allocated),
                              "oom_device_free_bytes": int(device_free)}
        except Exception:  # never turn an OOM into a different error
            self._oom_snapshot = None

    def dump(self, step: int | None, reason: str, failure: str | None = None) -> str | None:
        """Write the current allocator snapshot (or the one taken at an OOM); its id."""
        if not self.active:
            return None
        try:
            import torch

            extra = {}
            snap = self._oom_snapshot
            if snap is not None:
                reason = "oom"
                extra = dict(self._oom_info)
                self._oom_snapshot = None
            else:
                snap = torch.cuda.memory._snapshot()
            sid = write_snapshot(self.run_dir, snap, rank=self.rank, step=step, reason=reason,
                                 device=str(self.device), failure=failure, extra=extra)
        except Exception as exc:  # snapshots are best effort, never break training
            self._event("capture_error", step=step, message=f"memory snapshot: {exc}")
            return None
        self.written.append(sid)
        self._event("memory_snapshot", step=step, snapshot=sid, reason=reason, failure=failure)
        return sid

    def step_ok(self, step: int) -> None:
        """A step ended without an exception: an OOM it caught and survived (a retry with a
        smaller batch, say) is written now, as an ``oom`` snapshot without a failure."""
        if self._oom_snapshot is not None:
            self.dump(step, "oom")

    def close(self, step: int | None) -> None:
        """Dump the final snapshot (if configured) and stop recording history."""
        if not self.active:
            return
        if self.options.get("dump_at_close", True) or self._oom_snapshot is not None:
            self.dump(step, "close")
        try:
            import torch

            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
        self.active = False
