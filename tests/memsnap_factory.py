"""Build PyTorch memory snapshots without a GPU, the way PyTorch writes them.

:class:`SnapshotBuilder` is a small model of the CUDA caching allocator
(c10/cuda/CUDACachingAllocator.cpp): sizes rounded to 512 bytes, a small pool (<= 1 MiB
requests, 2 MiB segments) and a large pool (20 MiB segments for requests under 10 MiB,
else rounded to 2 MiB), best-fit search, block splitting and merging, ``empty_cache``.
Every operation appends the trace entries the real allocator records, and
:meth:`SnapshotBuilder.snapshot` returns a dict with exactly the keys and structures of
``torch.cuda.memory._snapshot()`` as built by ``THCPModule_memorySnapshot``
(torch/csrc/cuda/Module.cpp):

- top level: ``segments``, ``device_traces`` (one list per device),
  ``allocator_settings``, ``external_annotations``;
- segment: ``device, address, total_size, allocated_size, active_size, requested_size,
  stream, segment_type, segment_pool_id (a tuple), is_expandable, frames, blocks``;
- block: ``address, size, requested_size, state, frames``;
- trace entry: ``action, addr`` (``device_free`` for ``oom``), ``size, stream, time_us``
  and ``frames`` when a context was recorded;
- frame: ``name, filename, line``; frame lists are shared between entries with the same
  stack, as PyTorch's symbolizer shares them (so the pickle memoizes them too).

``legacy=True`` writes PyTorch 2.0's layout instead: blocks with ``history`` (``addr,
real_size, frames``) and no ``address``/``frames``, segments without ``is_expandable``
or ``frames``, trace entries without ``time_us``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

MiB = 1 << 20
MIN_BLOCK = 512
SMALL_SIZE = 1 * MiB
SMALL_BUFFER = 2 * MiB
LARGE_BUFFER = 20 * MiB
MIN_LARGE_ALLOC = 10 * MiB
ROUND_LARGE = 2 * MiB
BASE_ADDRESS = 0x7F0000000000
TORCH = "/usr/lib/python3.11/site-packages/torch/"
USER = "/home/ml/project/"


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass
class _Block:
    address: int
    size: int
    allocated: bool = False
    requested: int = 0
    frames: list = field(default_factory=list)
    pending: bool = False  # active_pending_free (freed, waiting on another stream)


@dataclass
class _Segment:
    address: int
    total: int
    small: bool
    stream: int
    frames: list
    blocks: list


class SnapshotBuilder:
    """A caching-allocator model that records PyTorch's snapshot structures.

    Parameters
    ----------
    device : int
        The device index (``device_traces`` gets one list per device up to it).
    t0_us : int
        ``time_us`` of the first event (microseconds since the epoch).
    dt_us : int
        Time between consecutive events.
    legacy : bool
        Write the PyTorch 2.0 layout.
    record_context : bool
        Attach frames to trace entries (``_record_memory_history(context="all")``).
    max_entries : int, optional
        Keep only the last ``max_entries`` trace entries (the ring buffer).
    newest : bool
        Add the keys recent PyTorch puts on trace entries (``compile_context``,
        ``user_metadata``).
    """

    def __init__(self, device: int = 0, *, t0_us: int = 1_700_000_000_000_000, dt_us: int = 10,
                 legacy: bool = False, record_context: bool = True, max_entries: int | None = None,
                 newest: bool = False):
        self.device = device
        self.t_us = t0_us
        self.dt_us = dt_us
        self.legacy = legacy
        self.record_context = record_context
        self.max_entries = max_entries
        self.newest = newest
        self.segments: list[_Segment] = []
        self.trace: list[dict] = []
        self._next_address = BASE_ADDRESS
        self._frames: dict[tuple, list] = {}
        self._empty: list = []
        self.live: dict[int, tuple[int, list]] = {}  # addr -> (requested size, frames)

    # ----------------------------------------------------------------- helpers
    def frames(self, *specs) -> list:
        """A shared frame list, innermost first: ``frames(("model.py", 12, "forward"), ...)``."""
        key = tuple(specs)
        if key not in self._frames:
            self._frames[key] = [{"name": n, "filename": f, "line": ln} for f, ln, n in specs]
        return self._frames[key]

    def _event(self, action: str, size: int, *, addr: int | None = None, frames=None,
               stream: int = 0, device_free: int | None = None):
        e: dict = {"action": action}
        if action == "oom":
            e["device_free"] = device_free
        else:
            e["addr"] = addr
        e["size"] = size
        e["stream"] = stream
        if not self.legacy:
            e["time_us"] = self.t_us
        if self.newest:
            e["compile_context"] = "N/A"
            e["user_metadata"] = ""
        if self.record_context and frames:
            e["frames"] = frames
        self.t_us += self.dt_us
        self.trace.append(e)

    def tick(self, us: int) -> None:
        """Let time pass without events."""
        self.t_us += us

    # ----------------------------------------------------------------- allocator
    def alloc(self, size: int, frames=None, stream: int = 0) -> int:
        """Allocate ``size`` bytes; returns the block's address."""
        frames = frames if frames is not None else self._empty
        rounded = round_size(size)
        small = rounded <= SMALL_SIZE
        best = None
        for seg in self.segments:
            if seg.small != small or seg.stream != stream:
                continue
            for i, b in enumerate(seg.blocks):
                if not b.allocated and not b.pending and b.size >= rounded:
                    if best is None or b.size < best[2].size:
                        best = (seg, i, b)
        if best is None:
            total = segment_size(rounded)
            seg = _Segment(self._next_address, total, small, stream, frames,
                           [_Block(self._next_address, total)])
            self._next_address += ((total + ROUND_LARGE - 1) // ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE
            self.segments.append(seg)
            self.segments.sort(key=lambda s: s.address)
            self._event("segment_alloc", total, addr=seg.address, frames=frames, stream=stream)
            best = (seg, 0, seg.blocks[0])
        seg, i, b = best
        remaining = b.size - rounded
        split = remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE
        if split:
            seg.blocks.insert(i + 1, _Block(b.address + rounded, remaining))
            b.size = rounded
        b.allocated, b.requested, b.frames = True, size, frames
        self.live[b.address] = (size, frames)
        self._event("alloc", size, addr=b.address, frames=frames, stream=stream)
        return b.address

    def free(self, addr: int, frames=None, *, pending: bool = False) -> None:
        """Free the block at ``addr`` (``pending``: leave it waiting on another stream)."""
        seg, i, b = self._find(addr)
        size = b.requested
        self._event("free_requested", size, addr=addr, frames=frames, stream=seg.stream)
        del self.live[addr]
        b.allocated = False
        if pending:
            b.pending = True
            return
        self._complete(seg, i, b, frames)

    def complete_pending(self, addr: int, frames=None) -> None:
        seg, i, b = self._find(addr)
        assert b.pending
        b.pending = False
        self._complete(seg, i, b, frames)

    def _complete(self, seg, i, b, frames):
        self._event("free_completed", b.requested, addr=b.address, frames=frames, stream=seg.stream)
        b.requested, b.frames = 0, self._empty
        # merge with free neighbours
        if i + 1 < len(seg.blocks) and self._is_free(seg.blocks[i + 1]):
            b.size += seg.blocks.pop(i + 1).size
        if i > 0 and self._is_free(seg.blocks[i - 1]):
            prev = seg.blocks[i - 1]
            prev.size += b.size
            seg.blocks.pop(i)

    @staticmethod
    def _is_free(b):
        return not b.allocated and not b.pending

    def _find(self, addr):
        for seg in self.segments:
            for i, b in enumerate(seg.blocks):
                if b.address == addr and (b.allocated or b.pending):
                    return seg, i, b
        raise KeyError(f"no live block at {addr:#x}")

    def oom(self, size: int, device_free: int, frames=None) -> None:
        """Record an out-of-memory event for a request of ``size`` bytes."""
        self._event("oom", size, frames=frames, device_free=device_free)

    def empty_cache(self) -> None:
        """Release every fully free segment (``segment_free`` events)."""
        keep = []
        for seg in self.segments:
            if len(seg.blocks) == 1 and self._is_free(seg.blocks[0]):
                self._event("segment_free", seg.total, addr=seg.address, stream=seg.stream)
            else:
                keep.append(seg)
        self.segments = keep

    # ----------------------------------------------------------------- output
    @property
    def reserved(self) -> int:
        return sum(s.total for s in self.segments)

    @property
    def active(self) -> int:
        """Bytes requested by live allocations (what the active-memory timeline counts)."""
        return sum(size for size, _ in self.live.values())

    def snapshot(self) -> dict:
        segments = [self._segment_dict(s) for s in self.segments]
        trace = self.trace[-self.max_entries:] if self.max_entries else list(self.trace)
        traces = [[] for _ in range(self.device)] + [trace]
        if self.legacy:
            return {"segments": segments, "device_traces": traces}
        return {
            "segments": segments,
            "device_traces": traces,
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                "garbage_collection_threshold": 0.0, "expandable_segments": False,
                "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False,
                "roundup_power2_divisions": {str(1 << k): 0 for k in range(6)},
            },
            "external_annotations": [],
        }

    def _segment_dict(self, s: _Segment) -> dict:
        blocks = []
        allocated = active = requested = 0
        for b in s.blocks:
            state = "active_allocated" if b.allocated else (
                "active_pending_free" if b.pending else "inactive")
            if b.allocated:
                allocated += b.size
                requested += b.requested
            if b.allocated or b.pending:
                active += b.size
            if self.legacy:
                d = {"size": b.size, "requested_size": b.requested, "state": state}
                if b.allocated:
                    h = {"addr": b.address, "real_size": b.requested}
                    if b.frames:
                        h["frames"] = b.frames
                    d["history"] = [h]
            else:
                d = {"address": b.address, "size": b.size, "requested_size": b.requested,
                     "state": state, "frames": b.frames if b.allocated or b.pending else self._empty}
            blocks.append(d)
        seg = {"device": self.device, "address": s.address, "total_size": s.total,
               "allocated_size": allocated, "active_size": active, "requested_size": requested,
               "stream": s.stream, "segment_type": "small" if s.small else "large",
               "segment_pool_id": (0, 0)}
        if not self.legacy:
            seg["is_expandable"] = False
            seg["frames"] = s.frames
        seg["blocks"] = blocks
        return seg

    def dump(self, path) -> None:
        """Write the snapshot as ``torch.cuda.memory._dump_snapshot`` does (``pickle.dump``)."""
        with open(path, "wb") as f:
            pickle.dump(self.snapshot(), f)


