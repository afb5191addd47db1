"""torch's own BLAS ``sdot`` for :mod:`debugkit.serve`'s finiteness check of a float32 CPU
output, called through ctypes without torch's dispatcher, and the constant arguments the
request path passes to it (kept here so that a request builds no ctypes object)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

_c_int64 = ctypes.c_int64
_byref = ctypes.byref
#: a stride of 1 for the BLAS dot below (read as a 32-bit int by an LP64 BLAS: the low
#: word on a little-endian machine; whole by an ILP64 one)
ONE = ctypes.c_int64(1)
INT32_MAX = 2**31 - 1
#: the address of the stride above (passed as an int: no ``byref`` object per call)
ONE_P = ctypes.addressof(ONE)
#: output lengths -> (c_int64 holding it, its address): the BLAS call's length argument
#: without building a c_int64 and three ``byref`` objects per request (each object
#: touched costs next to a model). The values are never written after creation, so threads
#: share them; a length not seen before gets its own, kept while the table is under
#: :data:`LEN_MAX` lengths
LENGTHS: dict[int, tuple[Any, int]] = {}
LEN_MAX = 4096


def blas_sdot(torch):
    """torch's own BLAS ``sdot`` (its CPU library exports the Fortran symbol: MKL on x86
    builds) as a ctypes function, or None where it is not there or does not answer a
    check right. The finiteness check of a contiguous float32 CPU output calls it on the
    output with itself: a sum of squares, finite exactly when every element is (no
    cancellation: inf and NaN stay; a finite value over ~1.8e19 overflows to inf and is
    confirmed element-wise). It skips torch's dispatcher: after the ~1 ms model 6.1 us
    less than ``sum().tolist()`` [5.6, 6.7], after the ~20 ms one 8.6 us less
    (docs/serving.md#sixth-round-the-rng-clone-the-inline-rss-read-the-20-ms-verdict)."""
    if os.environ.get("DEBUGKIT_SERVE_BLAS", "1") == "0":
        return None
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        path = os.path.join(lib_dir, name)
        if not os.path.exists(path):
            continue
        try:
            fn = ctypes.CDLL(path).sdot_
        except (OSError, AttributeError):
            return None
        fn.restype = ctypes.c_float
        fn.argtypes = [ctypes.c_void_p] * 5
        try:
            x = torch.tensor([1.0, 2.0, 3.0, 0.5], dtype=torch.float32)
            ok = fn(_byref(_c_int64(3)), x.data_ptr(), _byref(ONE), x.data_ptr(), _byref(ONE)) == 14.0
            bad = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float32)
            for k in (2, 3):
                t = fn(_byref(_c_int64(k)), bad.data_ptr(), _byref(ONE), bad.data_ptr(), _byref(ONE))
                ok = ok and not t - t == 0
        except Exception:  # noqa: BLE001 - no usable BLAS: the torch sum does it
            return None
        return fn if ok else None
    return None


def tensor_guards(torch):
    """torch's C++ tensor guard (``torch._C._dynamo.guards.TensorGuards``, what
    ``torch.compile`` checks a compiled graph's inputs with), or None where it is missing or
    does not answer a probe right. ``TensorGuards(t, ...).check(out)`` is one C call, True
    only when ``out`` has ``t``'s exact Python type, dispatch keys (backend and layout: CPU,
    dense; no ZeroTensor, conjugate or negative bit), dtype, device index, ``requires_grad``,
    sizes and strides. The finiteness check keeps one built from an output it judged a
    contiguous float32 CPU tensor with memory: an output that passes it is one too, of the
    same length, so its BLAS call needs only its data pointer (one C call instead of the
    five property and method calls that establish it)."""
    try:
        guards = torch._C._dynamo.guards.TensorGuards
        check = guards(torch.zeros(4, 3), dynamic_dims_sizes=None, dynamic_dims_strides=None).check
        ok = check(torch.ones(4, 3)) and not any(check(t) for t in (
            torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 3, dtype=torch.int32),
            torch.zeros(3, 4).t(), torch.zeros(4, 4)[:, :3], torch.zeros(3, 4), torch.zeros(12),
            torch.zeros(4, 3, requires_grad=True), torch.nn.Parameter(torch.zeros(4, 3)),
            torch._efficientzerotensor(4, 3), torch.zeros(4, 3, device="meta"),
            torch.zeros(4, 3).to_sparse(), torch.zeros(4, 3)._neg_view(), 0.0, None))
    except Exception:  # noqa: BLE001 - no usable guard: the property calls do it
        return None
    return guards if ok else None
