"""The views of an inference run (``debugkit.serve``) on the Overview, Memory and Replay
pages: requests on the x axis, rolling latency percentiles, errors and fallbacks, memory
after each request with the leak's projection to the service's threshold.

A page asks :func:`is_inference` first and, for such a run, hands the page to the
``render_*`` function here; a training run's views stay in the page file.
"""

from __future__ import annotations

import datetime as dt

import streamlit as st

from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

#: An inference run's status in its own words (the writer's state: running, finished ...).
SERVING_STATUS = {"running": "serving", "finished": "stopped", "failed": "failed",
                  "crashed": "crashed"}
STATUS_BADGE = {"serving": ("blue", ":material/podcasts:"), "stopped": ("gray", ":material/stop_circle:"),
                "failed": ("red", ":material/error:"), "crashed": ("orange", ":material/warning:")}
#: Rolling latency windows offered (requests per window).
WINDOWS = (50, 100, 200, 500, 1000)
DEFAULT_WINDOW = 200
#: Finding kinds about memory per request (debugkit.diagnose's serving area).
MEMORY_KINDS = ("request_memory_leak", "memory_grows_with_input")
OUTCOME_WORDS = {"error": "error", "nonfinite": "non-finite output", "fallback": "fallback"}


def is_inference(info: dict) -> bool:
    """Whether the run (its :func:`pages._data.summary`) is an inference run."""
    return (info.get("manifest") or {}).get("kind") == "inference"


def serving_status(status: str) -> str:
    return SERVING_STATUS.get(status, status)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _views(path: str, sig: tuple, window: int) -> dict:
    from debugkit.analysis.request_windows import (
        compute_latency_windows,
        compute_outcome_counts,
        order_requests,
    )
    from debugkit.analysis.serving import summarize_requests

    req = order_requests(_data.read_requests(path))
    return {"requests": req, "windows": compute_latency_windows(req, window),
            "counts": compute_outcome_counts(req), "summary": summarize_requests(req)}


def _views_now(path: str, window: int = 200) -> dict:
    return _views(path, _data.signature(path), int(window))


def _fmt_ms(v) -> str:
    return "—" if v is None else f"{v:.1f} ms" if v < 100 else f"{v:,.0f} ms"


def _follow_click(event, run_id: str, failures: dict) -> None:
    """A click on a failed request's marker opens its capture in Replay."""
    for p in ((event or {}).get("selection") or {}).get("points") or []:
        fid = p.get("customdata")
        fid = fid[0] if isinstance(fid, list) and fid else fid
        if fid in failures and _routing.has_page("pages/replay.py"):
            st.switch_page("pages/replay.py", query_params={"run": run_id, "failure": fid})


# ---------------------------------------------------------------------------- Overview
def render_overview(path: str, info: dict) -> None:
    """The Overview of an inference run."""
    try:
        failures = _data.read_failures(path)
        # the rolling window is ?window=<requests> (200 by default)
        _query.from_query("ov_latency_window", lambda v: int(v) if v.isdigit() and int(v) in WINDOWS else None,
                          name="window", expected="one of " + ", ".join(map(str, WINDOWS)))
        st.session_state.setdefault("ov_latency_window", DEFAULT_WINDOW)
        window = st.session_state["ov_latency_window"]
        v = _views_now(path, window)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    status = serving_status(info["status"])
    color, icon = STATUS_BADGE.get(status, ("gray", None))
    st.title(_ui.md(info["name"]))
    _ui.about("An inference run: every request a service answered with the model, recorded by "
              "`debugkit.serve` (latency, outcome, input signature, memory before and after), and "
              "a capture of each failing request. Latency percentiles roll over the last requests; "
              "click a failed request's marker to replay it on the **Replay** page; **Memory** "
              "shows memory per request and a leak's projection to the service's threshold.")
    st.badge(status, color=color, icon=icon)
    if status == "serving":
        st.caption("Live: this page refreshes every few seconds while the service records requests.")
    elif status == "crashed":
        st.warning("The service's process went away without closing the run (killed, or its "
                   "machine died). Every request flushed before that is shown.")
    s = v["summary"]
    n, by, lat = s["requests"], s["by_outcome"], s["latency_ms"] or {}
    failed = by.get("error", 0) + by.get("nonfinite", 0)
    c = st.columns(6)
    c[0].metric("Requests", f"{n:,}")
    c[1].metric("Error rate", f"{failed / n:.2%}" if n else "—",
                help=f"{by.get('error', 0):,} errors and {by.get('nonfinite', 0):,} non-finite outputs")
    c[2].metric("Fallbacks", f"{by.get('fallback', 0):,}",
                help=f"{by.get('fallback', 0) / n:.2%} of requests" if n else None)
    c[3].metric("p50 latency", _fmt_ms(lat.get("p50")))
    c[4].metric("p99 latency", _fmt_ms(lat.get("p99")), help=f"p95 {_fmt_ms(lat.get('p95'))}")
    c[5].metric("Captures", len(failures), help="failing requests captured for replay")
    if not s["requests"]:
        st.info("No request recorded yet: `debugkit.serve` writes rows every `flush_every_s`.",
                icon=":material/hourglass:")
    else:
        from debugkit.charts.requests import build_latency_figure, build_outcome_figure

        window = st.select_slider("Rolling window (requests)", WINDOWS, key="ov_latency_window",
                                  help="Each point of the p50/p95/p99 lines is the percentile of the "
                                       "last this many requests.")
        _query.to_query("ov_latency_window", str(window), str(DEFAULT_WINDOW), name="window")
        by_id = {f["id"]: f for f in failures}
        event = _ui.chart(build_latency_figure(v["requests"], v["windows"]), key="latency",
                          on_select="rerun", selection_mode="points")
        _follow_click(event, _runs.run_id_for(path), by_id)
        if failed or by.get("fallback"):
            _ui.chart(build_outcome_figure(v["counts"]), key="outcomes")
    _failing_requests(path, failures)
    _findings(path)
    _model_and_env(info)


