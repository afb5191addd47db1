"""Code identity: where a capture's factory lives on this machine and whether it may run."""

from __future__ import annotations

import hashlib
import os

import pytest

from debugkit.replay import code as C


def entry(spec, file=None, sha=None):
    module, _, qual = spec.partition(":")
    return {"spec": spec, "module": module, "qualname": qual, "file": file, "sha256": sha}


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_verified_when_the_hash_matches(project):
    f = project / "tproj" / "model.py"
    ident = C.identify("model_factory", entry("tproj.model:build_model", "/elsewhere/model.py", sha(f)))
    assert ident.status == C.VERIFIED
    assert ident.local_file == str(f.resolve())
    assert ident.search_root == str(project)
    assert ident.may_run(False) and ident.may_run(True)


def test_changed_needs_allow_code(project):
    ident = C.identify("model_factory", entry("tproj.model:build_model", None, "0" * 64))
    assert ident.status == C.CHANGED
    assert not ident.may_run(False) and ident.may_run(True)
    assert ident.message.endswith("pass --allow-code to replay with the code as it is now")
    assert f"recorded {'0' * 64}" in ident.message


def test_unrecorded_hash_needs_allow_code(project):
    ident = C.identify("model_factory", entry("tproj.model:build_model"))
    assert ident.status == C.UNRECORDED and not ident.may_run(False) and ident.may_run(True)


def test_missing_module_never_runs(project):
    ident = C.identify("model_factory", entry("tproj.nothere:build_model", "/old/nothere.py", "a" * 64))
    assert ident.status == C.MISSING and not ident.may_run(True)
    assert "module 'tproj.nothere' is not found on this machine (it was /old/nothere.py when recorded)" \
        in ident.message


def test_qualname_not_defined_never_runs(project):
    f = project / "tproj" / "model.py"
    ident = C.identify("model_factory", entry("tproj.model:F", None, sha(f)))  # F is an import alias
    assert ident.status == C.NOT_DEFINED and not ident.may_run(True)


@pytest.mark.parametrize("spec", ["os:system", "shutil:rmtree", "subprocess:run"])
def test_stdlib_never_runs(spec):
    mod = __import__(spec.split(":")[0])
    ident = C.identify("model_factory", entry(spec, mod.__file__, sha(mod.__file__)))
    assert ident.status == C.STDLIB and not ident.may_run(True)
    assert "part of Python's standard library" in ident.message


def test_builtin_and_extension_modules_never_run():
    assert C.identify("model_factory", entry("posix:system")).status == C.MISSING
    import _json

    if getattr(_json, "__file__", None):  # a shared library on most builds
        assert C.identify("model_factory", entry("_json:scanstring")).status in (C.NOT_SOURCE, C.STDLIB)


@pytest.mark.parametrize("spec", ["nocolon", "a:b:c", "a b:c", "1x:y", ":f", "m:", "m:f()",
                                  "m.:f", "m:f.", 12, None])
def test_bad_specs(spec):
    ident = C.identify("model_factory", {"spec": spec} if spec is not None else {}, spec)
    assert ident.status == C.BAD_SPEC and not ident.may_run(True)
    assert "expected 'module:qualname'" in ident.message


def test_locating_executes_nothing(tmp_path):
    pkg = tmp_path / "sideeffect"
    pkg.mkdir()
    marker = tmp_path / "imported"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (pkg / "mod.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef f():\n    pass\n")
    origin, root = C.locate_module("sideeffect.mod", [str(tmp_path)])
    assert origin == str(pkg / "mod.py") and root == str(tmp_path)
    ident = C.identify("model_factory", entry("sideeffect.mod:f"), search_path=[str(tmp_path)],
                       code_roots=[tmp_path])
    assert ident.status == C.UNRECORDED
    assert not marker.exists()


@pytest.mark.parametrize("source, qualname, expected", [
    ("def f():\n    pass\n", "f", True),
    ("async def f():\n    pass\n", "f", True),
    ("class Net:\n    @classmethod\n    def create(cls):\n        pass\n", "Net.create", True),
    ("class Net:\n    pass\n", "Net", True),
    ("class Net:\n    pass\n", "Net.create", False),
    ("def f():\n    def g():\n        pass\n", "f.g", False),
    ("from os import system\n", "system", False),
    ("from posix import *\n", "system", False),
    ("import os\nsystem = os.system\n", "system", False),
    ("if True:\n    def f():\n        pass\n", "f", False),
    ("def f(:\n", "f", False),
])
def test_defines(source, qualname, expected):
    assert C.defines(source, qualname) is expected


def test_require_runnable_raises_the_first_refusal(project):
    good = C.identify("model_factory", entry("tproj.model:build_model", None, sha(project / "tproj" / "model.py")))
    bad = C.identify("step_fn", entry("tproj.model:nope"))
    C.require_runnable([good], allow_code=False)
    with pytest.raises(C.CodeRefusedError, match=r"step_fn tproj.model:nope: 'nope' is not defined"):
        C.require_runnable([good, bad], allow_code=True)


def test_identify_capture_without_a_factory():
    with pytest.raises(C.CodeRefusedError, match="the capture records no model_factory"):
        C.identify_capture({"id": "r0-s0000001-exception", "code": {}}, {})


def test_load_verified_module_checks_the_bytes_it_runs(project, tmp_path):
    f = project / "tproj" / "model.py"
    ident = C.identify("model_factory", entry("tproj.model:build_model", None, sha(f))).to_dict()
    fn = C.load_verified_module(ident, allow_code=False, code_roots=[project])
    assert fn.__name__ == "build_model" and fn.__module__ == "tproj.model"
    with pytest.raises(C.CodeRefusedError, match="outside the folders"):
        C.load_verified_module(ident, allow_code=False, code_roots=[tmp_path / "elsewhere"])
    f.write_text(f.read_text() + "\n# swapped after the check\n")
    with pytest.raises(C.CodeRefusedError, match="changed while the replay started"):
        C.load_verified_module(ident, allow_code=True, code_roots=[project])


def test_load_verified_module_refuses_a_def_rebound_to_a_builtin(tmp_path):
    pkg = tmp_path / "rebind"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    src = pkg / "m.py"
    src.write_text("import os\n\ndef build():\n    pass\n\nbuild = os.system\n")
    ident = C.identify("model_factory", entry("rebind.m:build"), search_path=[str(tmp_path)],
                       code_roots=[tmp_path]).to_dict()
    assert ident["status"] == C.UNRECORDED
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(C.CodeRefusedError, match="is not defined by a 'def' or 'class'"):
            C.load_verified_module(ident, allow_code=True, code_roots=[tmp_path])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("rebind.m", None)
        sys.modules.pop("rebind", None)


def test_classify_location():
    import sklearn

    assert C.classify_location(os.__file__) == "stdlib"
    assert C.classify_location(sklearn.__file__) == "installed"
    assert C.classify_location(__file__) == "project"
