"""``python -m debugkit.recorder._pipcheck_child RUN_DIR``: record ``pip check`` in a run.

Started by the Recorder (rank 0) as a detached process when a run starts, so the check
neither slows the first step nor dies with a short training script that exits before
pip finishes (a daemon thread would). Writes ``env.json`` (``{"pip_check": ...}``)
atomically; any failure is silent (environment facts are best effort).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from .._fsutil import atomic_write_json
    from ..format import ENV_FILE
    from .env import pip_check

    run_dir = Path(argv[0])
    result = pip_check()
    path = run_dir / ENV_FILE
    try:
        env = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        env = {}
    env = env if isinstance(env, dict) else {}
    env["pip_check"] = result
    if run_dir.is_dir():
        atomic_write_json(path, env)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:  # never a traceback in the user's terminal from a background check
        sys.exit(1)
