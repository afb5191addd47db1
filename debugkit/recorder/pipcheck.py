"""The start-of-run ``pip check``, kept off the training's back.

``pip check`` costs ~1.4 s of CPU; on a small machine, run at the start of training, it
doubled the step time of a short run. So the Recorder (rank 0):

- looks the environment's fingerprint (:func:`fingerprint`) up in a cache of earlier
  results (``<cache_dir>/pip-check/<fingerprint>.json``) and, on a hit, records that
  result at once (``"cached": true``) and runs nothing;
- otherwise starts the check only after the first :data:`AFTER_STEPS` steps (or at close,
  for a shorter run), in a detached process that drops to nice 19 and the idle I/O class
  before it runs pip (:mod:`._pipcheck_child`), and that stores its result in the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from .. import format as fmt
from .._fsutil import atomic_write_json, cache_dir, read_json

AFTER_STEPS = 10  # steps that run before the check starts (a shorter run starts it at close)
_CHILD = Path(__file__).resolve().with_name("_pipcheck_child.py")


def fingerprint(distributions: dict) -> str:
    """What a ``pip check`` result depends on: the interpreter, every installed
    distribution and version (as :func:`debugkit.recorder.env.all_distributions` lists
    them), and each ``sys.path`` folder's modification time (changed by any install or
    removal there, also of the same version)."""
    stamps = []
    for entry in sys.path:
        try:
            stamps.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            continue
    blob = json.dumps([sys.executable, sys.version, sorted(distributions.items()), stamps])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class PipCheck:
    """The pip check of one run: recorded from the cache now, or started later by :meth:`start`.

    Parameters
    ----------
    run_dir : Path
        The run (its ``env.json`` gets ``pip_check``).
    distributions : dict
        ``{name: version}`` of the environment (the manifest's ``env["distributions"]``).
    """

    def __init__(self, run_dir: Path, distributions: dict):
        self.run_dir = Path(run_dir).resolve()
        self.due = False
        self.process: subprocess.Popen | None = None
        self.cache_file: Path | None
        try:
            self.cache_file = cache_dir() / "pip-check" / f"{fingerprint(distributions)}.json"
        except OSError:  # no writable cache: check every run
            self.cache_file = None
        cached = self._cached()
        if cached is not None:
            self._record(cached)
        else:
            self.due = True

    def _cached(self) -> dict | None:
        if self.cache_file is None or not self.cache_file.is_file():
            return None
        try:
            res = read_json(self.cache_file)
        except (OSError, ValueError):
            return None
        if not isinstance(res, dict) or not isinstance(res.get("ok"), bool) \
                or not isinstance(res.get("conflicts"), list):
            return None
        return {**res, "cached": True}

    def _record(self, result: dict) -> None:
        path = self.run_dir / fmt.ENV_FILE
        try:
            env = read_json(path) if path.is_file() else {}
        except (OSError, ValueError):
            env = {}
        env = env if isinstance(env, dict) else {}
        env["pip_check"] = result
        try:
            atomic_write_json(path, env)
        except OSError:  # environment facts are best effort, never break training
            pass

    def start(self) -> None:
        """Start the check in a detached, low-priority process (once)."""
        if not self.due:
            return
        self.due = False
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", str(_CHILD), str(self.run_dir),
                 str(self.cache_file) if self.cache_file is not None else ""],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except OSError:  # environment facts are best effort, never break training
            pass
