"""The restricted unpickler: plain data loads, everything else is refused and never runs."""

from __future__ import annotations

import collections
import copyreg
import io
import os
import pickle
import shlex
import sys

import pytest

from debugkit.errors import InvalidInputError
from debugkit.io.safepickle import UnsafePickleError, load_plain


class _SystemPayload:
    """Unpickling this object calls os.system(command) under a plain pickle.load."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_os_system_payload_is_refused_and_its_side_effect_does_not_happen(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"segments": [], "x": _SystemPayload(f"touch {shlex.quote(str(marker))}")})
    # sanity: a plain pickle.load of these bytes would run the command
    path = tmp_path / "evil.pickle"
    path.write_bytes(payload)
    with pytest.raises(UnsafePickleError, match=r"evil\.pickle: refused to load: the pickle asks "
                                                r"for (posix|os)\.system.*nothing was executed"):
        load_plain(path)
    assert not marker.exists()
    assert path.read_bytes() == payload  # the user's file is left as it was


def test_the_payload_really_would_run_under_plain_pickle(tmp_path):
    """Proof that the test above tests something: plain pickle does execute it."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_SystemPayload(f"touch {shlex.quote(str(marker))}")))
    assert marker.exists()


@pytest.mark.parametrize("obj,name", [
    (eval, r"(builtins|__builtin__)\.eval"),
    (collections.OrderedDict(a=1), r"collections\.OrderedDict"),
    (collections.Counter("ab"), r"collections\.Counter"),
    (range(3), r"(builtins|__builtin__)\.(x?range)"),
    (complex(1, 2), r"(builtins|__builtin__)\.complex"),
    (sys.exit, r"sys\.exit"),
])
def test_every_global_is_refused(obj, name):
    for proto in (0, 2, pickle.HIGHEST_PROTOCOL):
        with pytest.raises(UnsafePickleError, match=name):
            load_plain(pickle.dumps(obj, protocol=proto))


def test_torch_tensors_and_numpy_arrays_are_refused():
    import numpy as np
    import torch

    with pytest.raises(UnsafePickleError, match=r"torch\._utils|torch\.storage|collections"):
        buf = io.BytesIO()
        pickle.dump(torch.zeros(2), buf)
        load_plain(buf.getvalue())
    with pytest.raises(UnsafePickleError, match=r"numpy"):
        load_plain(pickle.dumps(np.zeros(2)))


def test_handwritten_protocol_0_global_and_inst_are_refused(tmp_path):
    marker = tmp_path / "p0"
    q = str(marker).replace("'", "")
    for raw in (f"cos\nsystem\n(S'touch {q}'\ntR.".encode(),
                f"(S'touch {q}'\nios\nsystem\n.".encode()):
        with pytest.raises(UnsafePickleError, match=r"os\.system"):
            load_plain(raw)
    assert not marker.exists()


def test_extension_registry_codes_go_through_the_same_refusal(tmp_path):
    marker = tmp_path / "ext"
    mod = os.system.__module__  # "posix" on Linux
    copyreg.add_extension(mod, "system", 0xF0F0)
    try:
        raw = pickle.dumps(os.system, protocol=2)
        assert pickle.EXT2 in raw and b"system" not in raw  # only the code is in the file
        with pytest.raises(UnsafePickleError, match=rf"{mod}\.system"):
            load_plain(raw)
    finally:
        copyreg.remove_extension(mod, "system", 0xF0F0)
    assert not marker.exists()


def test_persistent_ids_are_refused():
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "ext" if obj == "external" else None

    buf = io.BytesIO()
    P(buf).dump({"a": "external"})
    with pytest.raises(UnsafePickleError, match="persistent id"):
        load_plain(buf.getvalue())


def test_plain_data_loads_with_every_protocol():
    # what a memory snapshot holds: no globals under any protocol
    data = {"segments": [{"address": 2**47, "pool": (0, 0), "frames": [{"line": 3}]}],
            "f": 1.5, "n": None, "t": True, "big": 2**80, "neg": -7, "u": "ünïcode", "e": ()}
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert load_plain(pickle.dumps(data, protocol=proto)) == data
    # bytes, sets and frozensets have their own opcodes from protocol 3 / 4 on
    more = {**data, "b": b"\x00\x01", "s": {1, 2}, "fs": frozenset({3})}
    for proto in range(4, pickle.HIGHEST_PROTOCOL + 1):
        assert load_plain(pickle.dumps(more, protocol=proto)) == more


def test_protocol_2_bytes_need_a_global_and_are_refused():
    # protocols 0-2 write bytes as a call to _codecs.encode: refused like any call
    with pytest.raises(UnsafePickleError, match=r"_codecs\.encode"):
        load_plain(pickle.dumps(b"abc", protocol=2))


def test_shared_objects_stay_shared():
    frames = [{"name": "f"}]
    out = load_plain(pickle.dumps({"a": frames, "b": frames}))
    assert out["a"] is out["b"]


@pytest.mark.parametrize("raw,detail", [
    (b"", "EOFError"),
    (b"\x80\x04}", "EOFError"),
    (b"not a pickle at all", "UnpicklingError"),
    (b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00}\x94(.", ""),
])
def test_corrupt_bytes_are_a_clear_error(raw, detail):
    with pytest.raises(InvalidInputError, match=r"<bytes>: not a readable pickle.*" + detail):
        load_plain(raw)


def test_build_on_plain_objects_cannot_set_attributes():
    # BUILD on a dict would need __setstate__ or a __dict__; plain containers have neither
    raw = b"\x80\x04}\x94}\x94(\x8c\x01a\x94K\x01ub."
    with pytest.raises(InvalidInputError, match="not a readable pickle"):
        load_plain(raw)
