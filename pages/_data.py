"""The pages' data layer: cached readers of a run's tables, its summary and its findings.

One typed reader per table (``read_scalars(path)``, ``read_grad_norms(path)`` ...), each a
thin cached wrapper over the :class:`debugkit.Run` method of the same name (whose
docstring lists the columns). Run-derived caches are keyed on the run's path and its
files' sizes and modification times (:func:`signature`), so a live run refreshes, and
bounded (:data:`CACHE`: ``max_entries``/``ttl``) so memory does not grow with the number
of runs opened. Findings always come from :mod:`debugkit.diagnose`.
"""

from __future__ import annotations

import streamlit as st

from debugkit.errors import DebugkitError
from pages._ui import show_error

CACHE = {"max_entries": 32, "ttl": 900}


def _open(path: str):
    from debugkit.io.run import open_run

    return open_run(path)


def signature(path: str) -> tuple:
    """The run's files' signature (names, sizes, modification times): the cache key."""
    return _open(path).files_signature()


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
    s["status"] = _open(path).status
    return s


@st.cache_data(**CACHE, show_spinner=False)
def _findings(path: str, sig: tuple) -> list:
    from debugkit.diagnose import diagnose

    return diagnose(_open(path))


def findings(path: str) -> list:
    """What `debugkit diagnose` finds in a run (list of ``Finding``, ordered by step;
    cached on the run's files). Raises ``DebugkitError`` for a run that cannot be read."""
    return _findings(path, signature(path))


# ---------------------------------------------------------------------------- live refresh
def render_live(path: str, render, every_s: float) -> None:
    """Draw the page with ``render()``; while the run is still being written (status
    ``running``), as a fragment that reruns every ``every_s`` seconds, so the page follows
    the training. A run whose status cannot be read shows the error and stops the page."""
    try:
        status_now = summary(path)["status"]
    except DebugkitError as exc:
        show_error(exc)
        st.stop()
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
