"""Keep a recorded model's last output without a forward hook.

A non-finite capture describes the model's output of the failing step (``model_outputs``,
which tells a non-finite loss computation from a non-finite model: issue 30's
``loss_origins``). A forward hook on the model would keep it, but any hook sends every
call of the model through ``nn.Module._call_impl``'s hook path (4 more Python frames, a
closure, a tuple of the hooks each forward: +3.2 us warm per forward, more in place after
the optimizer step). Instead the model's instance gets a class of its own for the
Recorder's lifetime: a subclass of its class, with the same name, whose ``__call__`` runs
the class's ``__call__`` and keeps the result for the Recorder whose model it is.

What stays as it was:

* copies: ``copy.deepcopy(model)`` (an EMA copy) and ``torch.save(model)`` / pickle
  reduce the instance as one of its original class, so a copy holds no Recorder and
  unpickles anywhere; a copy keeps nothing;
* names and checks: ``type(model).__name__`` / ``__qualname__`` / ``__module__`` are the
  class's, ``isinstance`` holds, ``forward`` and its signature are untouched;
* ``Recorder.close()`` gives the instance its class back (when nothing swapped it since;
  otherwise the subclass stays in place, keeping nothing);
* several Recorders on one model each keep the output, in the order they were opened.

:func:`can_keep` says which models take this way; the others (compiled, FSDP, TorchScript,
a class with its own ``__call__``) keep the forward hook.
"""

from __future__ import annotations

import copyreg
import weakref
from typing import Any

_DEAD = weakref.ref(type("_Gone", (), {})())  # a weak reference that is always None


def can_keep(module) -> bool:
    """Whether ``module`` may get a keeping class: a plain ``nn.Module`` instance whose
    class calls ``nn.Module.__call__`` (no compiled, FSDP or TorchScript module: they call
    their module through paths of their own)."""
    import torch.nn as nn

    cls = type(module)
    if cls.__call__ is not nn.Module.__call__ and not getattr(
            cls, "_debugkit_keeps", False):
        return False
    if cls.__new__ is not object.__new__:  # a copy is rebuilt by object.__new__
        return False
    name = cls.__module__ or ""
    return not (name.startswith("torch.distributed") or name.startswith("torch.jit")
                or name.startswith("torch._dynamo") or any(
                    c.__name__.startswith("FSDP") for c in cls.__mro__))


def keep_outputs(module, rec) -> type:
    """Give ``module`` a class of its own that keeps each output as ``rec._last_output``
    while ``rec._module is module``. Returns that class (for :func:`release`)."""
    import torch.nn as nn

    base = type(module)
    ref = [weakref.ref(rec)]
    call = base.__call__

    if call is nn.Module.__call__ and call.__name__ == "_wrapped_call_impl":
        def __call__(self, *args, **kwargs):
            # nn.Module._wrapped_call_impl, inline (one frame less per forward)
            compiled = self._compiled_call_impl
            if compiled is not None:
                out = compiled(*args, **kwargs)
            else:
                out = self._call_impl(*args, **kwargs)
            r = ref[0]()
            if r is not None and r._module is self:
                r._last_output = out
            return out
    else:
        def __call__(self, *args, **kwargs):
            out = call(self, *args, **kwargs)
            r = ref[0]()
            if r is not None and r._module is self:
                r._last_output = out
            return out

    def __reduce_ex__(self, protocol):
        # pickled and copied as an instance of the original class: the copy keeps nothing
        # and unpickles where this class does not exist
        rv = base.__reduce_ex__(self, protocol)
        if type(rv) is not tuple or len(rv) < 2 or type(rv[1]) is not tuple:
            return rv
        if rv[0] is copyreg.__newobj__ and rv[1] and rv[1][0] is type(self):
            # pickle wants __newobj__'s class to be the object's: rebuilt as protocol 0
            # does instead (copyreg._reconstructor: object.__new__, then the state)
            return (copyreg._reconstructor, (_original(type(self)), object, None)) + rv[2:]
        return (rv[0], tuple(_original(a) for a in rv[1])) + rv[2:]

    sub = type(base.__name__, (base,), {
        "__call__": __call__, "__reduce_ex__": __reduce_ex__,
        "__module__": base.__module__, "__qualname__": base.__qualname__,
        "__doc__": base.__doc__, "_debugkit_keeps": True, "_debugkit_base": base,
        "_debugkit_ref": ref})
    module.__class__ = sub
    return sub


def _original(cls):
    """``cls`` without the keeping classes on top of it."""
    while isinstance(cls, type) and cls.__dict__.get("_debugkit_keeps"):
        cls = cls._debugkit_base
    return cls


def release(module, sub: Any) -> None:
    """The Recorder closes: ``sub`` keeps nothing any more, and ``module`` gets back the
    class below it (below any other closed Recorder's too) when ``sub`` is still its
    class."""
    sub._debugkit_ref[0] = _DEAD
    if type(module) is not sub:
        return
    cls = sub._debugkit_base
    while cls.__dict__.get("_debugkit_keeps") and cls._debugkit_ref[0] is _DEAD:
        cls = cls._debugkit_base
    module.__class__ = cls
