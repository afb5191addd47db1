"""Gradients: a layer x step heatmap, per-layer lines, findings, and one step's details.

Deep link: ``?run=<id>&step=<int>`` opens that step's details (``&failure=<id>`` picks
a capture's step when no step is given; ``&rank=<int>`` a rank). The rest of the view is
in the URL too: ``?module=`` (repeated) and ``?grad_regex=`` the layer filters,
``?grad_clip=`` the what-if clip, ``?line=`` (repeated) the layers drawn as lines,
``?explode_factor=`` ``?vanish_rel=`` ``?spike_mads=`` the thresholds, ``?with=`` the
runs overlaid, ``?lines=1`` the per-layer lines opened (a link with ``?line=``, ``?with=``
or ``?grad_clip=`` opens them too; defaults left out; a value the page cannot use is a
warning).
"""

import math

import streamlit as st

from debugkit.analysis.gradients.clipping import compute_clip_whatif
from debugkit.analysis.gradients.config import DEFAULTS
from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
from debugkit.analysis.gradients.layers import default_line_layers, group_rows, module_prefixes, select_layers
from debugkit.analysis.gradients.matrix import TOTAL, pivot_grad_norms
from debugkit.analysis.gradients.steps import compute_step_details, nearest_failure, scalars_at_step
from debugkit.charts.gradients import build_grad_heatmap_figure, build_grad_lines_figure
from debugkit.errors import DebugkitError, InvalidInputError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()
path = _runs.require_run("the gradients")

MAX_LINES = 12
#: The detector thresholds the page offers, with the range a link may set them to.
THRESHOLDS = {"explode_factor": (1.5, 1e6), "vanish_rel": (1e-12, 1.0), "spike_mads": (1.0, 1e3)}
MAX_STEP = 10**12
STEP_KEY = "grad_step"


# ----------------------------------------------------------------------------- cached work
@st.cache_data(**_data.CACHE, show_spinner=False)
def _matrices(path: str, sig: tuple):
    return pivot_grad_norms(_data.read_grad_norms(path))


@st.cache_data(**_data.CACHE, show_spinner=False)
def _findings(path: str, sig: tuple, config: tuple):
    """What `debugkit diagnose` finds about gradients and losses (with ``config``), and the
    run's step failures, in its order, from the cached matrices and scalars (read only
    when this is not cached)."""
    changed = {k: v for k, v in config if v != DEFAULTS.get(k)}  # thresholds the visitor changed
    return _data.findings(path, sources=("failures", "gradients"),
                          config={"gradients": changed} if changed else None,
                          inputs={"gradients": {"matrices": _matrices(path, sig),
                                                "scalars": _data.read_scalars(path)}})


@st.cache_data(**_data.CACHE, show_spinner=False)
def _bins(path: str, sig: tuple, rank: int, rows: tuple):
    return compute_heatmap_bins(_matrices(path, sig)[rank], 300, rows=list(rows))


# ----------------------------------------------------------------------------- query params
def _initial_step(failures):
    """The step named by ?step= (or ?failure=), validated; None when absent."""
    step = _query.query_int("step", low=0, high=MAX_STEP)
    by_id = {f.get("id"): f for f in reversed(failures)}  # the first capture of an id wins
    fid = _query.query_choice("failure", by_id,
                              lambda v: f"?failure={str(v)[:80]!r}: no such failure capture in this run")
    if fid and step is None and isinstance(by_id[fid].get("step"), int):
        step = by_id[fid]["step"]
    return step