# ---------------------------------------------------------------------------- scenarios
def leaky_training(steps: int = 30, *, leak_bytes: int = 3 * MiB, act_bytes: int = 8 * MiB,
                   legacy: bool = False, max_entries: int | None = None) -> SnapshotBuilder:
    """A training loop on the model allocator: weights once, activations freed every
    step, and one tensor per step kept alive in a list (the leak)."""
    b = SnapshotBuilder(legacy=legacy, max_entries=max_entries)
    f_w = b.frames((TORCH + "nn/modules/module.py", 1341, "to"), (USER + "train.py", 10, "main"))
    f_act = b.frames((TORCH + "nn/functional.py", 2380, "linear"), (USER + "model.py", 21, "forward"),
                     (USER + "train.py", 30, "train_step"))
    f_leak = b.frames((TORCH + "_tensor.py", 40, "wrapped"), (USER + "train.py", 34, "train_step"))
    f_grad = b.frames((TORCH + "autograd/graph.py", 823, "_engine_run_backward"),
                      (USER + "train.py", 32, "train_step"))
    b.alloc(16 * MiB, f_w)
    b.alloc(16 * MiB, f_w)
    for _ in range(steps):
        acts = [b.alloc(act_bytes, f_act) for _ in range(3)]
        g = b.alloc(4 * MiB, f_grad)
        b.alloc(leak_bytes, f_leak)  # kept: never freed
        for a in reversed(acts):
            b.free(a)
        b.free(g)
        b.tick(1000)
    return b


