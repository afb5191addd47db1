"""Process-group facts of the current process: rank, world size, local rank, node, host.

Read from an initialised ``torch.distributed`` default group when there is one, and
from the environment variables ``torchrun`` (torchelastic) sets otherwise, so a
Recorder created before ``init_process_group`` still knows its rank.
"""

from __future__ import annotations

import os
import socket


def _env_int(name: str, default: int | None) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def process_group_info() -> dict:
    """This process's place in the job.

    Returns
    -------
    dict with ``rank``, ``world_size``, ``local_rank``, ``local_world_size``,
    ``node_rank`` (torchrun's ``GROUP_RANK``; None when not launched by torchrun),
    ``backend`` (None when no process group is initialised), ``host``, ``pid``,
    ``master_addr``, ``master_port`` and ``torchelastic_run_id``.
    """
    world = _env_int("WORLD_SIZE", 1)
    info = {
        "rank": _env_int("RANK", 0),
        "world_size": world,
        "local_rank": _env_int("LOCAL_RANK", 0),
        "local_world_size": _env_int("LOCAL_WORLD_SIZE", world),
        "node_rank": _env_int("GROUP_RANK", None),
        "backend": None,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": _env_int("MASTER_PORT", None),
        "torchelastic_run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
    }
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            info["rank"] = dist.get_rank()
            info["world_size"] = dist.get_world_size()
            info["backend"] = str(dist.get_backend())
    except (ImportError, RuntimeError, ValueError):
        pass
    return info
