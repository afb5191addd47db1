"""Home: what debugkit is, the runs it serves with what was found in them, and the pages."""

from pathlib import Path

import streamlit as st

from pages import _common

_common.page_guard()

st.title("debugkit")
st.markdown(
    "Debug PyTorch training runs from symptom to root cause. The **Recorder** in your "
    "training loop writes gradient norms, losses, memory and step times, and on a failing "
    "step it captures the batch, the model and optimizer state, the RNG state and the "
    "error. This dashboard reads those runs, live while they train, finds what went wrong, "
    "and replays the batch that broke a run."
)

entries = _common.run_entries()
if not entries:
    st.info("No runs found. Record one with `debugkit.Recorder` (see the README's quick start) "
            f"into the run store ({_common.md(_common.store_dir())}), or upload a run in the sidebar.")
    st.stop()

from debugkit.io import store as run_store  # noqa: E402

rows = []
with st.spinner("Reading the runs…"):
    for rid, path in entries:
        r = run_store.summarize(run_store.RunEntry(rid, Path(path), None))
        r.update(_common.findings_counts(path))
        rows.append(r)

st.subheader("Runs")
st.caption("Each run with its status and what `debugkit diagnose` finds in it.")
# A static table: every run and its whole finding visible, no scroll box to read it in.
import pandas as pd  # noqa: E402

table = pd.DataFrame([{k: r[k] for k in ("id", "status", "steps", "failures", "errors", "warnings", "top")}
                      for r in rows]).astype({"errors": "Int64", "warnings": "Int64"})
table["id"] = table["id"].map(_common.md)
table["top"] = table["top"].map(_common.md)
st.table(table.rename(columns={"top": "most severe finding"}).set_index("id"))
cols = st.columns(min(4, len(rows)) or 1)
for i, r in enumerate(rows):
    with cols[i % len(cols)]:
        if st.button(f"Open {r['id']}", key=f"open_{r['id']}", width="stretch"):
            _common._select(r["path"], r["id"])
            st.switch_page("pages/overview.py", query_params={"run": r["id"]})

st.subheader("Where to look")
PAGES = [
    ("pages/overview.py", "Overview", "status, loss curve and failures of one run"),
    ("pages/scalars.py", "Scalars", "every logged scalar and the learning rate, smoothed, several at once"),
    ("pages/gradients.py", "Gradients", "which layer's gradient went NaN, exploded or vanished, and when"),
    ("pages/memory.py", "Memory", "memory timelines, leaks, and who holds memory (snapshots)"),
    ("pages/profiler.py", "Profiler", "where the step's time goes: py-spy and torch.profiler"),
    ("pages/distributed.py", "Distributed", "stragglers, hangs and collectives across ranks"),
    ("pages/checkpoints.py", "Checkpoints", "weights across checkpoints: NaN/Inf, frozen layers, compare, resume"),
    ("pages/replay.py", "Replay", "re-run the captured failing batch and point at its cause"),
    ("pages/audit.py", "Bias audit", "SHAP and fairness per group, shareable read-only"),
]
cols = st.columns(2)
for i, (f, title, what) in enumerate(PAGES):
    with cols[i % 2]:
        if _common.has_page(f):
            st.page_link(f, label=f"**{title}**: {what}")
