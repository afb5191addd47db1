"""Aggregate sampled profiles: self/total time per function, the flame tree with small
frames folded, the step breakdown (data / forward / backward / optimizer) and the
difference between two profiles.

Everything here is a pure function of a :class:`~debugkit.io.profiles.SampledProfile`
and works on its unique stacks with numpy (a row per distinct stack, never per sample).

Vocabulary: a *sample* is one stack taken by the profiler; a frame's *self* samples are
those where it is the innermost frame (the code running), its *total* samples those
where it is anywhere on the stack (a recursive function counts once per sample).
Fractions are of all samples of the selected threads, idle samples included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

DEFAULT_FOLD = 0.001  # frames under 0.1 % of the samples are folded
STEP_PHASES = ("data", "forward", "backward", "optimizer")
OTHER = "other"
FOLDED_LABEL = "{n} frame{s} under {pct}"


# ---------------------------------------------------------------------------- selection
@dataclass
class Selection:
    """Per-stack totals of the chosen threads, keyed the chosen way.

    ``keys_flat`` / ``offsets`` hold each stack's keys root first; ``samples`` and
    ``weight_s`` its totals; ``key_name``, ``key_file``, ``key_line`` describe each key.
    """

    keys_flat: np.ndarray
    offsets: np.ndarray
    samples: np.ndarray
    weight_s: np.ndarray
    key_name: list
    key_file: list
    key_line: list
    total_samples: int
    total_weight_s: float


def _opt_int(v):
    """An int, or None for None/NaN/pd.NA."""
    if v is None:
        return None
    try:
        import pandas as pd

        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return int(v)


def _key_map(profile, by: str):
    """frame id -> key id, and the key's (name, file, line)."""
    fr = profile.frames
    if by == "frame":
        lines = [_opt_int(v) for v in fr["line"].astype(object).tolist()]
        return (np.arange(len(fr), dtype=np.int64), fr["name"].tolist(), fr["file"].tolist(), lines)
    if by != "function":
        raise ValueError(f"by={by!r}: expected 'frame' or 'function'")
    keys: dict[tuple[str, str], int] = {}
    mapping = np.empty(len(fr), dtype=np.int64)
    for i, (n, f) in enumerate(zip(fr["name"].tolist(), fr["file"].tolist())):
        mapping[i] = keys.setdefault((n, f), len(keys))
    names = [k[0] for k in keys]
    files = [k[1] for k in keys]
    return mapping, names, files, [None] * len(keys)


def select(profile, thread_ids=None, by: str = "frame") -> Selection:
    """The stacks of ``thread_ids`` (all threads when None), summed over threads."""
    c = profile.counts
    if thread_ids is not None:
        c = c[c["thread_id"].isin(list(thread_ids))]
    n_stacks = profile.n_stacks
    samples = np.bincount(c["stack_id"].to_numpy(), weights=c["samples"].to_numpy(),
                          minlength=n_stacks).astype(np.int64)
    weight = np.bincount(c["stack_id"].to_numpy(), weights=c["weight_s"].to_numpy(), minlength=n_stacks)
    mapping, names, files, lines = _key_map(profile, by)
    keys_flat = mapping[profile.stack_frames] if len(profile.stack_frames) else np.zeros(0, np.int64)
    return Selection(keys_flat, profile.stack_offsets, samples, weight, names, files, lines,
                     int(samples.sum()), float(weight.sum()))


