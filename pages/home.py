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
            "into the run store (`./runs`, or `$DEBUGKIT_STORE`), or upload a run in the sidebar.")
    _ui.end_page()

from debugkit.analysis.kinds import CATALOGUE  # noqa: E402
from debugkit.diagnose import run_summaries as run_index  # noqa: E402

# The page (url path) each catalogue page name lives at.
PAGE_PATHS = {"Overview": "overview", "Scalars": "scalars", "Gradients": "gradients",
              "Memory": "memory", "Profiler": "profiler", "Distributed": "distributed",
              "Checkpoints": "checkpoints", "Replay": "replay", "Compare": "compare",
              "Bias audit": "audit"}


def _read_rows(entries):
    # What each run's analyses found comes from the persisted index (debugkit.diagnose.run_summaries),
    # which analyses a run again only when its files changed; each served root is listed once.
    return run_index.summarize_runs(list(entries))


# A few words per finding kind for the run list; a kind not named here reads as its own
# name ("rank_divergence" -> "Rank divergence").
SHORT = {"step_failure": "Step failed", "nonfinite_loss": "NaN/Inf loss",
         "nonfinite_grad": "NaN/Inf gradient", "exploding_grad": "Exploding gradient",
         "vanishing_grad": "Vanishing gradient", "rank_divergence": "Ranks diverge",
         "memory_leak": "Memory leak"}


def short_title(row) -> str | None:
    """``"Exploding gradient at step 91 (10.bias)"``: the run's most severe finding in a
    few words, or None when nothing was found."""
    kind = row.get("top_kind")
    if not kind:
        top = str(row.get("top") or "")
        if not top.startswith("cannot analyse"):
            return None
        bad = bad_file(top, row.get("path")) or bad_file(top, row.get("id"))
        return "Cannot be analysed" + (f": {bad}" if bad else "")
    text = SHORT.get(kind) or kind.replace("_", " ").capitalize()
    if isinstance(row.get("top_step"), int):
        text += f" at step {row['top_step']}"
    if row.get("top_layer"):
        text += f" ({row['top_layer']})"
    return text


def bad_file(message: str, run_path) -> str | None:
    """The run's file a refusal names (``checkpoints/index.json``), relative to the run,
    so the row says which file without the server's path; None when it names none."""
    mark = f"{run_path}/" if run_path else ""
    if not mark or mark not in message:
        return None
    rest = message.split(mark, 1)[1]
    name = rest.split(":", 1)[0].strip()
    return name if name and len(name) <= 120 and " " not in name else None


def finding_cell(row) -> str | None:
    """The run's most severe finding as a link to the page that explains it: the URL
    (``<page>?run=<id>``) with :func:`short_title` after ``#``, which the column shows as
    the link's text."""
    import urllib.parse

    title = short_title(row)
    if title is None:
        return None
    kind = CATALOGUE.get(row.get("top_kind") or "")
    page = PAGE_PATHS.get(kind.page, "overview") if kind else "overview"
    return f"{page}?run={urllib.parse.quote(row['id'])}#{title}"


def runs_frame(rows):
    """The run list as the table shows it (no paths: ids, facts, one finding title)."""
    import pandas as pd

    from pages._inference import serving_status

    df = pd.DataFrame([{
        "run": r["id"], "kind": r.get("kind") or "training",
        # an inference run says "serving" / "stopped" where a training run says running / finished
        "status": (serving_status(r.get("status") or "unknown") if r.get("kind") == "inference"
                   else r.get("status") or "unknown"),
        "started": r.get("started"), "duration_s": r.get("duration_s"),
        "steps": r.get("steps") if r.get("kind") != "inference" else None,
        "requests": r.get("requests"), "error_rate": r.get("error_rate"),
        "failures": r.get("failures"),
        "errors": r.get("errors"), "warnings": r.get("warnings"),
        "finding": finding_cell(r) or "", "tags": list(r.get("tags") or []),
    } for r in rows])
    df["started"] = pd.to_datetime(df["started"], unit="s", utc=True)
    for c in ("steps", "requests", "failures", "errors", "warnings"):
        df[c] = df[c].astype("Int64")
    for c in ("duration_s", "error_rate"):
        df[c] = df[c].astype("Float64")
    return df


