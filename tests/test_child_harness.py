"""The child-process harness both the replay and the audit worker run under."""

from __future__ import annotations

import json
import os

import pytest

from debugkit.analysis.findings import Check
from debugkit.child_harness import serve
from debugkit.errors import DebugkitError


def _serve(tmp_path, work, **kw):
    rfd, wfd = os.pipe()
    req = tmp_path / "request.json"
    req.write_text(json.dumps({"fd": wfd}))
    rc = serve(work, [str(req)], faulthandler=False, **kw)
    os.set_blocking(rfd, False)  # the channel's end stays open in this process: read what is there
    data = b""
    try:
        while chunk := os.read(rfd, 1 << 16):
            data += chunk
    except BlockingIOError:
        pass
    os.close(rfd)
    return rc, [json.loads(line) for line in data.decode().splitlines()]


def _fail(exc):
    def work(req, chan):
        chan.send("progress", message="starting")
        raise exc
    return work


def test_a_result_is_sent_and_exits_0(tmp_path):
    rc, events = _serve(tmp_path, lambda req, chan: {"x": 1})
    assert rc == 0 and events == [{"event": "result", "raw": {"x": 1}}]


@pytest.mark.parametrize("exc, refuse, rc, event", [
    (DebugkitError("no"), (DebugkitError,), 3, "refused"),
    (KeyError("k"), (DebugkitError,), 4, "internal_error"),
])
def test_refused_and_internal_errors(tmp_path, exc, refuse, rc, event):
    got, events = _serve(tmp_path, _fail(exc), refuse=refuse)
    assert got == rc and [e["event"] for e in events] == ["progress", event]
    assert events[-1]["type"] == type(exc).__name__


def test_check_serialises_to_the_report_shape():
    c = Check("labels", False, "1 of 4 labels ...", {"module": None})
    assert c.to_dict() == {"name": "labels", "ok": False, "detail": "1 of 4 labels ..."}
    assert c.severity == "error" and Check("shapes", None, "not reached").severity == "info"