def _unique(a) -> np.ndarray:
    """Sorted distinct values (numpy 2.4's hash-based ``np.unique`` is many times slower
    than sorting for these integer arrays)."""
    a = np.sort(np.asarray(a), kind="stable")
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _stack_of_pos(offsets: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


# ---------------------------------------------------------------------------- idle samples
# A sample is idle (the thread waits) when its innermost Python frame is one of these
# blocking calls: (name regex, file substring). py-spy with --idle samples waiting threads
# too; their leaves are the stdlib's waits, never the code doing work.
IDLE_LEAVES: list[tuple[str, str]] = [
    (r"^(Condition|Event|Semaphore|BoundedSemaphore|Barrier)\.(wait|acquire)$"
     r"|^(Thread\.)?(join|_wait_for_tstate_lock)$", "threading.py"),
    (r"(^|\.)(select|poll)$", "selectors.py"),
    (r"^socket\.(accept|recv\w*)$", "socket.py"),
    (r"^(Connection\.)?(_recv\w*|recv\w*|_poll|poll|wait)$", "multiprocessing/connection.py"),
    (r"(^|\.)(get|put)$", "queue.py"),
    (r"(^|\.)(get|put)$", "multiprocessing/queues.py"),
    (r"(^|\.)(wait|poll|_wait|_try_wait)$", "multiprocessing/popen_fork.py"),
    (r"(^|\.)(wait|poll|_wait|_try_wait|communicate)$", "subprocess.py"),
    (r"(^|\.)(serve_forever|accept)$", "multiprocessing/"),
]


def idle_keys(names, files) -> np.ndarray:
    """Which keys (by name and file) are idle leaves (:data:`IDLE_LEAVES`)."""
    rules = [(re.compile(rx), sub) for rx, sub in IDLE_LEAVES]
    return np.array([any(sub in f and rx.search(n) for rx, sub in rules) for n, f in zip(names, files)],
                    dtype=bool)


def idle_stacks(sel: Selection) -> np.ndarray:
    """Per stack of a selection: True when its innermost frame is an idle leaf."""
    n_stacks = len(sel.offsets) - 1
    out = np.zeros(n_stacks, dtype=bool)
    lengths = np.diff(sel.offsets)
    nonempty = np.flatnonzero(lengths > 0)
    if not len(nonempty):
        return out
    idle = idle_keys(sel.key_name, sel.key_file)
    out[nonempty] = idle[sel.keys_flat[sel.offsets[1:][nonempty] - 1]]
    return out


# ---------------------------------------------------------------------------- function tables
def compute_function_table(profile, thread_ids=None, by: str = "frame", include_idle: bool = True):
    """Self and total samples per frame (``by="frame"``: name, file and line, as the
    profiler recorded them) or per function (``by="function"``: name and file).

    With ``include_idle=False`` the samples of waiting threads (innermost frame a
    blocking call: :data:`IDLE_LEAVES`, e.g. ``Condition.wait``, ``socket.accept``,
    ``select``) are left out of both columns; fractions stay of all samples.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``line`` (Int64; null for functions),
    ``self_samples``, ``total_samples`` (int64), ``self_fraction``, ``total_fraction``
    (of all samples of the threads), ``self_s``, ``total_s`` (seconds; samples when the
    profile has no time unit), sorted by self samples, then total, descending. Keys with
    no samples are left out.
    """
    import pandas as pd

    sel = select(profile, thread_ids, by)
    if not include_idle:
        busy = ~idle_stacks(sel)
        total_samples = sel.total_samples
        sel = Selection(sel.keys_flat, sel.offsets, np.where(busy, sel.samples, 0), np.where(busy, sel.weight_s, 0.0),
                        sel.key_name, sel.key_file, sel.key_line, total_samples, sel.total_weight_s)
    n_keys = len(sel.key_name)
    lengths = np.diff(sel.offsets)
    nonempty = np.flatnonzero(lengths > 0)
    leaf = sel.keys_flat[sel.offsets[1:][nonempty] - 1] if len(nonempty) else np.zeros(0, np.int64)
    self_s = np.bincount(leaf, weights=sel.samples[nonempty], minlength=n_keys)
    self_w = np.bincount(leaf, weights=sel.weight_s[nonempty], minlength=n_keys)
    stack_of = _stack_of_pos(sel.offsets)
    pair = _unique(stack_of.astype(np.int64) * max(n_keys, 1) + sel.keys_flat) if len(stack_of) else np.zeros(0, np.int64)
    ps, pk = pair // max(n_keys, 1), pair % max(n_keys, 1)
    tot_s = np.bincount(pk, weights=sel.samples[ps], minlength=n_keys)
    tot_w = np.bincount(pk, weights=sel.weight_s[ps], minlength=n_keys)
    keep = np.flatnonzero(tot_s > 0)
    total = max(sel.total_samples, 1)
    df = pd.DataFrame({
        "name": [sel.key_name[i] for i in keep],
        "file": [sel.key_file[i] for i in keep],
        "line": pd.array([sel.key_line[i] for i in keep], dtype="Int64"),
        "self_samples": self_s[keep].round().astype(np.int64),
        "total_samples": tot_s[keep].round().astype(np.int64),
        "self_fraction": self_s[keep] / total,
        "total_fraction": tot_s[keep] / total,
        "self_s": self_w[keep],
        "total_s": tot_w[keep],
    })
    return df.sort_values(["self_samples", "total_samples", "name"], ascending=[False, False, True],
                          kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------- flame tree
def _build_trie(keys_flat, offsets, values: np.ndarray, n_keys: int):
    """Merge stacks into a prefix tree, level by level with numpy.

    Returns (parent, key, depth, total values [n_nodes, k], self values [n_nodes, k]);
    node 0 is the root (key -1).
    """
    n_stacks = len(offsets) - 1
    k = values.shape[1]
    lengths = np.diff(offsets)
    node_of = np.zeros(n_stacks, dtype=np.int64)
    parents, keys, depths = [np.array([-1])], [np.array([-1])], [np.array([0])]
    totals = [values.sum(axis=0, keepdims=True)]
    next_id = 1
    base = max(n_keys, 1)
    max_len = int(lengths.max()) if n_stacks else 0
    for d in range(max_len):
        alive = np.flatnonzero(lengths > d)
        sym = keys_flat[offsets[alive] + d]
        code = node_of[alive] * base + sym
        uniq, inv = np.unique(code, return_inverse=True)
        ids = next_id + np.arange(len(uniq))
        node_of[alive] = ids[inv]
        parents.append(uniq // base)
        keys.append(uniq % base)
        depths.append(np.full(len(uniq), d + 1))
        tot = np.zeros((len(uniq), k))
        np.add.at(tot, inv, values[alive])
        totals.append(tot)
        next_id += len(uniq)
    parent = np.concatenate(parents)
    key = np.concatenate(keys)
    depth = np.concatenate(depths)
    total = np.concatenate(totals)
    selfv = np.zeros_like(total)
    np.add.at(selfv, node_of, values)
    return parent, key, depth, total, selfv


def compute_flame_tree(profile, thread_ids=None, by: str = "function", min_fraction: float = DEFAULT_FOLD,
                       root_label: str = "all"):
    """The flame tree of the selected threads, frames under ``min_fraction`` folded.

    Children of a node whose samples are under ``min_fraction`` of all samples are
    merged into one ``"N frames under 0.1 %"`` node (their subtrees dropped), so the
    figure stays small; every node's samples still add up to its parent's.

    Returns
    -------
    DataFrame with columns ``node_id`` (0 = root), ``parent_id`` (-1 for the root),
    ``depth``, ``name``, ``file``, ``line`` (Int64), ``samples`` (int64: total samples
    through the node), ``self_samples``, ``weight_s``, ``fraction`` (of all samples),
    ``folded`` (int: frames merged into this node; 0 for a real frame), ``package``
    (see :func:`frame_package`). Ordered parents-before-children.
    """
    sel = select(profile, thread_ids, by)
    values = np.stack([sel.samples.astype(np.float64), sel.weight_s], axis=1)
    parent, key, depth, total, selfv = _build_trie(sel.keys_flat, sel.offsets, values, len(sel.key_name))
    return _tree_frame(parent, key, depth, total, selfv, sel, min_fraction, root_label)


def _tree_frame(parent, key, depth, total, selfv, sel, min_fraction, root_label,
                extra: dict | None = None):
    import pandas as pd

    grand = max(float(total[0, 0]), 1.0)
    threshold = min_fraction * grand
    n = len(parent)
    big = total[:, 0] >= threshold
    big[0] = True
    keep = big.copy()
    # A node is kept when it and its parent are big (ancestors of a big node are big).
    keep[1:] &= big[parent[1:]]
    small_child = ~big & (total[:, 0] > 0)
    small_child[0] = False
    small_child &= keep[np.where(parent >= 0, parent, 0)] & (parent >= 0)
    kept = np.flatnonzero(keep)
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[kept] = np.arange(len(kept))
    rows = {
        "node_id": np.arange(len(kept), dtype=np.int64),
        "parent_id": np.where(parent[kept] >= 0, new_id[np.maximum(parent[kept], 0)], -1),
        "depth": depth[kept].astype(np.int64),
        "name": [root_label if key[i] < 0 else sel.key_name[key[i]] for i in kept],
        "file": ["" if key[i] < 0 else sel.key_file[key[i]] for i in kept],
        "line": [None if key[i] < 0 else sel.key_line[key[i]] for i in kept],
        "samples": total[kept, 0],
        "self_samples": selfv[kept, 0],
        "weight_s": total[kept, 1],
        "folded": np.zeros(len(kept), dtype=np.int64),
    }
    extra_cols = {name: list(total[kept, col]) for name, col in (extra or {}).items()}
    # One folded node per parent that has small children.
    sc = np.flatnonzero(small_child)
    if len(sc):
        par = parent[sc]
        upar, inv = np.unique(par, return_inverse=True)
        cnt = np.bincount(inv)
        sums = np.zeros((len(upar), total.shape[1]))
        np.add.at(sums, inv, total[sc])
        pct = f"{min_fraction * 100:g} %"
        start = len(kept)
        rows["node_id"] = np.concatenate([rows["node_id"], start + np.arange(len(upar))])
        rows["parent_id"] = np.concatenate([rows["parent_id"], new_id[upar]])
        rows["depth"] = np.concatenate([rows["depth"], depth[upar] + 1])
        rows["name"] += [FOLDED_LABEL.format(n=int(c), s="" if c == 1 else "s", pct=pct) for c in cnt]
        rows["file"] += [""] * len(upar)
        rows["line"] += [None] * len(upar)
        rows["samples"] = np.concatenate([rows["samples"], sums[:, 0]])
        rows["self_samples"] = np.concatenate([rows["self_samples"], np.zeros(len(upar))])
        rows["weight_s"] = np.concatenate([rows["weight_s"], sums[:, 1]])
        rows["folded"] = np.concatenate([rows["folded"], cnt.astype(np.int64)])
        for name, col in (extra or {}).items():
            extra_cols[name] += list(sums[:, col])
    df = pd.DataFrame(rows)
    df["line"] = pd.array(df["line"].tolist(), dtype="Int64")
    df["package"] = [frame_package(f) for f in df["file"].tolist()]
    df["samples"] = df["samples"].round().astype(np.int64)
    df["self_samples"] = df["self_samples"].round().astype(np.int64)
    df["fraction"] = df["samples"] / grand
    for name, vals in extra_cols.items():
        df[name] = np.asarray(vals, dtype=np.float64)
    return df.sort_values(["depth", "node_id"], kind="stable").reset_index(drop=True)


_SITE = re.compile(r"(?:site|dist)-packages/([^/]+)")
_STDLIB = re.compile(r"/lib/python3\.\d+/([^/]+)")


def frame_package(file: str) -> str:
    """Which package a frame's file belongs to: a site-packages package (``torch``,
    ``numpy`` ...), ``python`` (the standard library), ``importlib`` (imports),
    ``debugkit``, or ``your code`` (the profiled program's own files).

    py-spy writes full paths in speedscope files and shortened ones
    (``torch/nn/functional.py``, ``threading.py``) in raw files; both are understood.
    """
    import sys

    if not file:
        return ""
    if file.startswith("<frozen"):
        return "importlib" if "importlib" in file else "python"
    m = _SITE.search(file)
    if m:
        return m.group(1).split(".", 1)[0]
    if "/debugkit/" in file or file.startswith("debugkit/"):
        return "debugkit"
    if _STDLIB.search(file):
        return "python"
    if file.startswith("/") or file.startswith("<"):
        return "your code"
    head = file.split("/", 1)[0]
    head = head[:-3] if head.endswith(".py") else head
    if head in getattr(sys, "stdlib_module_names", ()):
        return "python"
    return head if "/" in file else "your code"


def match_frames(tree, query: str):
    """Boolean mask of the nodes whose name or file contains ``query`` (case-insensitive);
    an empty query matches nothing. Folded nodes never match."""
    q = (query or "").strip().lower()
    if not q:
        return np.zeros(len(tree), dtype=bool)
    text = (tree["name"].astype(str) + " " + tree["file"].astype(str)).str.lower()
    return (text.str.contains(q, regex=False) & (tree["folded"] == 0)).to_numpy()


def search_summary(profile, query: str, thread_ids=None) -> dict:
    """How many samples pass through a frame matching ``query``: ``{matches (distinct
    functions), samples, fraction}``."""
    q = (query or "").strip().lower()
    sel = select(profile, thread_ids, "function")
    if not q:
        return {"matches": 0, "samples": 0, "fraction": 0.0}
    hit_key = np.array([q in f"{n} {f}".lower() for n, f in zip(sel.key_name, sel.key_file)], dtype=bool)
    if not hit_key.any() or not len(sel.keys_flat):
        return {"matches": int(hit_key.sum()), "samples": 0, "fraction": 0.0}
    stack_of = _stack_of_pos(sel.offsets)
    hit_stacks = _unique(stack_of[hit_key[sel.keys_flat]])
    samples = int(sel.samples[hit_stacks].sum())
    used = _unique(sel.keys_flat[hit_key[sel.keys_flat]])
    return {"matches": int(len(used)), "samples": samples,
            "fraction": samples / max(sel.total_samples, 1)}


# ---------------------------------------------------------------------------- step breakdown
# Phase rules: (phase, [(name regex, file substring or None)]). A stack belongs to the
# first phase (in this order) one of whose rules matches one of its frames.
STEP_RULES: list[tuple[str, list[tuple[str, str | None]]]] = [
    ("optimizer", [(r"(^|\.)(step|zero_grad|_use_grad|_single_tensor_\w+|_multi_tensor_\w+)$", "torch/optim/"),
                   (r"^Optimizer\.(step|zero_grad)", None)]),
    ("backward", [(r"(^|\.)(backward|_engine_run_backward|run_backward)$", "torch/autograd/"),
                  (r"^Tensor\.backward$", None)]),
    ("data", [(r"DataLoader|_worker_loop|Fetcher|collate|pin_memory", "torch/utils/data/")]),
    ("forward", [(r"^Module\.(_call_impl|_wrapped_call_impl)$", "torch/nn/modules/module.py"),
                 (r".", "torch/nn/functional.py")]),
]


def _phase_of_keys(names, files) -> np.ndarray:
    """Rank of each function key in :data:`STEP_RULES` (``len(STEP_RULES)`` for none):
    a lower rank wins when a stack holds frames of several phases."""
    out = np.full(len(names), len(STEP_RULES), dtype=np.int64)
    compiled = [[(re.compile(rx), sub) for rx, sub in rules] for _, rules in STEP_RULES]
    for i, (n, f) in enumerate(zip(names, files)):
        if n == "<module>":
            continue  # an import is not a training phase
        for rank, rules in enumerate(compiled):
            if any(rx.search(n) and (sub is None or sub in f) for rx, sub in rules):
                out[i] = rank
                break
    return out


def compute_step_breakdown(profile, thread_ids=None):
    return _step_breakdown(profile, thread_ids)[:2]


compute_step_breakdown.__doc__ = None  # set below from _step_breakdown's


def _step_breakdown(profile, thread_ids=None):
    """Where the training loop's time goes: data loading, forward, backward, optimizer.

    Each sample of the threads is given the first phase (``optimizer``, ``backward``,
    ``data``, ``forward``; see :data:`STEP_RULES`) one of whose frames its stack holds:
    the DataLoader's iteration in ``torch/utils/data/`` (``DataLoader.__iter__`` /
    ``__next__``, worker start-up, waiting for workers, fetching and collating), ``Tensor.backward`` / autograd, ``Optimizer.step`` /
    ``zero_grad`` and ``nn.Module`` calls or ``torch.nn.functional`` (the loss).

    Only samples inside the training loop count: the loop is the innermost function
    that encloses at least 95 % of the phase samples (and samples of two phases or
    more), between the first and last of its lines seen in those samples; samples
    outside it (imports, set-up before the loop) are left out, and samples inside it in
    none of the phases are ``other`` (logging, metrics, the Recorder).

    Returns
    -------
    (DataFrame, dict)
        Rows for ``data, forward, backward, optimizer, other`` with ``phase``,
        ``samples``, ``fraction`` (of the loop's samples), ``seconds``; and
        ``{"loop": "name (file)" or None, "loop_samples", "outside_samples",
        "total_samples", "workers_only"}`` (``workers_only``: the threads asked for were
        all DataLoader workers, which are always left out: they run no training loop).
    """
    import pandas as pd

    # DataLoader worker processes run no training loop (their stacks, forked from the
    # main process, would read as one loop 100 % in data loading): they are left out.
    t = profile.threads
    chosen = t if thread_ids is None else t[t["thread_id"].isin(list(thread_ids))]
    workers_only = len(chosen) > 0 and bool((chosen["role"] == "dataloader").all())
    thread_ids = [int(i) for i in chosen.loc[chosen["role"] != "dataloader", "thread_id"]]
    sel = select(profile, thread_ids, "function")
    phases = list(STEP_PHASES) + [OTHER]
    info = {"loop": None, "loop_samples": 0, "outside_samples": sel.total_samples,
            "total_samples": sel.total_samples, "workers_only": workers_only}
    empty = pd.DataFrame({"phase": phases, "samples": np.zeros(len(phases), np.int64),
                          "fraction": np.zeros(len(phases)), "seconds": np.zeros(len(phases))})
    n_stacks = len(sel.offsets) - 1
    if not len(sel.keys_flat):
        return empty, info, np.zeros(len(sel.offsets) - 1, dtype=bool), None
    key_rank = _phase_of_keys(sel.key_name, sel.key_file)
    stack_of = _stack_of_pos(sel.offsets)
    stack_rank = np.full(n_stacks, len(STEP_RULES), dtype=np.int64)
    np.minimum.at(stack_rank, stack_of, key_rank[sel.keys_flat])
    # rank -> row of the output (STEP_PHASES order, then other)
    rank_to_row = np.array([STEP_PHASES.index(ph) for ph, _ in STEP_RULES] + [len(STEP_PHASES)])
    # A stack under the import machinery is an import, whatever it runs.
    importing = np.array([f.startswith("<frozen importlib") for f in sel.key_file], dtype=bool)
    if importing.any():
        stack_rank[_unique(stack_of[importing[sel.keys_flat]])] = len(STEP_RULES)
    stack_phase = rank_to_row[stack_rank]
    in_phase = stack_phase < len(STEP_PHASES)
    phase_total = float(sel.samples[in_phase].sum())
    if phase_total == 0:
        return empty, info, np.zeros(len(sel.offsets) - 1, dtype=bool), None
    # The loop: keys present in >= 95 % of phase samples, deepest first.
    n_keys = len(sel.key_name)
    pair = _unique(stack_of * n_keys + sel.keys_flat)
    ps, pk = pair // n_keys, pair % n_keys
    w = np.where(in_phase[ps], sel.samples[ps], 0)
    cover = np.bincount(pk, weights=w, minlength=n_keys)
    depth_pos = np.arange(len(sel.keys_flat)) - sel.offsets[stack_of]
    min_depth = np.full(n_keys, np.iinfo(np.int64).max)
    np.minimum.at(min_depth, sel.keys_flat, depth_pos)
    phases_present = {int(p) for p in _unique(stack_phase[in_phase & (sel.samples > 0)])}
    # A phase's own frames (DataLoader.__next__ ...) are not the loop that calls them.
    cands = np.flatnonzero((cover >= 0.95 * phase_total) & (key_rank == len(STEP_RULES)))
    loop = None
    for k in sorted(cands.tolist(), key=lambda k: -min_depth[k]):
        stacks_k = ps[pk == k]
        covered = {int(p) for p in _unique(stack_phase[stacks_k]) if p < len(STEP_PHASES)}
        if len(phases_present) < 2 or len(covered) >= 2:
            loop = k
            break
    lines_txt = ""
    if loop is None:
        inside = np.ones(n_stacks, dtype=bool)
    else:
        # The loop's lines: those of the loop function's (outermost) frame in phase
        # samples. Its other lines (set-up before the loop, clean-up after) are outside.
        frame_line = profile.frames["line"].to_numpy(dtype=np.float64, na_value=np.nan)
        at = np.flatnonzero(sel.keys_flat == loop)
        first = np.ones(len(at), dtype=bool)
        first[1:] = stack_of[at[1:]] != stack_of[at[:-1]]
        at = at[first]
        line_of = np.full(n_stacks, np.nan)
        line_of[stack_of[at]] = frame_line[profile.stack_frames[at]]
        inside = np.zeros(n_stacks, dtype=bool)
        inside[stack_of[at]] = True
        ph_lines = line_of[in_phase & ~np.isnan(line_of)]
        if len(ph_lines):
            lo, hi = float(ph_lines.min()), float(ph_lines.max())
            inside &= np.isnan(line_of) | ((line_of >= lo) & (line_of <= hi))
            lines_txt = f", lines {int(lo)}-{int(hi)}" if hi > lo else f", line {int(lo)}"
        # A phase sample outside the loop (e.g. an evaluation loop) still counts.
        inside |= in_phase
    samples = np.zeros(len(phases))
    seconds = np.zeros(len(phases))
    np.add.at(samples, stack_phase[inside], sel.samples[inside])
    np.add.at(seconds, stack_phase[inside], sel.weight_s[inside])
    loop_total = samples.sum()
    df = pd.DataFrame({"phase": phases, "samples": samples.round().astype(np.int64),
                       "fraction": samples / loop_total if loop_total else np.zeros(len(phases)),
                       "seconds": seconds})
    info.update({"loop": None if loop is None else f"{sel.key_name[loop]} ({sel.key_file[loop]}{lines_txt})",
                 "loop_samples": int(loop_total),
                 "outside_samples": int(sel.total_samples - loop_total)})
    loop_fn = None if loop is None else (sel.key_name[loop], sel.key_file[loop])
    return df, info, inside, loop_fn


compute_step_breakdown.__doc__ = _step_breakdown.__doc__


def compute_loop_flame_tree(profile, thread_ids=None, by: str = "function", min_fraction: float = DEFAULT_FOLD):
    """The flame tree of the training loop only (see :func:`compute_step_breakdown`):
    the samples the breakdown counts as inside the loop, each stack cut to start at the
    loop function's frame, so imports and set-up around the loop are not drawn.

    Returns
    -------
    (DataFrame or None, dict)
        The tree as :func:`compute_flame_tree` returns it (its root is the loop, labelled
        ``info["loop"]``), or None when no loop was found; and the breakdown's ``info``.
        Phase samples outside the loop function (an evaluation loop elsewhere) are not in
        this tree.
    """
    _, info, inside, loop_fn = _step_breakdown(profile, thread_ids)
    if loop_fn is None:
        return None, info
    t = profile.threads
    chosen = t if thread_ids is None else t[t["thread_id"].isin(list(thread_ids))]
    ids = [int(i) for i in chosen.loc[chosen["role"] != "dataloader", "thread_id"]]
    sel = select(profile, ids, by)
    fr = profile.frames
    is_loop_frame = ((fr["name"] == loop_fn[0]) & (fr["file"] == loop_fn[1])).to_numpy()
    frames_flat = profile.stack_frames
    offsets = sel.offsets
    n_stacks = len(offsets) - 1
    hit = is_loop_frame[frames_flat] if len(frames_flat) else np.zeros(0, dtype=bool)
    stack_of = _stack_of_pos(offsets)
    first = np.full(n_stacks, -1, dtype=np.int64)
    pos = np.flatnonzero(hit)
    if len(pos):
        # the outermost loop frame of each stack: positions are in stack order, root first
        st = stack_of[pos]
        keep_first = np.ones(len(pos), dtype=bool)
        keep_first[1:] = st[1:] != st[:-1]
        first[st[keep_first]] = pos[keep_first]
    use = inside & (first >= 0)
    # Cut each used stack to [first, end); the others become empty stacks with no samples.
    starts = np.where(use, first, offsets[1:])
    lengths = offsets[1:] - starts
    new_off = np.zeros(n_stacks + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_off[1:])
    idx = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), offsets[1:].tolist())]) \
        if n_stacks else np.zeros(0, np.int64)
    keys_flat = sel.keys_flat[idx.astype(np.int64)] if len(idx) else np.zeros(0, np.int64)
    samples = np.where(use, sel.samples, 0)
    weight = np.where(use, sel.weight_s, 0.0)
    cut = Selection(keys_flat, new_off, samples, weight, sel.key_name, sel.key_file, sel.key_line,
                    int(samples.sum()), float(weight.sum()))
    values = np.stack([cut.samples.astype(np.float64), cut.weight_s], axis=1)
    parent, key, depth, total, selfv = _build_trie(cut.keys_flat, cut.offsets, values, len(cut.key_name))
    return _tree_frame(parent, key, depth, total, selfv, cut, min_fraction, f"training loop: {info['loop']}"), info


