"""The peers debugkit is measured against, as optional bench variants.

W&B (offline: ``run.log`` of the norms, and ``run.watch(log="gradients", log_freq=1)``),
MLflow (``log_batch`` into a file store and into a sqlite store) and Aim (``Run.track``).
None is a dependency of debugkit: a peer that is not installed is skipped with a note
(``pip install -r bench/requirements-peers.txt`` to measure them). TensorBoard comes with
torch's requirements and is always measured.

Each logger variant is given the same fused gradient norms (``_foreach_norm`` + ``tolist``,
the floor any logger pays) and the loss, every step, so that what differs is the logging.

:class:`Background` attributes the CPU time of threads and child processes to the variant
whose set-up started them (W&B's ``wandb-core`` service, TensorBoard's and debugkit's
writer threads, ...), read from ``/proc``.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

PEERS = {  # variant: (module that must be importable, what it runs)
    "wandb_log": ("wandb", "W&B offline, run.log of the norms and the loss"),
    "wandb_watch": ("wandb", "W&B offline, run.watch(log='gradients', log_freq=1) + run.log(loss)"),
    "mlflow_file": ("mlflow", "MLflow log_batch, file store"),
    "mlflow_sqlite": ("mlflow", "MLflow log_batch, sqlite store"),
    "aim": ("aim", "Aim Run.track of the norms and the loss"),
}


def available(name: str) -> bool:
    return importlib.util.find_spec(PEERS[name][0]) is not None


def missing_note(names) -> list[str]:
    return [f"{n}: skipped, {PEERS[n][0]} is not installed "
            "(pip install -r bench/requirements-peers.txt)" for n in names if not available(n)]


# ------------------------------------------------------------------- loggers (training)
class Logger:
    """One peer's run: ``log(step, names, norms, loss_tensor)`` every step, ``close()``."""

    def log(self, step, names, norms, loss):
        raise NotImplementedError

    def close(self):
        pass


class _Wandb(Logger):
    def __init__(self, d: Path, model=None, watch=False):
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(mode="offline", dir=str(d), project="dk-bench",
                              reinit="create_new", settings=wandb.Settings(console="off"))
        self.watch = watch
        if watch:
            wandb.run = self.run  # see log()
            self.run.watch(model, log="gradients", log_freq=1)

    def log(self, step, names, norms, loss):
        if self.watch:
            import wandb

            # watch()'s gradient hooks log through the global wandb.run, which a program
            # with one run has; this one has two (reinit="create_new"), so it is set here.
            wandb.run = self.run
            self.run.log({"loss": loss.item()}, step=step)
        else:
            row = dict(zip(names, norms))
            row["loss"] = loss.item()
            self.run.log(row, step=step)

    def close(self):
        self.run.finish()


class _Mlflow(Logger):
    def __init__(self, d: Path, store: str):
        from mlflow.tracking import MlflowClient

        d.mkdir(parents=True, exist_ok=True)
        # MLflow 3 refuses new file stores ("maintenance mode") unless this is set.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        uri = f"sqlite:///{d / 'mlflow.db'}" if store == "sqlite" else (d / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.create_experiment("dk-bench")
        self.run_id = self.client.create_run(exp).info.run_id

    def log(self, step, names, norms, loss):
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(n, v, ts, step) for n, v in zip(names, norms)]
        ms.append(Metric("loss", loss.item(), ts, step))
        self.client.log_batch(self.run_id, metrics=ms, synchronous=True)

    def close(self):
        self.client.set_terminated(self.run_id)


class _Aim(Logger):
    def __init__(self, d: Path):
        from aim import Run

        d.mkdir(parents=True, exist_ok=True)
        self.run = Run(repo=str(d), experiment="dk-bench", system_tracking_interval=None,
                       capture_terminal_logs=False)

    def log(self, step, names, norms, loss):
        row = dict(zip(names, norms))
        row["loss"] = loss.item()
        self.run.track(row, step=step)

    def close(self):
        self.run.close()


def make_logger(name: str, d: Path, model) -> Logger:
    if name == "wandb_log":
        return _Wandb(d)
    if name == "wandb_watch":
        return _Wandb(d, model, watch=True)
    if name == "mlflow_file":
        return _Mlflow(d, "file")
    if name == "mlflow_sqlite":
        return _Mlflow(d, "sqlite")
    if name == "aim":
        return _Aim(d)
    raise ValueError(name)


# ------------------------------------------------------------------- background CPU
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_cpu(path: str, children: bool = False) -> float | None:
    try:
        with open(path, "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    ticks = int(rest[11]) + int(rest[12]) + ((int(rest[13]) + int(rest[14])) if children else 0)
    return ticks / _TICK


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pp = _ppid(int(name))
            if pp is not None:
                kids.setdefault(pp, []).append(int(name))
    out, todo = set(), [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


class Background:
    """CPU seconds of the threads and child processes each variant's set-up started."""

    def __init__(self):
        self.main = str(os.getpid())  # the training thread's tid is the pid
        self.owner_threads: dict[str, set[str]] = {}
        self.owner_procs: dict[str, set[int]] = {}
        self._before: tuple[set[str], set[int]] | None = None
        self.enabled = os.path.isdir("/proc/self/task")

    def _now(self):
        return set(os.listdir("/proc/self/task")), _descendants(os.getpid())

    def begin(self, name: str) -> None:
        """Call before variant ``name``'s set-up..."""
        if self.enabled:
            self._before = self._now()

    def end(self, name: str) -> None:
        """...and after it (and its warm-up steps): what appeared is ``name``'s."""
        if not self.enabled or self._before is None:
            return
        t, p = self._now()
        self.owner_threads.setdefault(name, set()).update(t - self._before[0] - {self.main})
        self.owner_procs.setdefault(name, set()).update(p - self._before[1])

    def snapshot(self) -> dict[str, float]:
        """CPU seconds so far of each variant's background threads and processes."""
        out = {}
        for name in set(self.owner_threads) | set(self.owner_procs):
            s = 0.0
            for tid in self.owner_threads.get(name, ()):
                s += _stat_cpu(f"/proc/self/task/{tid}/stat") or 0.0
            for pid in self.owner_procs.get(name, ()):
                s += _stat_cpu(f"/proc/{pid}/stat", children=True) or 0.0
            out[name] = s
        return out