def _since_value(text: str):
    import datetime as dt

    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _filtered(df):
    """The filters (status, tags, search, started on or after) and the rows they keep. The
    filters live in the URL (``?status=`` and ``?tag=`` repeated, ``?q=``, ``?since=YYYY-MM-DD``)
    so a link shows the same list."""
    import pandas as pd

    from pages import _query

    c1, c2, c3, c4 = st.columns([1.4, 1.4, 1.6, 1.6], vertical_alignment="bottom")
    statuses = sorted(df["status"].unique())
    tags = sorted({t for ts in df["tags"] for t in ts})
    _query.list_from_query("home_status", statuses, name="status",
                           expected="the status of a listed run (" + ", ".join(statuses) + ")")
    _query.list_from_query("home_tags", tags, name="tag", expected="a tag of a listed run")
    _query.from_query("home_search", lambda v: v[:200], name="q")
    pick_status = c1.multiselect("Status", statuses, key="home_status", placeholder="any status")
    pick_tags = c2.multiselect("Tags", tags, key="home_tags", placeholder="any tag",
                               disabled=not tags,
                               help="Runs carrying every chosen tag (Recorder(..., tags=[...]))")
    text = c3.text_input("Search", key="home_search", placeholder="run id or finding")
    started = df["started"].dropna()
    since = None
    if len(started):
        lo, hi = started.min().date(), started.max().date()
        if not isinstance(st.session_state.get("home_since"), type(lo)) \
                or not lo <= st.session_state["home_since"] <= hi:
            st.session_state["home_since"] = lo
        _query.from_query("home_since", lambda v: d if (d := _since_value(v)) and lo <= d <= hi else None,
                          name="since", expected=f"a date from {lo} to {hi}")
        since = c4.date_input("Started on or after", min_value=lo, max_value=hi, key="home_since")
        _query.to_query("home_since", since.isoformat() if since else "", lo.isoformat(), name="since")
    _query.list_to_query("home_status", pick_status, [], name="status")
    _query.list_to_query("home_tags", pick_tags, [], name="tag")
    _query.to_query("home_search", text.strip(), "", name="q")
    keep = df["status"].isin(pick_status) if pick_status else pd.Series(True, index=df.index)
    if pick_tags:
        keep &= df["tags"].map(lambda ts: set(pick_tags) <= set(ts))
    if text.strip():
        needle = text.strip().lower()
        keep &= (df["run"].str.lower().str.contains(needle, regex=False)
                 | df["finding"].fillna("").str.lower().str.contains(needle, regex=False)
                 | df["tags"].map(lambda ts: any(needle in t.lower() for t in ts)))
    if since is not None:
        keep &= df["started"].isna() | (df["started"].dt.date >= since)
    return df[keep]


def run_list(rows=None):
    rows = _read_rows(_runs.run_entries()) if rows is None else rows
    st.subheader("Runs")
    live = sum(r.get("status") == "running" for r in rows)  # serving inference runs too
    st.caption("Each run with its status and the most severe thing `debugkit diagnose` finds in "
               "it (click it for the page that explains it). Sort by any column; click a row to "
               "open the run." + (f" {live} running: this list refreshes every few seconds."
                                  if live else ""))
    df = runs_frame(rows)
    shown = _filtered(df)
    if len(shown) < len(df):
        st.caption(f"{len(shown)} of {len(df)} runs match.")
    event = st.dataframe(
        shown, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
        key="home_runs", height=min(38 * len(shown) + 40, 640),
        column_config={
            "run": st.column_config.TextColumn("run", pinned=True),
            "status": st.column_config.TextColumn("status"),
            "started": st.column_config.DatetimeColumn("started (UTC)", format="YYYY-MM-DD HH:mm"),
            "duration_s": st.column_config.NumberColumn("duration", format="%.1f s",
                                                        help="first record to the last step"),
            "kind": st.column_config.TextColumn("kind", help="training, or inference (debugkit.serve)"),
            "steps": st.column_config.NumberColumn("steps"),
            "requests": st.column_config.NumberColumn("requests", help="requests an inference run recorded"),
            "error_rate": st.column_config.NumberColumn(
                "error rate", format="percent", help="requests that raised or returned NaN/Inf"),
            "failures": st.column_config.NumberColumn("failures", help="failure captures (batch, state, error)"),
            "errors": st.column_config.NumberColumn("errors", help="findings of severity error"),
            "warnings": st.column_config.NumberColumn("warnings", help="findings of severity warning"),
            "finding": st.column_config.LinkColumn("most severe finding", display_text=r"#(.*)$",
                                                   width="large"),
            "tags": st.column_config.ListColumn("tags"),
        })
    picked = (event or {}).get("selection", {}).get("rows", []) if event else []
    if picked:
        rid = shown.iloc[picked[0]]["run"]
        path = _runs.run_entries().path(rid)
        if path:
            _runs.select_run(path, rid)
            st.switch_page("pages/overview.py", query_params={"run": rid})
    return rows


with st.spinner("Reading the runs…"):
    first = _read_rows(entries)
if any(r.get("status") == "running" for r in first):
    rows = first
    st.fragment(run_list, run_every=5)()  # a live run: the list follows it
else:
    rows = run_list(first)

if len(rows) >= 2 and _routing.has_page("pages/compare.py"):
    st.subheader("Compare two runs")
    st.caption("What differs between a run and the one that worked, and where they part.")
    ids = [r["id"] for r in rows]
    c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
    # Both pickers offer every run, so choosing one never changes the other's options (a
    # changed option list made Streamlit rebuild the base picker and drop its choice when the
    # rerun of the first pick landed after the second pick).
    a = c1.selectbox("Run to check", ids, key="home_compare_run")
    b = c2.selectbox("Base (the run that worked)", ids, index=1, key="home_compare_base")
    same = a == b
    if c3.button("Compare", key="home_compare", width="stretch", icon=":material/compare_arrows:",
                 disabled=same):
        _runs.select_run(next(r["path"] for r in rows if r["id"] == a), a)
        st.switch_page("pages/compare.py", query_params={"run": a, "base": b})
    if same:
        st.caption("Pick a base other than the run to check.")

st.subheader("Where to look")
PAGES = [
    ("pages/overview.py", "Overview", "status, loss curve and failures of one run"),
    ("pages/scalars.py", "Scalars", "every logged scalar and the learning rate, smoothed, several at once"),
    ("pages/gradients.py", "Gradients", "which layer's gradient went NaN, exploded or vanished, and when"),
    ("pages/layers.py", "Layers", "dead units, saturation, activation growth and update ratios inside the layers"),
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