MSG_WORKERS_VIEW = ("These are DataLoader worker processes: they run no training loop, so there is "
                    "no step breakdown here.")
MSG_WORKER_TOP = ("The DataLoader workers spend most of their busy time in `{name}` ({where}): "
                  "{busy:.0%} of their non-idle samples{unsure}.")
MSG_FEW_SAMPLES = "; only {n} samples, so this is rough"
FEW_SAMPLES = 100  # under this many samples a share is called rough


def compute_worker_hotspots(profile, top: int = 5):
    """What the DataLoader worker processes spend their busy time on: their top
    functions by self samples, idle samples (waiting for work) left out.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``line`` (Int64: the function's hottest
    line), ``self_samples``, ``busy_fraction`` (of the workers' non-idle samples),
    ``fraction`` (of all their samples); ``attrs``: ``busy_samples``, ``worker_samples``.
    Empty when the profile has no DataLoader worker threads.
    """
    import pandas as pd

    ids = profile.thread_ids("dataloader")
    cols = ["name", "file", "line", "self_samples", "busy_fraction", "fraction"]
    out = pd.DataFrame({c: [] for c in cols})
    out.attrs.update(busy_samples=0, worker_samples=0)
    if not ids:
        return out
    fn = compute_function_table(profile, ids, by="function", include_idle=False)
    lines = compute_function_table(profile, ids, by="frame", include_idle=False)
    busy = int(fn["self_samples"].sum())
    total = int(select(profile, ids, "function").total_samples)
    fn = fn[fn["self_samples"] > 0].head(top).copy()
    hot = lines.drop_duplicates(["name", "file"]).set_index(["name", "file"])["line"]
    fn["line"] = pd.array([hot.get((n, f)) for n, f in zip(fn["name"], fn["file"])], dtype="Int64")
    fn["busy_fraction"] = fn["self_samples"] / max(busy, 1)
    fn["fraction"] = fn["self_samples"] / max(total, 1)
    fn = fn[cols].reset_index(drop=True)
    fn.attrs.update(busy_samples=busy, worker_samples=total)
    return fn


