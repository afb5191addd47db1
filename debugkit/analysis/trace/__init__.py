"""Analyses of torch.profiler chrome traces: the operator table, kernels, GPU idle time,
a per-thread/stream timeline and the step breakdown.

Pure functions of a :class:`~debugkit.io.chrome_trace.ChromeTrace`. Times in the trace
are microseconds; tables report milliseconds (``_ms``) or microseconds (``_us``) as
their column names say.

Conventions follow torch.profiler's ``key_averages()``: an operator's *self* CPU time
is its duration minus that of the events directly nested in it on the same thread; its
*self* CUDA time is the device time of the kernels it launched itself (a kernel's
``correlation`` id names the ``cudaLaunchKernel`` runtime call, whose innermost enclosing
``cpu_op`` launched it), and its total CUDA time adds the kernels of the operators
nested in it.

Modules (the names callers use are re-exported here, so ``from debugkit.analysis.trace
import compute_gpu_idle`` keeps working):

- :mod:`.events` -- the event categories and name prefixes the analyses key on
- :mod:`.operators` -- ``compute_nesting``, ``compute_operator_table``, ``compute_kernel_table``
- :mod:`.gpu_idle` -- ``trace_window``, ``compute_gpu_idle`` (HTA's definition), ``describe_gpu_idle``
- :mod:`.timeline` -- ``lane_names``, ``compute_trace_timeline``
- :mod:`.steps` -- ``compute_trace_steps``, ``compute_annotated_steps``, ``summarize_step_phases``
- :mod:`.summary` -- ``trace_threads``, ``summarize_trace`` (``debugkit profile --summary``)
"""

from __future__ import annotations

from .events import (
    BACKWARD_PREFIX,
    CPU_OP,
    DATA_PREFIX,
    OPERATOR_CATS,
    OPTIMIZER_PREFIXES,
    RUNTIME_CATS,
    STEP_PREFIX,
)
from .gpu_idle import (
    GPU_IDLE_DEFINITION,
    GPU_IDLE_FEW_STEPS,
    GPU_IDLE_LAST_DROPPED,
    GPU_IDLE_LAST_KEPT,
    GPU_IDLE_NOTE,
    compute_gpu_idle,
    describe_gpu_idle,
    trace_window,
)
from .operators import (
    compute_kernel_table,
    compute_nesting,
    compute_operator_table,
)
from .steps import (
    ANNOTATION_MIN_COVER,
    ANNOTATION_SURE_COVER,
    MSG_ANNOTATION_GAPS,
    MSG_ONE_STEP,
    compute_annotated_steps,
    compute_trace_steps,
    summarize_step_phases,
)
from .summary import (
    summarize_trace,
    trace_threads,
)
from .timeline import (
    compute_trace_timeline,
    lane_names,
)
