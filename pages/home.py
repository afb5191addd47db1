"""Home: what debugkit is, the runs it serves with what was found in them, and the pages."""

import streamlit as st

from pages import _routing, _runs, _ui

_routing.page_guard()

st.title("debugkit")
st.markdown(
    "Debug PyTorch training runs from symptom to root cause. The **Recorder** in your "
    "training loop writes gradient norms, losses, memory and step times, and on a failing "
    "step it captures the batch, the model and optimizer state, the RNG state and the "
    "error. This dashboard reads those runs, live while they train, finds what went wrong, "
    "and replays the batch that broke a run."
)

entries = _runs.run_entries()
if not entries:
    st.info("No runs found. Record one with `debugkit.Recorder` (see the README's quick start) "
            f"into the run store ({_ui.md(_runs.store_dir())}), or upload a run in the sidebar.")
    st.stop()

from debugkit.diagnose import index as run_index  # noqa: E402
from debugkit.io import store as run_store  # noqa: E402
from debugkit.io.fs import as_path  # noqa: E402

# What each run's analyses found comes from the persisted index (debugkit.diagnose.index),
# which analyses a run again only when its files changed; each served root is listed once.
served = {str(r) for r in _runs.roots()}
with st.spinner("Reading the runs…"):
    rows = run_index.summarize_runs(
        [run_store.RunEntry(rid, as_path(path), as_path(path).parent
                            if str(as_path(path).parent) in served else None)
         for rid, path in entries])

st.subheader("Runs")
st.caption("Each run with its status and what `debugkit diagnose` finds in it.")
STATIC_ROWS = 60  # up to this many runs: a static table, every finding readable in full
OPEN_BUTTONS = 48  # a store of thousands of runs lists them all, with buttons for the first
if len(rows) <= STATIC_ROWS:
    import pandas as pd  # noqa: E402

    table = pd.DataFrame([{k: r[k] for k in ("id", "status", "steps", "failures", "errors", "warnings", "top")}
                          for r in rows]).astype({"errors": "Int64", "warnings": "Int64"})
    table["id"] = table["id"].map(_ui.md)
    table["top"] = table["top"].map(_ui.md)
    st.table(table.rename(columns={"top": "most severe finding"}).set_index("id"))
else:
    st.dataframe(
        [{k: r[k] for k in ("id", "status", "steps", "failures", "errors", "warnings", "top")} for r in rows],
        hide_index=True, width="stretch",
        column_config={
            "failures": st.column_config.NumberColumn("failures", help="failure captures (batch, state, error)"),
            "errors": st.column_config.NumberColumn("errors", help="findings of severity error"),
            "warnings": st.column_config.NumberColumn("warnings", help="findings of severity warning"),
            "top": st.column_config.TextColumn("most severe finding", width="large"),
        },
    )
if len(rows) > OPEN_BUTTONS:
    st.caption(f"Buttons for the first {OPEN_BUTTONS} of {len(rows)} runs; pick any run in the sidebar.")
cols = st.columns(min(4, len(rows)) or 1)
for i, r in enumerate(rows[:OPEN_BUTTONS]):
    with cols[i % len(cols)]:
        if st.button(f"Open {r['id']}", key=f"open_{r['id']}", width="stretch"):
            _runs.select_run(r["path"], r["id"])
            st.switch_page("pages/overview.py", query_params={"run": r["id"]})

if len(rows) >= 2 and _routing.has_page("pages/compare.py"):
    st.subheader("Compare two runs")
    st.caption("What differs between a run and the one that worked, and where they part.")
    ids = [r["id"] for r in rows]
    c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
    a = c1.selectbox("Run to check", ids, key="home_compare_run")
    b = c2.selectbox("Base (the run that worked)", [i for i in ids if i != a], key="home_compare_base")
    if c3.button("Compare", key="home_compare", width="stretch", icon=":material/compare_arrows:"):
        _runs.select_run(next(r["path"] for r in rows if r["id"] == a), a)
        st.switch_page("pages/compare.py", query_params={"run": a, "base": b})

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
    ("pages/compare.py", "Compare", "what differs from the run that worked, and where they diverge"),
    ("pages/audit.py", "Bias audit", "SHAP and fairness per group, shareable read-only"),
]
cols = st.columns(2)
for i, (f, title, what) in enumerate(PAGES):
    with cols[i % 2]:
        if _routing.has_page(f):
            st.page_link(f, label=f"**{title}**: {what}")