def describe_worker_top(workers) -> str:
    """One sentence naming the workers' top function (empty without workers)."""
    if workers is None or not len(workers):
        return ""
    r = workers.iloc[0]
    line = _opt_int(r["line"])
    where = f"{frame_package_path(r['file'])}" + (f":{line}" if line else "")
    n = int(workers.attrs.get("busy_samples", 0))
    # The name sits in a Markdown code span: a backtick in a stranger's profile must not end it.
    return MSG_WORKER_TOP.format(name=str(r["name"]).replace("`", "'"), where=where.replace("`", "'"),
                                 busy=float(r["busy_fraction"]),
                                 unsure=MSG_FEW_SAMPLES.format(n=n) if n < FEW_SAMPLES else "")


_STDLIB_DIR = re.compile(r"/lib/python\d+(?:\.\d+)?/")
_ABS_PATH = re.compile(r"(?<![\w.:/])/[^\s,()'\"]+")


def display_path(file) -> str:
    """A recorded file path as the dashboard shows it, without the recording machine's
    folders: the part after ``site-packages/`` (``torch/nn/modules/module.py``), after the
    standard library's folder (``threading.py``), else an absolute path's last two parts
    (``examples/digits.py``); a relative path as it is."""
    if not isinstance(file, str) or not file:
        return "" if file is None else str(file)
    f = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in f:
            return f.split(marker, 1)[1]
    m = _STDLIB_DIR.search(f)
    if m:
        return f[m.end():]
    if f.startswith("/") or re.match(r"^[A-Za-z]:/", f):
        return "/".join([p for p in f.split("/") if p][-2:])
    return f


