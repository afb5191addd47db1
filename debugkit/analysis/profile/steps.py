"""The step breakdown: each sample's phase of the training step (data, forward, backward,
optimizer, other) from the frames on its stack, and the flame tree of the loop alone.
"""

from __future__ import annotations

import re

import numpy as np

from .flame import DEFAULT_FOLD, _build_trie, _tree_frame
from .paths import display_paths_in
from .selection import Selection, _stack_of_pos, _unique, select

STEP_PHASES = ("data", "forward", "backward", "optimizer")
OTHER = "other"


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


def compute_step_phases(profile, thread_ids=None):
    """:func:`compute_step_breakdown`'s table and info, with what
    :func:`compute_loop_flame_tree` needs of them, so a caller that wants both computes
    the breakdown once (``phases=``).

    Returns
    -------
    (DataFrame, dict, ndarray of bool, (str, str) or None)
        The breakdown table and info; per stack of the threads' selection, whether it is
        inside the training loop; the loop function's ``(name, file)`` (None: no loop).
    """
    return _step_breakdown(profile, thread_ids)


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
    # The loop: keys present in >= 95 % of phase samples, deepest first, counted only
    # where they stand above the stack's outermost phase frame: a function a phase calls
    # (the DataLoader's Queue.get) is inside the phase, not the loop that calls it, even
    # when every sample of a data-starved run waits in it.
    n_keys = len(sel.key_name)
    depth_pos = np.arange(len(sel.keys_flat)) - sel.offsets[stack_of]
    is_phase_frame = key_rank[sel.keys_flat] < len(STEP_RULES)
    first_phase = np.full(n_stacks, np.iinfo(np.int64).max)
    np.minimum.at(first_phase, stack_of[is_phase_frame], depth_pos[is_phase_frame])
    outer = depth_pos < first_phase[stack_of]
    pair = _unique(stack_of[outer] * n_keys + sel.keys_flat[outer])
    ps, pk = pair // n_keys, pair % n_keys
    w = np.where(in_phase[ps], sel.samples[ps], 0)
    cover = np.bincount(pk, weights=w, minlength=n_keys)
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


def compute_loop_flame_tree(profile, thread_ids=None, by: str = "function", min_fraction: float = DEFAULT_FOLD,
                            phases=None):
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

    ``phases``: :func:`compute_step_phases` of the same profile and threads, when the
    caller has it (the breakdown is not computed again).
    """
    _, info, inside, loop_fn = _step_breakdown(profile, thread_ids) if phases is None else phases
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
    # the root names the loop without the recording machine's folders (as the page's caption)
    return _tree_frame(parent, key, depth, total, selfv, cut, min_fraction,
                       f"training loop: {display_paths_in(info['loop'])}"), info
