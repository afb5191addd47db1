"""The pages' data layer: cached readers of a run's tables, its summary and its findings.

One typed reader per table (``read_scalars(path)``, ``read_grad_norms(path)`` ...), each a
thin cached wrapper over the :class:`debugkit.Run` method of the same name (whose
docstring lists the columns). Run-derived caches are keyed on the run's path and its
files' sizes and modification times (:func:`signature`), so a live run refreshes, and
bounded (:data:`CACHE`: ``max_entries``/``ttl``) so memory does not grow with the number
of runs opened. Findings always come from :mod:`debugkit.diagnose`.

A run is opened once per script run (:func:`opened`: its manifest read and its files
listed once, however many readers a page calls); a cache miss reads from a copy of that
opened run (:meth:`Opened.fresh`), so its warnings are its own.
"""

from __future__ import annotations

import streamlit as st

from debugkit.errors import DebugkitError
from pages._ui import end_page, show_error

CACHE = {"max_entries": 32, "ttl": 900}


class Opened:
    """A run opened for one script run: the :class:`debugkit.Run` and its files'
    signature (listed at most once)."""

    __slots__ = ("run", "_sig")

    def __init__(self, run):
        self.run = run
        self._sig: tuple | None = None

    @property
    def sig(self) -> tuple:
        if self._sig is None:
            self._sig = self.run.files_signature()
        return self._sig

    def fresh(self):
        """The run as :func:`debugkit.io.run.open_run` returns it (its own, empty
        ``warnings``), without reading the manifest again."""
        import copy

        run = copy.copy(self.run)
        run.warnings = []
        return run


