"""Home: what debugkit is, and the runs it serves."""

import streamlit as st

from pages import _common

_common.page_guard()

st.title("debugkit")
st.markdown(
    "Debug PyTorch training runs from symptom to root cause. The **Recorder** in your "
    "training loop writes gradient norms, losses, memory and step times, and on a failing "
    "step it captures the batch, the model and optimizer state, the RNG state and the "
    "error. This dashboard reads those runs, live while they train."
)

entries = _common.run_entries()
if not entries:
    st.info("No runs found. Record one with `debugkit.Recorder` (see the README's quick start) "
            f"into the run store ({_common.store_dir()}), or upload a run in the sidebar.")
    st.stop()

from debugkit.io import store as run_store  # noqa: E402

rows = []
for rid, path in entries:
    rows.append(run_store.summarize(run_store.RunEntry(rid, __import__("pathlib").Path(path), None)))

st.subheader("Runs")
st.dataframe(
    [{k: r[k] for k in ("id", "name", "status", "steps", "failures")} for r in rows],
    hide_index=True, width="stretch",
    column_config={"failures": st.column_config.NumberColumn("failures", help="failure captures")},
)
cols = st.columns(min(4, len(rows)) or 1)
for i, r in enumerate(rows):
    with cols[i % len(cols)]:
        if st.button(f"Open {r['id']}", key=f"open_{r['id']}", width="stretch"):
            _common._select(r["path"], r["id"])
            st.switch_page("pages/overview.py", query_params={"run": r["id"]})