def _clip_value(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if 0 < v < 1e12 else None


def _other_runs(rank: int) -> dict:
    """Other runs' gradient norms drawn over this run's lines (``?with=<id>``, repeated):
    ``{run id: GradMatrix}`` of the same rank (or the run's first)."""
    entries, picked = _runs.overlay_picker(path, _ui.key_for("grad_with", path), placeholder="other runs, drawn dashed",
                                           help="The same layers of other runs, dashed, as `<layer> · <run>`")
    out = {}
    for rid in picked:
        try:
            mats = _matrices(entries[rid], _data.signature(entries[rid]))
        except DebugkitError as exc:
            st.warning(f"{_ui.md(rid)}: {_ui.md(str(exc))}")
            continue
        if mats:
            out[rid] = mats.get(rank) or next(iter(mats.values()))
    return out


def _set_step(step: int, scroll: bool = False):
    st.session_state[STEP_KEY] = int(step)
    st.query_params["step"] = str(int(step))
    if scroll:  # "Show step N" in the findings: bring its panel into view
        st.session_state[SCROLL_KEY] = True


SCROLL_KEY = "grad_scroll_to_step"
STEP_ANCHOR = "step-details"
# The step panel sits below the charts, often below the fold: after a click on "Show step",
# scroll it into view (once; the panel is drawn after this script runs,
# so wait for it).
_SCROLL_JS = """<script>
(() => {{
  let tries = 0;
  const go = () => {{
    const el = document.getElementById("{anchor}");
    if (el) {{ el.scrollIntoView({{behavior: "smooth", block: "start"}}); return; }}
    if (++tries < 50) setTimeout(go, 100);
  }};
  go();
}})();
</script>"""


def _on_chart_select():
    event = st.session_state.get("grad_lines_chart")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    for p in points:
        cd = p.get("customdata")
        if isinstance(cd, (list, tuple)):
            cd = cd[0] if cd else None
        if cd is None:
            cd = p.get("x")
        try:
            _set_step(int(round(float(cd))))
            return
        except (TypeError, ValueError):
            continue


# ----------------------------------------------------------------------------- sections
def _findings_panel(findings, rank):
    st.subheader("Findings")

    def show_step(f, i):
        if f.step is not None:
            st.button(f"Show step {f.step}", key=f"finding_{i}", on_click=_set_step,
                      args=(f.step, True), icon=":material/zoom_in:", type="tertiary")

    _ui.show_findings(findings, empty="No gradient or loss problem found.", summary="",
                      scroll_over=4, action=show_step, roots=_data.recorded_roots(path))


def _step_details(m, step, scalars, failures, rid, findings=()):
    shown, table = compute_step_details(m, step, findings=findings)
    st.subheader(f"Step {shown}" + (f" · rank {m.rank}" if len(_matrices(path, _sig())) > 1 else ""),
                 anchor=STEP_ANCHOR)
    if st.session_state.pop(SCROLL_KEY, False):
        st.html(_SCROLL_JS.format(anchor=STEP_ANCHOR), unsafe_allow_javascript=True, width="content")
    if shown != step:
        st.caption(f"Step {step} has no gradient norms logged; showing the nearest logged step, {shown}.")
    vals = scalars_at_step(scalars, shown, m.rank)
    losses = {k: v for k, v in vals.items() if "loss" in k.rsplit("/", 1)[-1].lower()}
    lrs = {k: v for k, v in vals.items() if k == "lr" or k.startswith("lr/")}
    total = table[table["layer"] == TOTAL]
    cols = st.columns(4)
    for k, v in list(losses.items())[:1] or [("loss", None)]:
        cols[0].metric(k, "—" if v is None else f"{v:.4g}")
    for k, v in list(lrs.items())[:1] or [("lr", None)]:
        cols[1].metric("learning rate" if k == "lr" else k, "—" if v is None else f"{v:.4g}")
    if len(total):
        tv, tr = float(total["grad_norm"].iloc[0]), float(total["ratio"].iloc[0])
        cols[2].metric("total grad norm", f"{tv:.4g}")
        cols[3].metric("vs. recent median", "—" if not math.isfinite(tr) else f"{tr:.2f}x")
    others = {k: v for k, v in vals.items() if k not in losses and k not in lrs}
    if len(losses) > 1 or len(lrs) > 1 or others:
        st.caption(" · ".join(f"{_ui.md(k)} = {v:.4g}" for k, v in {**losses, **lrs, **others}.items()))
    fail = nearest_failure(failures, shown, m.rank)
    if fail:
        same = fail["step"] == shown
        st.markdown(f":material/bug_report: Failure capture **{_ui.md(fail['id'])}** at step "
                    f"{_ui.md(fail['step'])}"
                    + (" (this step)" if same else f" ({abs(fail['step'] - shown)} steps away)")
                    + f": {_ui.md(fail.get('error_type') or fail.get('kind'))}")
        if not _routing.link_to("pages/replay.py", "Replay this capture", icon=":material/replay:",
                               run=rid, failure=fail["id"], step=fail["step"]):
            st.caption(f"Capture folder: {_ui.code(_ui.visitor_text(fail.get('path')))} (batch, model, optimizer and RNG state "
                       "of that step, for replay).")
    else:
        st.caption("No failure capture in this run.")
    # Shown as text so that NaN/Inf read as such (a numeric column would show a blank).
    shown_table = table.assign(
        grad_norm=[_num(v) for v in table["grad_norm"]],
        trailing_median=[_num(v, "—") for v in table["trailing_median"]],
        ratio=[_num(v, "—", ".2f") for v in table["ratio"]])
    st.dataframe(
        shown_table, hide_index=True, width="stretch",
        column_config={
            "layer": st.column_config.TextColumn("layer"),
            "grad_norm": st.column_config.TextColumn("grad norm"),
            "trailing_median": st.column_config.TextColumn("median of previous 20"),
            "ratio": st.column_config.TextColumn("ratio to median"),
            "status": st.column_config.TextColumn("status"),
        },
        height=min(600, 35 * len(table) + 40))


def _num(v, nan="NaN", spec=".4g") -> str:
    v = float(v)
    if math.isnan(v):
        return nan
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return format(v, spec)


#: What opens the per-layer lines on a link: the layers drawn, the runs overlaid, the clip.
LINES_PARAMS = ("line", "with", "grad_clip")


def _open_lines():
    st.session_state["grad_lines_open"] = True  # the clip is shaded on the lines: show them


def _lines(m, rank, rank_findings, layers, modules, regex, clip, step, fail_steps):
    """The per-layer lines (click a point: that step's details), built only when opened:
    the heatmap is the page's first chart, and a second figure sent and drawn with it
    delayed it (issue 35 item 9). A link that names lines, overlaid runs or a clip opens
    them (``?lines=1`` otherwise)."""
    default = default_line_layers(m, rank_findings, layers, limit=6)
    lines_key = f"grad_lines_pick_{rank}_{hash((tuple(modules), regex))}"
    if clip is not None:
        n = int(clip.clipped.sum())
        st.caption(f"clip_grad_norm_(max_norm={clip.max_norm:g}) would have clipped {n:,} of "
                   f"{m.n_steps:,} logged steps ({100 * clip.fraction:.1f} %), shaded in orange on the lines"
                   + (f"; {int(clip.nonfinite.sum())} step(s) had a non-finite total that clipping "
                      "cannot repair" if clip.nonfinite.any() else "") + ".")
    box = _query.expander("Lines per layer · click a point to see that step", "grad_lines_open",
                          name="lines", default=any(p in st.query_params for p in LINES_PARAMS),
                          run_path=path, icon=":material/show_chart:")
    if not box.open:
        _ui.keep_widget_state("grad_lines_pick_", "grad_with")  # kept while closed
        return
    with box:
        # the lines drawn are ?line=<parameter> (repeated); a new filter starts from its default
        _query.list_from_query(lines_key, layers, name="line",
                               expected="a parameter that these filters show")
        st.session_state[lines_key] = [p for p in st.session_state.get(lines_key, default)
                                       if p in layers][:MAX_LINES]
        chosen = st.multiselect("Lines", layers, max_selections=MAX_LINES, key=lines_key,
                                help="Layers drawn as lines (the total is always drawn).")
        _query.list_to_query(lines_key, chosen, default, name="line")
        others = _other_runs(rank)
        fig = build_grad_lines_figure(m, chosen, clip=clip, selected_step=step, failure_steps=fail_steps,
                                      others=others)
        _ui.chart(fig, key="grad_lines_chart", on_select=_on_chart_select, selection_mode="points")
        st.caption("Click a point to see that step. NaN/Inf values are the pink x markers at the top; "
                   "exactly-zero gradients the grey triangles at the bottom.")


def _sig():
    return _data.signature(path)


def render():
    try:
        sig = _sig()
        info = _data.summary(path)
        mats = _matrices(path, sig)
        scalars = _data.read_scalars(path)
        failures = _data.read_failures(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    rid = _runs.run_id_for(path)
    st.title("Gradients")
    _ui.about("The L2 norm of each parameter's gradient at every logged step (the Recorder takes it after backward, before the optimizer step). The heatmap shows every layer over time on a log scale (magenta: NaN/Inf, grey: exactly 0); the findings on the right name the first layer and step that went wrong (non-finite, exploding, vanishing, dead layers, loss spikes), and *Show step* jumps to it.")
    st.caption(f"{_ui.md(info['name'])} · {info['status']}"
               + (" · live: refreshes every few seconds" if info["status"] == "running" else ""))
    if not mats:
        st.info("This run has no gradient norms yet. The Recorder logs them every `log_every` steps "
                "once `rec.step(...)` wraps a step with a backward pass.", icon=":material/info:")
        return

    try:
        first = _initial_step(failures)
        want_rank = _query.query_int("rank", low=0, high=1_000_000)
    except InvalidInputError as exc:
        _ui.show_error(exc)
        first, want_rank = None, None
    if first is not None and st.session_state.get("grad_step_link") != (rid, first):
        st.session_state["grad_step_link"] = (rid, first)
        st.session_state[STEP_KEY] = first

    ranks = sorted(mats)
    if want_rank is not None and want_rank not in ranks:
        st.warning(f"?rank={want_rank}: this run has no gradient norms from that rank "
                   f"(ranks: {', '.join(map(str, ranks))}); showing rank {ranks[0]}.")
    # The controls are popovers named after their values, in a bar above the heatmap: the
    # browser draws a popover's widgets when it is opened, so their code (a select box's
    # and a multiselect's ~20 files) is not loaded before the heatmap (_ui.controls).
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small")
    # the rank picked, seeded from ?rank= once per distinct value (a rank the run lacks: the
    # warning above, and the first rank)
    _query.from_query("grad_rank_pick", lambda v: int(v) if v.isdigit() and int(v) in ranks else None,
                      name="rank")
    if st.session_state.get("grad_rank_pick") not in ranks:
        st.session_state["grad_rank_pick"] = ranks[0]
    rank = st.session_state["grad_rank_pick"]
    if len(ranks) > 1:
        with bar, _ui.controls(f"Rank {rank}", icon=":material/dns:"):
            rank = st.selectbox("Rank", ranks, key="grad_rank_pick")
    _query.to_query("grad_rank", str(rank), str(ranks[0]), name="rank")
    m = mats[rank]
    tree = module_prefixes(m.layers)
    # The layer filters and the clip travel in the URL (?module=, repeated; ?layers=<regex>;
    # ?clip=<max_norm>), so a pasted link shows the same layers.
    prefixes = [p for p, _, _ in tree]
    _query.list_from_query("grad_modules", prefixes, name="module", expected="a module of this model")
    st.session_state["grad_modules"] = [p for p in st.session_state.get("grad_modules") or []
                                        if p in prefixes]
    _query.from_query("grad_regex", lambda v: v[:200])
    _query.from_query("grad_clip", _clip_value)
    picked_mods, rx_now = st.session_state["grad_modules"], st.session_state.get("grad_regex") or ""
    with bar, _ui.controls("Layers", picked_mods + ([f"/{rx_now}/"] if rx_now else []),
                           none=f"all {len(m.layers)}", icon=":material/filter_alt:"):
        modules = st.multiselect(
            "Modules", prefixes, key="grad_modules",
            format_func=lambda p: next(("\u2003" * (d - 1) + f"{p} ({n})" for q, d, n in tree if q == p), p),
            placeholder="all modules", help="Parameters under any chosen module (a module tree, in model order).")
        regex = st.text_input("Layer regex", placeholder=r"e.g. attn|\.bias$", key="grad_regex",
                              help="Python regular expression searched in each parameter name.")
    clip_now = st.session_state.get("grad_clip")
    with bar, _ui.controls("What-if clip", "off" if clip_now is None else f"{clip_now:g}",
                           icon=":material/content_cut:"):
        max_norm = st.number_input("What-if clip max_norm", min_value=0.0, value=None, step=0.1,
                                   format="%.3g", placeholder="off", key="grad_clip",
                                   on_change=_open_lines,
                                   help="Shade the steps torch.nn.utils.clip_grad_norm_(max_norm) "
                                        "would have clipped.")
    _query.list_to_query("grad_modules", modules, [], name="module")
    _query.to_query("grad_regex", regex or "", "")
    _query.to_query("grad_clip", "" if max_norm is None else f"{max_norm:g}", "")
    # The detectors' thresholds travel too (?explode_factor= ?vanish_rel= ?spike_mads=): a
    # link shows the findings its sender saw.
    for name, (low, high) in THRESHOLDS.items():
        _query.from_query(f"grad_{name}", _query.number_in(low, high), name=name,
                          expected=f"a number from {low:g} to {high:g}")
        st.session_state.setdefault(f"grad_{name}", float(DEFAULTS[name]))
    with bar, _ui.controls("Thresholds", icon=":material/tune:"):
        ef = st.number_input("explode_factor", min_value=1.5, max_value=1e6, key="grad_explode_factor")
        vr = st.number_input("vanish_rel", min_value=1e-12, max_value=1.0, format="%.1e",
                             key="grad_vanish_rel")
        sm = st.number_input("spike_mads", min_value=1.0, max_value=1e3, key="grad_spike_mads")
        st.caption("See docs/gradients.md for every threshold.")
    config = (("explode_factor", ef), ("vanish_rel", vr), ("spike_mads", sm))
    for name, value in config:
        _query.to_query(f"grad_{name}", f"{value:g}", f"{float(DEFAULTS[name]):g}", name=name)

    try:
        layers = select_layers(m.layers, modules, regex)
        findings = _findings(path, sig, config)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if not layers:
        st.warning("No parameter matches this filter.", icon=":material/filter_alt_off:")
        return
    rank_findings = [f for f in findings if f.rank in (None, rank)]
    clip = compute_clip_whatif(m, max_norm) if max_norm else None
    step = st.session_state.get(STEP_KEY)
    fail_steps = [f["step"] for f in failures if isinstance(f.get("step"), int) and f.get("rank") in (None, rank)]

    left, right = st.columns([3, 1.25])
    with right:
        _findings_panel(rank_findings, rank)
    with left:
        rows = tuple(layers + [TOTAL])
        bins = _bins(path, sig, rank, rows)
        groups = group_rows(layers)
        st.markdown(f"**log10 gradient norm per layer** · {len(layers)} of {len(m.layers)} parameters · "
                    f"{m.n_steps:,} logged steps in {len(bins.start_step)} bins (each shows its max)")
        _ui.chart(build_grad_heatmap_figure(bins, groups=groups, selected_step=step,
                                                  failure_steps=fail_steps), key="grad_heatmap")
        _lines(m, rank, rank_findings, layers, modules, regex, clip, step, fail_steps)

    if step is not None:
        st.divider()
        _step_details(m, step, scalars, failures, rid, rank_findings)
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_ui.md(_ui.visitor_text(w))}")


_data.render_live(path, render, every_s=3)