def _rerun_token():
    """An object that stays the same for one script run (the whole page, or one rerun of
    a fragment) and is new for the next: the context's cursor map, which Streamlit
    replaces at the start of every run and of every fragment rerun. None outside a
    script run (bare mode)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return (ctx, ctx.cursors) if ctx is not None else None


def opened(path: str) -> Opened:
    """The run at ``path``, opened once per script run (raises like ``open_run``)."""
    from debugkit.io.run import open_run

    token = _rerun_token()
    if token is None:
        return Opened(open_run(path))
    ctx, cursors = token
    memo = getattr(ctx, "_debugkit_opened", None)
    if memo is None or memo[0] is not cursors:
        memo = (cursors, {})
        ctx._debugkit_opened = memo  # dies with the session's context
    found = memo[1].get(path)
    if found is None:
        found = memo[1][path] = Opened(open_run(path))
    return found


def _open(path: str):
    """A copy of the opened run for one reader (a cache miss)."""
    return opened(path).fresh()


def signature(path: str) -> tuple:
    """The run's files' signature (names, sizes, modification times): the cache key."""
    return opened(path).sig


# ---------------------------------------------------------------------------- tables
@st.cache_data(**CACHE, show_spinner=False)
def _scalars(path: str, sig: tuple):
    return _open(path).scalars()


def read_scalars(path: str):
    """:meth:`debugkit.Run.scalars` (DataFrame ``step, rank, key, value, wall_time``), cached."""
    return _scalars(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _grad_norms(path: str, sig: tuple):
    return _open(path).grad_norms()


def read_grad_norms(path: str):
    """:meth:`debugkit.Run.grad_norms` (DataFrame ``step, rank, layer, grad_norm``), cached."""
    return _grad_norms(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _steps(path: str, sig: tuple):
    return _open(path).steps()


def read_steps(path: str):
    """:meth:`debugkit.Run.steps` (step timing DataFrame), cached."""
    return _steps(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _memory(path: str, sig: tuple):
    return _open(path).memory()


def read_memory(path: str):
    """:meth:`debugkit.Run.memory` (memory per step DataFrame), cached."""
    return _memory(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _memory_capacity(path: str, sig: tuple):
    return _open(path).memory_capacity()


def read_memory_capacity(path: str):
    """:meth:`debugkit.Run.memory_capacity` (memory each rank may use), cached."""
    return _memory_capacity(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _memory_snapshots(path: str, sig: tuple) -> list[dict]:
    return _open(path).memory_snapshots()


def read_memory_snapshots(path: str) -> list[dict]:
    """:meth:`debugkit.Run.memory_snapshots` (the PyTorch memory snapshots), cached."""
    return _memory_snapshots(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _failures(path: str, sig: tuple) -> list[dict]:
    return _open(path).failures()


def read_failures(path: str) -> list[dict]:
    """:meth:`debugkit.Run.failures` (failure captures, by step then rank), cached."""
    return _failures(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _profiles(path: str, sig: tuple) -> list[dict]:
    return _open(path).profiles()


def read_profiles(path: str) -> list[dict]:
    """:meth:`debugkit.Run.profiles` (profiles, traces and stack dumps, oldest first), cached."""
    return _profiles(path, signature(path))


def recorded_roots(path: str, *records: dict | None) -> tuple[str, ...]:
    """The recording machine's folders of the run at ``path`` (and of ``records``, such as
    a failure capture): what a recorded path is shown relative to
    (:func:`debugkit.analysis.recorded_paths.recorded_roots`; with :func:`pages._ui.recorded_text`)."""
    from debugkit.analysis.recorded_paths import recorded_roots as roots

    return roots(opened(path).run.manifest, *records)


# ---------------------------------------------------------------------------- summary, findings
@st.cache_data(**CACHE, show_spinner=False)
def _summary(path: str, sig: tuple):
    run = _open(path)
    return {"manifest": run.manifest, "status": run.status, "ranks": run.ranks,
            "env": run.env(), "name": run.name, "warnings": list(run.warnings),
            "time_span": run.time_span()}


def summary(path: str) -> dict:
    """Manifest, status, ranks and environment of a run (status is never cached long)."""
    s = dict(_summary(path, signature(path)))
    s["status"] = opened(path).run.status
    return s


@st.cache_data(**CACHE, show_spinner=False)
def _findings(path: str, sig: tuple, sources: tuple | None, config: str, _inputs: dict | None,
              outside: tuple = ()) -> list:
    import json

    from debugkit.diagnose import SOURCES, arrange, diagnose
    from debugkit.diagnose.run_summaries import cached_findings

    if config == "{}":  # the default thresholds: what the run list's index holds, if it does
        names = [s for s in SOURCES if sources is None or s in sources]
        if outside and "audit" in names:
            # audits stored outside the run (the machine's store, the team's shared audit
            # store) are not in the run's files the index is keyed on: the audit source runs
            # now (it reads audit.json files only), the others come from the index
            rest = [s for s in names if s != "audit"]
            found = cached_findings(path, sig, rest) if rest else []
            if found is not None:
                return arrange(found + diagnose(_open(path), sources=["audit"]))
        else:
            found = cached_findings(path, sig, sources)
            if found is not None:
                return found
    return diagnose(_open(path), json.loads(config), sources=None if sources is None else list(sources),
                    inputs=_inputs)


def findings(path: str, *, sources=None, config: dict | None = None, inputs: dict | None = None) -> list:
    """What `debugkit diagnose` finds in a run (list of ``Finding``, in its order; cached on
    the run's files): the one way a page gets findings. ``sources`` keeps to some of
    :data:`debugkit.diagnose.SOURCES` (a page's area), ``config`` is the page's thresholds
    by source, ``inputs`` what the page has already read from this run (by source; they
    follow from the run's files, so they are not part of the cache key). With the default
    thresholds (no ``config``) they come from the run list's index
    (:func:`debugkit.diagnose.run_summaries.cached_findings`) when it holds the run as it is now,
    so a new server shows them without running the detectors again. Raises
    ``DebugkitError`` for a run that cannot be read."""
    import json

    from debugkit.audit.stored_audits import audits_signature

    key = json.dumps(config or {}, sort_keys=True)
    outside = ()
    if sources is None or "audit" in sources:
        try:  # audits of the run stored outside it (a key: one computed elsewhere shows)
            outside = tuple(d for d in audits_signature(path) if d[1])
        except (OSError, DebugkitError):
            outside = ()  # the shared store cannot be listed: the Bias audit page says so
    return _findings(path, signature(path), None if sources is None else tuple(sources), key, inputs,
                     outside)


# ---------------------------------------------------------------------------- live refresh
def render_live(path: str, render, every_s: float) -> None:
    """Draw the page with ``render()``; while the run is still being written (status
    ``running``), as a fragment that reruns every ``every_s`` seconds, so the page follows
    the training. A run whose status cannot be read shows the error and stops the page."""
    try:
        status_now = summary(path)["status"]
    except DebugkitError as exc:
        show_error(exc)
        end_page()
    if status_now == "running":
        st.fragment(render, run_every=every_s)()
    else:
        render()


@st.cache_data(**CACHE, show_spinner=False)
def _layer_stats(path: str, sig: tuple):
    return _open(path).layer_stats()


def read_layer_stats(path: str):
    """:meth:`debugkit.Run.layer_stats` (DataFrame ``step, rank, order, module, module_type,
    stat, value``), cached."""
    return _layer_stats(path, signature(path))


@st.cache_data(**CACHE, show_spinner=False)
def _requests(path: str, sig: tuple):
    return _open(path).requests()


def read_requests(path: str):
    """:meth:`debugkit.Run.requests` (an inference run's requests: ``request, rank,
    wall_time, latency_ms, outcome, ...``; empty for a training run), cached."""
    return _requests(path, signature(path))