def synthetic_large_snapshot(events: int = 1_000_000, sites: int = 40, *, leak_every: int = 50,
                             seed: int = 0) -> dict:
    """A large snapshot in PyTorch's layout, generated directly (the allocator model above
    is exact but too slow for millions of events).

    Allocations come from ``sites`` call sites with shared frame lists; every
    ``leak_every``-th allocation is never freed, the others are freed a few events later
    (``free_requested`` then ``free_completed``). Each allocation gets its own 1 MiB slot
    of address space, and the live ones at the end sit in 64 MiB segments tiled with
    inactive blocks, as the allocator reports them.
    """
    import random

    rng = random.Random(seed)
    frames = [[{"name": "forward", "filename": f"{USER}model_{k}.py", "line": 10 + k},
               {"name": "train_step", "filename": f"{USER}train.py", "line": 100 + k},
               {"name": "main", "filename": f"{USER}train.py", "line": 300}]
              for k in range(sites)]
    sizes = [512 * (1 + (k * 37) % 2000) for k in range(sites)]  # up to ~1 MiB
    trace: list[dict] = []
    pending: list[tuple[int, int, int, int]] = []  # (free at event, addr, size, site)
    live: dict[int, tuple[int, int]] = {}
    t, slot, n_alloc = 1_700_000_000_000_000, 0, 0
    while len(trace) < events:
        if pending and (pending[0][0] <= len(trace) or rng.random() < 0.5):
            _, addr, size, k = pending.pop(0)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                              "time_us": t, "frames": frames[k]})
                t += 3
            del live[addr]
            continue
        k = rng.randrange(sites)
        addr = BASE_ADDRESS + slot * MiB
        slot += 1
        n_alloc += 1
        trace.append({"action": "alloc", "addr": addr, "size": sizes[k], "stream": 0,
                      "time_us": t, "frames": frames[k]})
        t += 3
        live[addr] = (sizes[k], k)
        if n_alloc % leak_every:
            pending.append((len(trace) + rng.randrange(2, 40), addr, sizes[k], k))
    seg_size = 64 * MiB
    by_seg: dict[int, list[int]] = {}
    for addr in sorted(live):
        by_seg.setdefault((addr - BASE_ADDRESS) // seg_size, []).append(addr)
    segments = []
    for s, addrs in sorted(by_seg.items()):
        start = BASE_ADDRESS + s * seg_size
        blocks, pos, alloc_total, req_total = [], start, 0, 0
        for addr in addrs:
            size, k = live[addr]
            rounded = round_size(size)
            if addr > pos:
                blocks.append({"address": pos, "size": addr - pos, "requested_size": 0,
                               "state": "inactive", "frames": []})
            blocks.append({"address": addr, "size": rounded, "requested_size": size,
                           "state": "active_allocated", "frames": frames[k]})
            pos = addr + rounded
            alloc_total += rounded
            req_total += size
        if pos < start + seg_size:
            blocks.append({"address": pos, "size": start + seg_size - pos, "requested_size": 0,
                           "state": "inactive", "frames": []})
        segments.append({"device": 0, "address": start, "total_size": seg_size,
                         "allocated_size": alloc_total, "active_size": alloc_total,
                         "requested_size": req_total, "stream": 0, "segment_type": "large",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                         "blocks": blocks})
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
            "external_annotations": []}
