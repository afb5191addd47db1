"""One trace summarized as JSON-able rows (``debugkit profile --summary``).
"""

from __future__ import annotations

from ...io.chrome_trace import GPU_CATS
from .events import _x
from .gpu_idle import GPU_IDLE_DEFINITION, compute_gpu_idle, describe_gpu_idle, trace_window
from .operators import compute_kernel_table, compute_operator_table
from .steps import summarize_step_phases
from .timeline import lane_names


def trace_threads(trace) -> list[dict]:
    """Lanes as JSON-able rows: ``pid, tid, name, kind (cpu|gpu), events``."""
    x = _x(trace)
    names = lane_names(trace)
    gpu = x["cat"].isin(list(GPU_CATS))
    out = []
    for (pid, tid), g in x.groupby(["pid", "tid"], observed=True, sort=False):
        out.append({"pid": str(pid), "tid": str(tid), "name": names[(str(pid), str(tid))],
                    "kind": "gpu" if gpu[g.index].any() else "cpu", "events": int(len(g))})
    return sorted(out, key=lambda r: (r["kind"], -r["events"]))


def summarize_trace(trace, top: int = 20, include_last_step: bool = False) -> dict:
    """The ``debugkit profile-summary --json`` document of a chrome trace."""
    ops = compute_operator_table(trace)
    gpu = compute_gpu_idle(trace, include_last_step=include_last_step)
    kernels = compute_kernel_table(trace)
    w0, w1 = trace_window(trace)

    def op_rows(df):
        return [{"name": r.name, "calls": int(r.calls), "self_cpu_us": round(r.self_cpu_ms * 1e3, 3),
                 "cpu_total_us": round(r.cpu_total_ms * 1e3, 3), "self_cuda_us": round(r.self_cuda_ms * 1e3, 3),
                 "cuda_total_us": round(r.cuda_total_ms * 1e3, 3), "fraction": round(float(r.self_cpu_fraction), 6)}
                for r in df.head(top).itertuples()]

    by_total = ops.sort_values(["cpu_total_ms", "name"], ascending=[False, True], kind="stable") if len(ops) else ops
    return {
        "format": "chrome-trace",
        "events": int(trace.n_events),
        "threads": trace_threads(trace),
        "window_ms": round((w1 - w0) / 1e3, 3),
        "step_phases": summarize_step_phases(trace),
        "top_self": op_rows(ops),
        "top_total": op_rows(by_total),
        "gpu": {"devices": gpu.to_dict("records"),
                "idle_fraction": None if not len(gpu) else round(float(gpu["idle_fraction"].mean()), 6),
                "idle_definition": GPU_IDLE_DEFINITION if len(gpu) else None,
                "idle_note": describe_gpu_idle(gpu) or None,
                "last_step_dropped": bool(len(gpu) and gpu["last_step_dropped"].all()),
                "top_kernels": [{"name": r.name, "calls": int(r.calls), "total_us": round(r.total_ms * 1e3, 3),
                                 "fraction": round(float(r.gpu_fraction), 6)}
                                for r in kernels.head(top).itertuples()]},
    }