def display_paths_in(text: str) -> str:
    """``text`` (a command line, a sentence) with every absolute path in it shortened by
    :func:`display_path`."""
    return _ABS_PATH.sub(lambda m: display_path(m.group(0)), str(text))


def frame_package_path(file: str) -> str:
    """A file path made short for a sentence: the part after site-packages, else the
    file's name."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    return file.replace("\\", "/").rsplit("/", 1)[-1]


def describe_breakdown(df, info, workers=None) -> str:
    """One sentence on the breakdown, naming the biggest phase; when the loop waits for
    data and ``workers`` (:func:`compute_worker_hotspots`) is given, what the workers do."""
    if info.get("workers_only"):
        return " ".join(x for x in (MSG_WORKERS_VIEW, describe_worker_top(workers)) if x)
    if not info.get("loop_samples"):
        return ("No DataLoader, backward, optimizer or nn.Module frames in these threads: "
                "not a training loop, or the profile missed it.")
    top = df[df["phase"] != OTHER].sort_values("fraction", ascending=False).iloc[0]
    data = float(df.loc[df["phase"] == "data", "fraction"].iloc[0])
    msg = f"{top['phase'].capitalize()} takes the most time: {top['fraction']:.0%} of the training loop."
    if data >= 0.3:
        msg += (f" {data:.0%} is spent waiting for data (DataLoader): the model waits for its "
                "input; more workers, pinned memory or a faster dataset would help.")
        top = describe_worker_top(workers)
        if top:
            msg += " " + top
    if info["loop_samples"] < FEW_SAMPLES:
        msg += f" (Only {info['loop_samples']} samples in the loop: a rough picture.)"
    return msg


def detect_data_wait(breakdown, info, profile_id: str, threshold: float = 0.3, workers=None) -> list:
    """A ``dataloader_bound`` finding when the training loop spends at least
    ``threshold`` of its samples in data loading; it names the DataLoader workers' top
    function when ``workers`` (:func:`compute_worker_hotspots`) has one."""
    from .findings import Finding

    if not info.get("loop_samples"):
        return []
    data = float(breakdown.loc[breakdown["phase"] == "data", "fraction"].iloc[0])
    if data < threshold:
        return []
    return [Finding(
        kind="dataloader_bound", step=None, rank=None, layer=None, severity="warning",
        message=(f"Profile {profile_id}: the training loop spends {data:.0%} of its time waiting for "
                 "data (DataLoader). More workers, pinned memory or a cheaper dataset would help; "
                 "see the Profiler page." + (" " + describe_worker_top(workers) if workers is not None
                                             and len(workers) else "")),
        evidence={"profile": profile_id, "data_fraction": round(data, 4), "loop": info.get("loop"),
                  "worker_top": _worker_rows(workers)[:1] or None,
                  "phases": {r.phase: round(float(r.fraction), 4) for r in breakdown.itertuples()},
                  "threshold": threshold})]


# ---------------------------------------------------------------------------- diff
def _joint(base, new, base_threads, new_threads):
    """Both selections keyed by one function table (name, file)."""
    a = select(base, base_threads, "function")
    b = select(new, new_threads, "function")
    keys: dict[tuple[str, str], int] = {}
    maps = []
    for sel in (a, b):
        m = np.array([keys.setdefault((n, f), len(keys)) for n, f in zip(sel.key_name, sel.key_file)],
                     dtype=np.int64)
        maps.append(m)
    names = [k[0] for k in keys]
    files = [k[1] for k in keys]
    return a, b, maps, names, files


def compute_profile_diff(base, new, base_threads=None, new_threads=None):
    """Functions whose share of the samples changed from ``base`` to ``new``.

    Shares are compared (not seconds), so profiles of different lengths compare fairly.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``base_self_fraction``,
    ``new_self_fraction``, ``self_delta`` (new - base), ``base_total_fraction``,
    ``new_total_fraction``, ``total_delta``, ``base_self_s``, ``new_self_s``, sorted
    by ``self_delta`` descending (what got slower first).
    """
    import pandas as pd

    tables = []
    for prof, th in ((base, base_threads), (new, new_threads)):
        t = compute_function_table(prof, th, by="function")
        tables.append(t.set_index(["name", "file"])[["self_fraction", "total_fraction", "self_s"]])
    a, b = tables
    j = a.add_suffix("_base").join(b.add_suffix("_new"), how="outer").fillna(0.0)
    df = pd.DataFrame({
        "name": [k[0] for k in j.index], "file": [k[1] for k in j.index],
        "base_self_fraction": j["self_fraction_base"].to_numpy(),
        "new_self_fraction": j["self_fraction_new"].to_numpy(),
        "base_total_fraction": j["total_fraction_base"].to_numpy(),
        "new_total_fraction": j["total_fraction_new"].to_numpy(),
        "base_self_s": j["self_s_base"].to_numpy(), "new_self_s": j["self_s_new"].to_numpy(),
    })
    df["self_delta"] = df["new_self_fraction"] - df["base_self_fraction"]
    df["total_delta"] = df["new_total_fraction"] - df["base_total_fraction"]
    cols = ["name", "file", "base_self_fraction", "new_self_fraction", "self_delta",
            "base_total_fraction", "new_total_fraction", "total_delta", "base_self_s", "new_self_s"]
    return df[cols].sort_values(["self_delta", "total_delta", "name"], ascending=[False, False, True],
                                kind="stable").reset_index(drop=True)


def compute_diff_tree(base, new, base_threads=None, new_threads=None, min_fraction: float = DEFAULT_FOLD):
    """The differential flame tree: the new profile's tree (by function), each node with
    its share in both profiles.

    Returns
    -------
    DataFrame as :func:`compute_flame_tree` (``samples``/``fraction`` of the new profile)
    plus ``base_samples``, ``base_fraction`` and ``delta`` (``fraction - base_fraction``:
    positive where the new profile spends a larger share). Nodes only in the base profile
    have no samples in the new one and are left out (see :func:`compute_profile_diff`).
    """
    a, b, maps, names, files = _joint(base, new, base_threads, new_threads)
    keys_flat = np.concatenate([maps[0][a.keys_flat] if len(a.keys_flat) else np.zeros(0, np.int64),
                                maps[1][b.keys_flat] if len(b.keys_flat) else np.zeros(0, np.int64)])
    offsets = np.concatenate([a.offsets, a.offsets[-1] + b.offsets[1:]])
    na, nb = len(a.offsets) - 1, len(b.offsets) - 1
    values = np.zeros((na + nb, 3))
    values[na:, 0] = b.samples
    values[na:, 1] = b.weight_s
    values[:na, 2] = a.samples
    parent, key, depth, total, selfv = _build_trie(keys_flat, offsets, values, len(names))
    sel = Selection(keys_flat, offsets, values[:, 0], values[:, 1], names, files, [None] * len(names),
                    b.total_samples, b.total_weight_s)
    # Fold by the new profile's samples; nodes with no new samples are dropped by it too.
    total_new = total.copy()
    tree = _tree_frame(parent, key, depth, total_new, selfv, sel, min_fraction, "all",
                       extra={"base_samples": 2})
    tree = tree[tree["samples"] > 0].reset_index(drop=True) if len(tree) > 1 else tree
    tree["base_fraction"] = tree["base_samples"] / max(a.total_samples, 1)
    tree["delta"] = tree["fraction"] - tree["base_fraction"]
    return tree


# ---------------------------------------------------------------------------- summary
def thread_rows(profile) -> list[dict]:
    """The threads as JSON-able rows: ``id, name, pid, tid, role, process, samples``."""
    out = []
    for t in profile.threads.itertuples():
        out.append({"id": int(t.thread_id), "name": t.name, "pid": _opt_int(t.pid), "tid": _opt_int(t.tid),
                    "role": t.role, "process": t.process, "samples": int(t.samples)})
    return out


def _worker_rows(workers) -> list[dict]:
    if workers is None:
        return []
    return [{"name": r.name, "file": r.file, "line": _opt_int(r.line), "samples": int(r.self_samples),
             "busy_fraction": round(float(r.busy_fraction), 6), "fraction": round(float(r.fraction), 6)}
            for r in workers.itertuples()]


def compute_idle_summary(profile, thread_ids=None, top: int = 5) -> dict:
    """Idle samples of the threads (innermost frame a blocking call, :data:`IDLE_LEAVES`):
    ``{"samples", "fraction", "top": [{name, file, line, samples, fraction}]}``."""
    sel = select(profile, thread_ids, "frame")
    idle = idle_stacks(sel)
    n = int(sel.samples[idle].sum())
    full = compute_function_table(profile, thread_ids, "frame")
    busy = compute_function_table(profile, thread_ids, "frame", include_idle=False)
    b = busy.set_index(["name", "file", "line"])["self_samples"] if len(busy) else None
    rows = []
    for r in full.itertuples():
        left = r.self_samples - (int(b.get((r.name, r.file, r.line), 0)) if b is not None else 0)
        if left > 0:
            rows.append({"name": r.name, "file": r.file, "line": _opt_int(r.line), "samples": int(left),
                         "fraction": round(left / max(sel.total_samples, 1), 6)})
        if len(rows) >= top:
            break
    return {"samples": n, "fraction": round(n / max(sel.total_samples, 1), 6), "top": rows}


def summarize_profile(profile, top: int = 20, by: str = "frame", thread_ids=None,
                      include_idle: bool = False) -> dict:
    """The ``debugkit profile-summary --json`` document of a sampled profile.

    ``top_self`` leaves idle samples out unless ``include_idle`` (``idle`` says how many
    there were and where they wait); ``top_total`` counts every sample."""
    table = compute_function_table(profile, thread_ids, by, include_idle=include_idle)
    table_all = table if include_idle else compute_function_table(profile, thread_ids, by)
    total = int(select(profile, thread_ids, by).total_samples)

    def rows(df, col, frac):
        return [{"name": r.name, "file": r.file, "line": _opt_int(r.line),
                 "samples": int(getattr(r, col)), "fraction": round(float(getattr(r, frac)), 6)}
                for r in df.head(top).itertuples()]

    by_total = table_all.sort_values(["total_samples", "self_samples", "name"], ascending=[False, False, True],
                                     kind="stable")
    main = profile.thread_ids("main") if thread_ids is None else list(thread_ids)
    bd, info = compute_step_breakdown(profile, main or None)
    workers = compute_worker_hotspots(profile)
    data = float(bd.loc[bd["phase"] == "data", "fraction"].iloc[0]) if info["loop_samples"] else 0.0
    return {
        "format": profile.format,
        "samples": total,
        "threads": thread_rows(profile),
        "duration_s": profile.meta.get("duration_s"),
        "rate_hz": profile.meta.get("rate_hz"),
        "top_self": rows(table, "self_samples", "self_fraction"),
        "top_total": rows(by_total, "total_samples", "total_fraction"),
        "step_breakdown": {
            "threads": ("main" if thread_ids is None else "selected") if main else "all",
            "loop": info["loop"],
            "phases": {r.phase: {"samples": int(r.samples), "fraction": round(float(r.fraction), 6),
                                 "seconds": round(float(r.seconds), 6)} for r in bd.itertuples()},
            "loop_samples": int(info["loop_samples"]),
            "workers_only": bool(info["workers_only"]),
            "summary": describe_breakdown(bd, info, workers if data >= 0.3 or info["workers_only"] else None),
            "waiting_for_data": data >= 0.3,
        },
        "idle": {**compute_idle_summary(profile, thread_ids), "included_in_top_self": include_idle},
        "workers": {"samples": int(workers.attrs["worker_samples"]), "busy_samples": int(workers.attrs["busy_samples"]),
                    "top": _worker_rows(workers)},
    }


MSG_COUNT_AGREES = "py-spy reported {reported:,} samples; all {shown:,} are shown."
MSG_COUNT_LAUNCHER = ("py-spy reported {reported:,} samples: {shown:,} of the profiled program are "
                      "shown, and {launcher:,} of debugkit's own launcher process (the `debugkit "
                      "profile` wrapper waiting for your script) are left out.")
MSG_COUNT_UNEXPLAINED = (" {unexplained:,} samples py-spy counted are not in the file it wrote "
                         "(samples it could not read: it reported {errors:,} errors).")
MSG_COUNT_UNEXPLAINED_EXTRA = (" The file holds {unexplained:,} samples more than py-spy reported.")


def explain_sample_count(reported, profile, errors=None) -> dict | None:
    """Reconcile the sample count py-spy printed with the one the page shows.

    ``reported`` is py-spy's own "Samples: N" (kept by ``debugkit profile`` as
    ``pyspy.samples_reported``); ``profile`` the parsed profile, whose ``meta`` records
    how many samples the file held and how many were debugkit's launcher's. Returns
    ``{reported, in_file, launcher, shown, unexplained, note}``, or None when py-spy's
    count was not recorded (an imported file)."""
    if reported is None:
        return None
    reported = int(reported)
    shown = int(profile.total_samples)
    in_file = int(profile.meta.get("samples_in_file", shown))
    launcher = int(profile.meta.get("launcher_samples", in_file - shown))
    unexplained = reported - in_file
    if launcher:
        note = MSG_COUNT_LAUNCHER.format(reported=reported, shown=shown, launcher=launcher)
    else:
        note = MSG_COUNT_AGREES.format(reported=reported, shown=shown) if not unexplained else \
            f"py-spy reported {reported:,} samples; {shown:,} are shown."
    if unexplained > 0:
        note += MSG_COUNT_UNEXPLAINED.format(unexplained=unexplained, errors=int(errors or 0))
    elif unexplained < 0:
        note += MSG_COUNT_UNEXPLAINED_EXTRA.format(unexplained=-unexplained)
    return {"reported": reported, "in_file": in_file, "launcher": launcher, "shown": shown,
            "unexplained": unexplained, "note": note}
