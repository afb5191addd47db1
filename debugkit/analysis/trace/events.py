"""What the trace analyses key on: the event categories and the name prefixes of
torch.profiler's annotations, and the duration events of a trace.
"""

from __future__ import annotations

CPU_OP = "cpu_op"
# What torch's key_averages() lists: operators and record_function annotations.
OPERATOR_CATS = ("cpu_op", "user_annotation")
STEP_PREFIX = "ProfilerStep#"
# Step phases from torch.profiler's own annotations and autograd's event names.
DATA_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})


def _x(trace):
    ev = trace.events
    return ev[ev["ph"] == "X"]
