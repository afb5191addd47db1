"""Replay a captured failing step and point at its cause.

``replay(run, failure_id)`` checks the capture's files and code, runs the step again in
a child process (:mod:`debugkit.replay.child`, under a timeout and a memory cap, with
probes and anomaly detection on), and returns the report built by
:mod:`debugkit.replay.report`. When the failure happened on CUDA and the replay ran on
CUDA, the step is replayed on the CPU too (the "CPU cross-check"), whose kernels raise
readable errors where CUDA's raise ``device-side assert triggered``.

This package imports neither torch nor streamlit; the child does the torch work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from .._fsutil import in_debugkit
from ..child_harness import DEFAULT_TIMEOUT_S, cuda_possible, default_memory_cap, run_child
from ..errors import CodeRefusedError, InvalidInputError, ReplayError
from ..location import as_path, local_copy
from .code import CodeIdentity, identify_capture, require_runnable
from .loading import factory_kwargs, select_failure, verify_files
from .policy import check_plain_kwargs, cli_code_roots
from .report import build_report, crash_of, is_request, merge_partial

__all__ = ["replay", "plan_identities", "plan_cross_check", "CodeRefusedError", "DEVICES", "DEFAULT_TIMEOUT_S"]

DEVICES = ("auto", "cpu", "cuda")
MSG_BAD_DEVICE = "device {value!r}: expected one of auto, cpu, cuda"
MSG_BAD_TIMEOUT = "timeout {value!r}: expected a number of seconds > 0"
MSG_BAD_MEMORY = "memory cap {value!r}: expected a number of MiB >= 256"
MSG_NO_CHECKPOINT = "checkpoint {value!r}: this run has no checkpoint at that step (it has: {have})"
MSG_BAD_CHECKPOINT = "checkpoint at step {value}: {problem}; pick another checkpoint"
MSG_SETUP_FAILED = "{fid}: the replay could not start the step: {type}: {message}"


def plan_identities(run, record: dict, search_path: list[str] | None = None,
                    code_roots: list | None = None, hint: str | None = None,
                    import_roots=()) -> list[CodeIdentity]:
    """The code a replay of ``record`` would run, resolved on this machine.

    ``code_roots``: the folders the viewer allows code from (default: the command
    line's, :func:`debugkit.replay.policy.cli_code_roots`); ``import_roots``: folders
    searched for the capture's modules first (``--code-root``).
    """
    return identify_capture(record, run.manifest, search_path, code_roots, hint,
                            [os.path.abspath(p) for p in import_roots])


def plan_cross_check(original_device: str | None, replay_device: str | None) -> str | None:
    """What the CPU cross-check does for a failure on ``original_device`` replayed on
    ``replay_device``: ``"cpu"`` (replay once more on the CPU), ``"replayed_on_cpu"``
    (a CUDA failure already replayed on the CPU: nothing more to run, but say so) or
    None (the failure was not on CUDA)."""
    if not str(original_device or "").startswith("cuda"):
        return None
    return "cpu" if str(replay_device or "").startswith("cuda") else "replayed_on_cpu"


def _validate(device, timeout_s, memory_mb):
    if device not in DEVICES:
        raise InvalidInputError(MSG_BAD_DEVICE.format(value=device))
    try:
        t = float(timeout_s)
    except (TypeError, ValueError):
        raise InvalidInputError(MSG_BAD_TIMEOUT.format(value=timeout_s)) from None
    if not t > 0 or t != t or t == float("inf"):
        raise InvalidInputError(MSG_BAD_TIMEOUT.format(value=timeout_s))
    if memory_mb is not None:
        try:
            m = float(memory_mb)
        except (TypeError, ValueError):
            raise InvalidInputError(MSG_BAD_MEMORY.format(value=memory_mb)) from None
        if not m >= 256:
            raise InvalidInputError(MSG_BAD_MEMORY.format(value=memory_mb))
    return t


def _one(run, record, idents, parts, *, device, allow_code, timeout_s, cap, progress, role,
         code_roots, state_file=None):

    # Every path crosses into a child with another working directory: make them absolute.
    roots = [i.search_root for i in idents if i.search_root]
    req = {
        "code_roots": [str(r) for r in code_roots],
        "state_file": os.path.abspath(state_file) if state_file else None,
        "failure_dir": os.path.abspath(record["path"]), "device": device,
        "sys_path": list(dict.fromkeys(roots + [os.getcwd()])),
        "original_device": record.get("device"),
        "allow_code": allow_code, "code": [i.to_dict() for i in idents],
        "factory_kwargs": check_plain_kwargs(factory_kwargs(record, run.manifest), record["path"]),
        "num_classes": record.get("num_classes", run.manifest.get("num_classes")),
        "model_training": record.get("model_training", not is_request(record)),
        "parts": parts,
        # a captured request: call the model as the service did, forward only
        "request": is_request(record), "call": record.get("call"),
        "weights_sha256": (record.get("weights_sha256") or run.manifest.get("weights_sha256"))
        if is_request(record) else None,
    }
    may_cuda = device != "cpu" and cuda_possible()
    env = {"CUDA_LAUNCH_BLOCKING": "1"} if device != "cpu" else {}
    root = next((i.search_root for i in idents if i.role == "model_factory"), None)

    def on_progress(msg):
        if progress is not None:
            progress(f"{role}: {msg}" if role != "replay" else msg)

    outcome = run_child(req, timeout_s=timeout_s, memory_cap_bytes=None if may_cuda else cap,
                        on_progress=on_progress, cwd=root, extra_env=env)
    if outcome.status == "refused":
        raise ReplayError(outcome.message)
    if outcome.status == "error":
        import re

        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', outcome.traceback or "")
        user = [f for f in frames if not in_debugkit(f[0])]
        where = f" (at {user[-1][0]}:{user[-1][1]} in {user[-1][2]})" if user else ""
        raise ReplayError(MSG_SETUP_FAILED.format(fid=record["id"], type=outcome.error_type,
                                                  message=(outcome.message or "").splitlines()[0]
                                                  if outcome.message else "") + where)
    raw = merge_partial(outcome.raw, outcome.partial)
    crash = crash_of(outcome)
    notes = []
    err = ((raw or {}).get("outcome") or {}).get("error") or {}
    capped = None if may_cuda else cap
    if capped and (err.get("type") == "MemoryError" or "can't allocate memory" in err.get("message", "")):
        notes.append(f"the replay ran under a memory cap of {capped >> 20} MiB (address space); "
                     "raise it with --memory-mb if the step needs more")
    if outcome.status in ("crashed", "timeout") and outcome.log_tail.strip():
        notes.append("child output (last lines): " + outcome.log_tail.strip()[-1500:])
    if outcome.status in ("crashed", "timeout") and outcome.stack.strip():
        notes.append("Python stack of the replay process: " + outcome.stack.strip()[-3000:])
    return raw, crash, notes


def replay(run, failure_id: str | None = None, *, device: str = "auto", allow_code: bool = False,
           timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: float | None = None,
           progress: Callable[[str], None] | None = None,
           search_path: list[str] | None = None, cross_check: bool = True,
           checkpoint: int | None = None, code_roots: list | None = None,
           code_hint: str | None = None, import_roots=(), refetch: bool = True) -> dict:
    """Replay one captured failure and return the report.

    Parameters
    ----------
    run : Run or path
        The run (or its directory / .zip).
    failure_id : str, optional
        Which capture (default: the run's first).
    device : {"auto", "cpu", "cuda"}
        ``auto``: CUDA where available, else the CPU.
    allow_code : bool
        Run the capture's code even when its file changed since the run or has no
        recorded hash. Code that is missing, not defined in its module, outside
        ``code_roots``, or inside debugkit, the standard library or an installed
        package never runs (:mod:`debugkit.replay.policy`).
    timeout_s : float
        Wall-clock limit of each child process (the replay, and the CPU cross-check).
    memory_mb : float, optional
        Address-space cap of a CPU replay (default: half the machine's memory).
    progress : callable, optional
        Called with a short message at each stage.
    search_path : list of str, optional
        Where to look for the capture's modules (default: ``sys.path``).
    checkpoint : int, optional
        Replay with the weights of the run's checkpoint at this step (``rec.checkpoint()``,
        verified by hash) instead of the captured ones: does the batch fail with those
        weights too? The report's ``weights`` says which were used.
    code_roots : list of path, optional
        The folders whose code may run (the viewer's decision, never the run's).
        Default: :func:`debugkit.replay.policy.cli_code_roots` (``$DEBUGKIT_CODE_ROOTS``,
        else the working directory).
    code_hint : str, optional
        How the viewer allows more folders (ends a refusal's message).
    import_roots : list of path, optional
        Folders searched first for the capture's modules, here and on the replay
        process's ``sys.path`` (the command line's ``--code-root``, which allows them too).
    refetch : bool
        For a failure raised while the DataLoader fetched or collated a batch: rebuild the
        dataset with the capture's ``dataset_factory`` (verified and allowed like a model
        factory) and fetch the batch's indices again (:mod:`debugkit.replay.dataload`).
        False collates the captured samples only (no code of the run runs).

    Raises
    ------
    ReplayError
        No capture, a corrupt capture, code that may not run, no CUDA for
        ``device="cuda"``, or a step that could not be set up (the factory raised).
    """
    from ..io.run import Run, open_run

    t = _validate(device, timeout_s, memory_mb)
    if not isinstance(run, Run):
        run = open_run(run)
    record = select_failure(run, failure_id)
    with contextlib.ExitStack() as stack:
        # a run in an object store: the child process replays a local copy of the capture
        # (and of the checkpoint's weights); a local run is used in place
        record = dict(record, path=str(stack.enter_context(local_copy(record["path"]))))
        if record.get("kind") == "data_loading":  # no model step: collate the samples again
            from .dataload import replay_data_loading

            verify_files(record)
            cap = int(memory_mb * (1 << 20)) if memory_mb is not None else default_memory_cap()
            return replay_data_loading(record, timeout_s=t, cap=cap, progress=progress,
                                       code_roots=code_roots, allow_code=allow_code,
                                       search_path=search_path, import_roots=import_roots,
                                       hint=code_hint, refetch=refetch)
        state_file = None
        if checkpoint is not None:
            state_file = str(stack.enter_context(local_copy(checkpoint_weights(run, checkpoint))))
        return _replay(run, record, t, device=device, allow_code=allow_code,
                       memory_mb=memory_mb, progress=progress, search_path=search_path,
                       cross_check=cross_check, checkpoint=checkpoint, code_roots=code_roots,
                       code_hint=code_hint, state_file=state_file, import_roots=import_roots)


def _replay(run, record, t, *, device, allow_code, memory_mb, progress, search_path,
            cross_check, checkpoint, code_roots, code_hint, state_file, import_roots) -> dict:
    parts = verify_files(record)
    roots = cli_code_roots() if code_roots is None else list(code_roots)
    idents = plan_identities(run, record, search_path, roots, code_hint, import_roots)
    require_runnable(idents, allow_code)
    check_plain_kwargs(factory_kwargs(record, run.manifest), record["path"])
    cap = int(memory_mb * (1 << 20)) if memory_mb is not None else default_memory_cap()
    code = [i.to_dict() for i in idents]
    weights = {"from": "capture"}
    if checkpoint is not None:
        weights = {"from": "checkpoint", "step": int(checkpoint), "path": state_file}
    kw = dict(allow_code=allow_code, timeout_s=t, cap=cap, progress=progress, state_file=state_file,
              code_roots=roots)
    if progress:
        what = (f"request {record.get('request', record.get('step'))}" if is_request(record)
                else f"step {record.get('step')}")
        progress(f"Replaying {record['id']} ({what}, originally on "
                 f"{record.get('device') or 'an unknown device'})")
    raw, crash, notes = _one(run, record, idents, parts, device=device, role="replay", **kw)
    used = (raw or {}).get("device") or ("cpu" if device == "cpu" else device)
    orig_dev = str(record.get("device") or "")
    cross = None
    if state_file is not None:
        notes.append(f"the replay used the weights of the checkpoint at step {checkpoint}, not the "
                     f"captured ones (captured at step {record.get('step')})")
    elif not parts.get("model") and is_request(record):
        notes.append("the request capture holds no weights: the replay used the model the factory "
                     "builds" + (" (checked against the served model's weights_sha256: see "
                                 "captured_state)" if record.get("weights_sha256")
                                 or run.manifest.get("weights_sha256") else ""))
    elif not parts.get("model"):
        notes.append("the model state was not captured: the replay used freshly initialised weights "
                     "(data checks such as labels and embedding indices do not depend on them)")
    if is_request(record) and record.get("signature"):
        notes.append(f"request {record.get('request', record.get('step'))}: inputs "
                     f"{record['signature']}")
    if record.get("optimizer_stepped") and state_file is None:
        notes.append("the optimizer had already stepped when the failure was captured: the captured "
                     "weights are the updated ones, so the replayed forward pass may differ")
    if not parts.get("rng"):
        notes.append("no RNG state in the capture: dropout and other random ops will differ")
    plan = plan_cross_check(orig_dev, used)
    if plan == "cpu" and cross_check:
        if progress:
            progress("CPU cross-check: replaying on the CPU, whose kernels raise readable errors")
        c_raw, c_crash, c_notes = _one(run, record, idents, parts, device="cpu", role="CPU cross-check", **kw)
        cross = build_report(record, c_raw, device="cpu", crash=c_crash, notes=c_notes)
        cross.pop("cross_check", None)
        cross.pop("code", None)
    elif plan == "replayed_on_cpu":
        notes.append(f"the {'request ran' if is_request(record) else 'failure happened'} on {orig_dev}; this replay ran on the CPU, whose kernels "
                     "raise readable errors where CUDA's raise 'device-side assert triggered' (so the "
                     "error type may differ from the original)")
    report = build_report(record, raw, device=used, crash=crash, code=code, cross_check=cross,
                          notes=notes)
    report["weights"] = weights
    return report


def checkpoint_weights(run, step) -> str:
    """The verified ``model.safetensors`` of the run's checkpoint at ``step`` (``run``: a
    Run or a run directory); a :class:`ReplayError` saying why when there is none."""
    from ..checkpoints import DIR, read_index, verify

    if not hasattr(run, "path"):
        from ..io.run import open_run

        run = open_run(run)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"checkpoint {step!r}: expected a step (an integer >= 0)")
    try:
        entries = read_index(run.path)
    except (TypeError, OSError) as exc:
        raise ReplayError(f"checkpoint {step}: the run's checkpoints cannot be read ({exc})") from None
    match = [e for e in entries if e["step"] == step]
    if not match:
        raise ReplayError(MSG_NO_CHECKPOINT.format(
            value=step, have=", ".join(str(e["step"]) for e in entries) or "none"))
    problem = verify(run.path, match[0])
    if problem:
        raise ReplayError(MSG_BAD_CHECKPOINT.format(value=step, problem=problem))
    return str(as_path(run.path) / DIR / str(match[0]["dir"]) / "model.safetensors")
