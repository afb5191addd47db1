"""Read py-spy raw / collapsed stacks (``frame;frame;... COUNT`` lines, ``py-spy record
--format raw``) into a :class:`~debugkit.io.profile_types.SampledProfile`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ProfileFileError
from .profile_types import SampledProfile, _Builder, _parse_frame_text, _split_pseudo
from .profiles import MSG_EMPTY_FILE, read_bytes

MSG_RAW_LINE = "{path}: line {line}: expected 'frame;frame;... COUNT', got {text!r}"


# ---------------------------------------------------------------------------- raw / collapsed
def read_collapsed(path: str | os.PathLike, data: bytes | None = None, *,
                   drop_pids=(), keep_pids=()) -> SampledProfile:
    """Read raw/collapsed stacks (``py-spy record --format raw``, Brendan Gregg's folded
    format): one ``frame;frame;...;leaf COUNT`` line per unique stack, root first.

    With py-spy's ``--subprocesses``/``--threads``, leading ``process PID:"cmd"`` and
    ``thread (TID): name`` frames give each stack's process and thread; without them the
    whole file is one thread. Counts are samples; time is samples / rate, unknown here,
    so ``weight_s`` holds samples.
    """
    data = read_bytes(path) if data is None else data
    if not data.strip():
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    b = _Builder()
    b.drop_pids = tuple(drop_pids)
    b.keep_pids = tuple(keep_pids)
    frame_cache: dict[str, int] = {}
    text = data.decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        stack_text, sep, count_text = line.rpartition(" ")
        if not sep or not count_text.isdigit() or not stack_text:
            raise ProfileFileError(MSG_RAW_LINE.format(path=path, line=lineno, text=line[:120]))
        count = int(count_text)
        chain, thread, rest = _split_pseudo(stack_text)
        real = rest.split(";") if rest else []
        pid = chain[-1][0] if chain else None
        tid = thread[0] if thread else None
        key = (tuple(p for p, _ in chain), tid)
        th = b.thread(key, pid=pid, tid=tid, name=thread[1] if thread else "",
                      process=chain[-1][1] if chain else "", chain=[p for p, _ in chain],
                      chain_cmds=chain)
        ids = []
        for ft in real:
            fid = frame_cache.get(ft)
            if fid is None:
                fid = frame_cache[ft] = b.frame(*_parse_frame_text(ft))
            ids.append(fid)
        b.add(th, b.stack(tuple(ids)), count, float(count))
    meta = {"exporter": "raw", "name": Path(str(path)).name, "unit": "samples",
            "duration_s": None, "rate_hz": None}
    return b.build("raw", meta, path)
