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


def _peak_mib(fn) -> float:
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            fn()
        except Exception:  # noqa: BLE001 - only the memory it took matters here
            pass
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# Each claims memory the bytes do not hold: a BINBYTES length (the C unpickler allocates
# the object before reading it; the fuzz suite found 179 random bytes claiming 464 MiB),
# and a memo index (the memo table grows to twice the index at once).
CLAIMS = {
    "BINBYTES": b"B" + (300 << 20).to_bytes(4, "little") + b"tiny.",
    "LONG_BINPUT": b"\x80\x04N" + b"r" + (1 << 24).to_bytes(4, "little") + b".",
    "PUT": b"Np16777216\n.",
    "BINBYTES8 in a frame": (b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00N\x8e"
                             + (300 << 20).to_bytes(8, "little") + b"."),
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_a_claim_the_bytes_cannot_back_is_refused_before_anything_is_allocated(name, tmp_path):
    raw = CLAIMS[name]
    path = tmp_path / "claim.pickle"
    path.write_bytes(raw)
    for source in (raw, path):
        with pytest.raises(InvalidInputError, match=r"refused to load: .* at byte \d+ \(a file of "
                                                    rf"{len(raw)} bytes\).*nothing was allocated"):
            load_plain(source)
        assert _peak_mib(lambda source=source: load_plain(source)) < 8
    assert path.read_bytes() == raw


@pytest.mark.parametrize("name", ["BINBYTES", "LONG_BINPUT", "PUT"])
def test_the_plain_c_unpickler_does_allocate_for_those_claims(name):
    """Proof that the test above tests something."""
    assert _peak_mib(lambda: pickle.loads(CLAIMS[name])) > 100


def test_an_opcode_crossing_its_frame_and_nested_frames_are_refused():
    crossing = b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00NJ\x01\x02\x03\x04."
    with pytest.raises(InvalidInputError, match=r"past the end of the frame at byte 12"):
        load_plain(crossing)
    nested = (b"\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x95\x01\x00\x00\x00\x00\x00\x00\x00N.")
    with pytest.raises(InvalidInputError, match=r"not a readable pickle .*frame that begins inside"):
        load_plain(nested)


@pytest.mark.parametrize("proto", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_of_plain_data_passes_the_walk(proto):
    obj = {"a": [1, 2.5, "x" * 300, (1,), None, True, 2**100, -5, "é", 1e300, 2**31, -(2**40)],
           "b": [[]] * 3, "c": {"k": "v" * 70000}, "addr": [140_000_000_000 + k for k in range(300)]}
    if proto >= 3:
        obj["d"] = [b"y" * 70000, b""]
    if proto >= 4:
        obj["s"] = [{1, 2}, frozenset([3])]
    if proto >= 5:
        obj["e"] = bytearray(b"z" * 10)
    assert load_plain(pickle.dumps(obj, protocol=proto)) == obj