def _failing_requests(path: str, failures: list[dict]) -> None:
    st.subheader("Failing requests")
    reqs = [f for f in failures if f.get("kind") == "request"]
    if not reqs:
        st.success("No failing request captured.", icon=":material/check:")
        return
    run_id = _runs.run_id_for(path)
    for f in reqs[:50]:
        what = f.get("error_type") or OUTCOME_WORDS.get(f.get("outcome") or "", f.get("outcome"))
        with st.container(border=True):
            st.markdown(f"**request {_ui.md(f.get('request', f.get('step')))} · rank "
                        f"{_ui.md(f.get('rank'))} · {_ui.md(what)}** · {_ui.code(f.get('signature') or '?')}")
            st.code(_ui.recorded_text(f.get("message") or "", _data.recorded_roots(path, f)),
                    language=None, wrap_lines=True)
            _routing.link_to("pages/replay.py", "Replay this request", icon=":material/arrow_forward:",
                             run=run_id, failure=f["id"])
    if len(reqs) > 50:
        st.caption(f"… and {len(reqs) - 50} more captures (the Replay page lists them all).")


def _findings(path: str) -> None:
    st.subheader("Findings")
    try:
        found = _data.findings(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if not found:
        st.success("`debugkit diagnose` finds nothing wrong in this run.", icon=":material/check:")
        return
    counts = {s: sum(f.severity == s for f in found) for s in ("error", "warning", "info")}
    st.caption(" · ".join(f"{n} {s}" for s, n in counts.items() if n)
               + " · what `debugkit diagnose` finds, ordered by request")
    with st.container(height=480 if len(found) > 4 else "content", border=False):
        _ui.show_findings(found, roots=_data.recorded_roots(path))


def _model_and_env(info: dict) -> None:
    m = info["manifest"]
    serve = m.get("serve") or {}
    left, right = st.columns(2)
    with left:
        st.subheader("Model")
        ident = (f"factory {_ui.code(m.get('model_factory'))}" if m.get("model_factory")
                 else f"weights SHA-256 {_ui.code((m.get('weights_sha256') or '—')[:16])}")
        st.markdown(f"- {ident}\n- class {_ui.code(m.get('model_class') or '—')}\n"
                    f"- memory thresholds: GPU {serve.get('gpu_mem_threshold', 0.8):.0%}, host "
                    f"{serve.get('host_mem_threshold', 0.75):.0%}\n"
                    f"- capture budget: {_ui.code(serve.get('capture_budget') or '—')}")
        st.caption(f"schema {_ui.md(m.get('schema_version'))}")
    with right:
        st.subheader("Environment")
        env = info.get("env") or {}
        gpus = ", ".join(_ui.md(g.get("name", "?")) for g in env.get("gpus") or []) or "none"
        start, end = info.get("time_span") or (None, None)
        started = dt.datetime.fromtimestamp(start).isoformat(" ", "seconds") if start else "—"
        st.markdown(f"- Python **{_ui.md(env.get('python', '?'))}**, torch "
                    f"**{_ui.md(env.get('torch', '?'))}**, GPU: {gpus}\n"
                    f"- host {_ui.code(env.get('host', '?'))}\n- started {started}")


# ---------------------------------------------------------------------------- Memory
def render_memory(path: str, info: dict) -> None:
    """The Memory page of an inference run: memory after each request."""
    from debugkit.analysis.memory import compute_bands
    from debugkit.analysis.request_windows import place_leak_lines
    from debugkit.charts.requests import build_request_memory_figure

    try:
        v = _views_now(path)
        cap = _data.read_memory_capacity(path)
        found = [f for f in _data.findings(path) if f.kind in MEMORY_KINDS]
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    serve = info["manifest"].get("serve") or {}
    gpu_thr = float(serve.get("gpu_mem_threshold") or 0.8)
    host_thr = float(serve.get("host_mem_threshold") or 0.75)
    st.title(f"Memory · {_ui.md(info['name'])}")
    _ui.about("Memory after each request as `debugkit.serve` read it (on CUDA the allocator's "
              "allocated bytes, on the CPU the process RSS), the service's thresholds (the run's "
              "`gpu_mem_threshold` / `host_mem_threshold`), and when memory keeps growing with the "
              "request count, the leak's fitted rate and where it reaches the threshold.")
    req = v["requests"]
    if not len(req) or not req["mem_after_bytes"].notna().any():
        st.info("No memory reading yet: `debugkit.serve` reads memory around every request.",
                icon=":material/hourglass:")
        return
    for f in found:
        box = st.error if f.severity == "error" else st.warning if f.severity == "warning" else st.info
        box(_ui.md(f.message), icon=":material/memory:")
        if f.kind == "request_memory_leak":
            from debugkit.analysis.memory import fmt_bytes

            ev = f.evidence
            c = st.columns(4)
            c[0].metric("Growth per 1,000 requests", fmt_bytes(ev.get("bytes_per_1000_requests")))
            c[1].metric("From request", f"{ev.get('start_request', 0):,}")
            c[2].metric("Grown by", fmt_bytes(ev.get("growth_bytes")))
            left = ev.get("requests_to_threshold")
            c[3].metric(f"Requests to {ev.get('threshold', host_thr):.0%}",
                        "—" if left is None else f"{left:,}",
                        help="More requests until the fitted level reaches the threshold.")
    if not found:
        st.success("No leak: memory does not grow with the request count.", icon=":material/check:")
    bands = compute_bands(cap, {"gpu_threshold": gpu_thr, "host_threshold": host_thr})
    _ui.chart(build_request_memory_figure(req, bands, leaks=place_leak_lines(found, req)),
              key="request_memory")
    if not len(bands):
        st.caption("No capacity recorded for this run, so there is no threshold line.")
    st.caption(f"Thresholds of this service: GPU {gpu_thr:.0%}, host {host_thr:.0%} "
               "(`debugkit.serve(..., gpu_mem_threshold=, host_mem_threshold=)`).")


# ---------------------------------------------------------------------------- Replay
def request_label(f: dict) -> str:
    """The Replay picker's words for a capture of a failing request."""
    what = f.get("error_type") or OUTCOME_WORDS.get(f.get("outcome") or "", f.get("outcome") or "?")
    return f"request {f.get('request', f.get('step'))} · rank {f.get('rank')} · {what} · {f['id']}"


def show_request_failure(f: dict, roots: tuple = ()) -> None:
    """What failed, for a captured request (the Replay page's left column); ``roots`` the
    recording machine's folders, not shown (:func:`pages._data.recorded_roots`)."""
    what = f.get("error_type") or OUTCOME_WORDS.get(f.get("outcome") or "", "failure")
    st.markdown(f"**{_ui.md(what)}** at request {_ui.md(f.get('request', f.get('step')))}, rank "
                f"{_ui.md(f.get('rank'))}, on {_ui.code(f.get('device') or '?')}")
    st.caption(f"Inputs: {_ui.code(f.get('signature') or '?')}, called as "
               f"{_ui.code(CALL_TEXT.get(f.get('call') or '', 'model(inputs)'))}")
    st.code(_ui.recorded_text(f.get("message") or "", roots), language=None, wrap_lines=True)
    if f.get("traceback"):
        with st.expander("Traceback"):
            st.code(_ui.recorded_text(f["traceback"], roots), language="python")


CALL_TEXT = {"kwargs": "model(**inputs)", "args": "model(*inputs)", "single": "model(inputs)",
             "args_kwargs": "model(*args, **kwargs)"}


def show_request_culprit(report: dict) -> None:
    """The culprit of a replayed request as a service sees it: field, token id, shape."""
    q = report.get("request") or {}
    if not q.get("detail"):
        return
    st.error(_ui.md(q["detail"]), icon=":material/target:")
    c = st.columns(4)
    c[0].metric("Input field", q.get("field") or "—")
    if q.get("value") is not None and q.get("token_id") is None:
        c[1].metric("Value", f"{q['value']:g}", help="the one-element input that reached the op "
                                                    "which turned finite values into NaN/Inf")
    else:
        c[1].metric("Token id", "—" if q.get("token_id") is None else str(q["token_id"]),
                    help=None if q.get("vocab_size") is None else f"vocabulary [0, {q['vocab_size']})")
    c[2].metric("Position", "—" if q.get("position") is None else str(q["position"]))
    c[3].metric("Shape", "—" if q.get("shape") is None else
                f"{q.get('dtype') or ''}[{', '.join(map(str, q['shape']))}]")
