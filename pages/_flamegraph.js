// debugkit's flamegraph: an icicle (root on top) or a flame graph (root at the bottom)
// drawn on a canvas, the way speedscope and flamegraph.pl draw theirs. Width: share of the
// samples. Every frame is drawn and its label cut to its width with "…". Hover a frame
// for its file, line and samples; click one to zoom into it (its ancestors stay above it,
// full width); click an ancestor, or the zoomed frame again, or press Escape to zoom out.
// Deeper than `levels` rows, the figure scrolls. From the keyboard (the canvas takes the
// focus): the arrow keys move between a frame, its parent, its widest child and its
// neighbours on the level, Enter zooms into it, Escape zooms out; the tooltip says which
// frame it is (a polite live region, for screen readers).
//
// The run's text (function and file names) reaches the page only through the canvas
// (fillText) and the tooltip's textContent, never as HTML.
//
// data (debugkit.charts.profile.flamegraph_data): name[], parent[] (a row's parent row,
// -1 for the root), samples[], color[] ("#rrggbb"), tip[] (hover lines under the name,
// "\n"-separated), root (the row it opens zoomed into, -1: the root), flame, levels, label.
//
// The canvas says what it shows in data-* attributes (drawn: frames drawn; zoom: the
// zoomed row; hover: the row under the pointer), for the browser tests and the bench.

const ROW = 18;          // px per level
const FONT_PX = 11;
const PAD = 4;           // label padding, px
const MIN_LABEL_PX = 16; // frames narrower than this get no label

function rgb(color) {
  const m = /^#([0-9a-f]{6})$/i.exec(color || "");
  if (!m) return [128, 128, 128];
  const v = parseInt(m[1], 16);
  return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
}

function textColor(color) {  // dark text on light frames, white on dark ones
  const [r, g, b] = rgb(color);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#1f1f1f" : "#ffffff";
}

// Each frame's left edge (in samples), depth, and the frames in drawing order (parents
// first; children widest first, as flamegraph tools sort them).
function layout(d) {
  const n = d.name.length;
  const kids = Array.from({ length: n }, () => []);
  let root = 0;
  for (let i = 0; i < n; i++) {
    const p = d.parent[i];
    if (p >= 0 && p < n && p !== i) kids[p].push(i); else root = i;
  }
  const x0 = new Float64Array(n), depth = new Int32Array(n);
  const order = [root];
  for (let k = 0; k < order.length; k++) {
    const i = order[k];
    let x = x0[i];
    for (const j of kids[i].sort((a, b) => d.samples[b] - d.samples[a] || a - b)) {
      x0[j] = x; depth[j] = depth[i] + 1; x += d.samples[j];
      order.push(j);
    }
  }
  let maxDepth = 0;
  for (const i of order) maxDepth = Math.max(maxDepth, depth[i]);
  // the frames of each level from left to right (keyboard: the neighbour on a level)
  const levels = Array.from({ length: maxDepth + 1 }, () => []);
  for (const i of order) levels[depth[i]].push(i);
  for (const row of levels) row.sort((a, b) => x0[a] - x0[b]);
  return { n, root, kids, x0, depth, maxDepth, order, levels };
}

// What each element shows, to take down when it is given new data: Streamlit calls the
// component again in the same element (a search, a zoom picked on the server) and calls
// the returned clean-up only when the element goes.
const shown = new WeakMap();

export default function (component) {
  const { data: d, parentElement } = component;
  const before = shown.get(parentElement);
  if (before) before();
  for (const old of parentElement.querySelectorAll(":scope > .dk-flame")) old.remove();
  if (!d || !Array.isArray(d.name) || !d.name.length) return undefined;
  const g = layout(d);
  const levels = g.maxDepth + 1;
  const total = levels * ROW;                       // the figure's height
  const view = Math.min(levels, d.levels || 32) * ROW;  // the part shown before it scrolls

  const outer = document.createElement("div");
  outer.className = "dk-flame";
  const scroller = document.createElement("div");
  scroller.className = "dk-flame-scroll";
  scroller.style.height = view + "px";
  const inner = document.createElement("div");
  inner.style.height = total + "px";
  const canvas = document.createElement("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", String(d.label || "Flame graph"));
  const tip = document.createElement("div");
  tip.className = "dk-flame-tip";
  tip.hidden = true;
  tip.setAttribute("role", "status");
  tip.setAttribute("aria-live", "polite");
  inner.append(canvas);
  scroller.append(inner);
  outer.append(scroller, tip);
  parentElement.appendChild(outer);

  const ctx = canvas.getContext("2d");
  const font = `${FONT_PX}px ${getComputedStyle(outer).fontFamily || "sans-serif"}`;
  const widths = new Map();  // label -> px, measured once
  let zoom = Number.isInteger(d.root) && d.root >= 0 && d.root < g.n ? d.root : g.root;
  let above = new Set();     // the zoomed frame's ancestors
  let hover = -1, width = 0, frame = 0;

  function setZoom(i) {
    zoom = i;
    above = new Set();
    for (let p = d.parent[i]; p >= 0 && p < g.n && !above.has(p); p = d.parent[p]) above.add(p);
    canvas.dataset.zoom = String(zoom);
  }

  function measure(s) {
    let w = widths.get(s);
    if (w === undefined) { w = ctx.measureText(s).width; widths.set(s, w); }
    return w;
  }

  function fit(s, room) {  // s, or its start and "…", within room px ("" if under 2 characters fit)
    if (measure(s) <= room) return s;
    let lo = 0, hi = s.length - 1;
    while (lo < hi) {
      const m = (lo + hi + 1) >> 1;
      if (ctx.measureText(s.slice(0, m) + "…").width <= room) lo = m; else hi = m - 1;
    }
    return lo >= 2 ? s.slice(0, lo) + "…" : "";
  }

  const rowY = (depth) => (d.flame ? total - (depth + 1) * ROW : depth * ROW);

  // A frame's box in css px of the whole figure under the current zoom, or null: the
  // zoomed frame's ancestors span the width; its descendants share it by samples.
  function box(i) {
    if (above.has(i)) return [0, width, rowY(g.depth[i])];
    const span = d.samples[zoom] || 1;
    const from = g.x0[zoom];
    if (g.depth[i] < g.depth[zoom] || g.x0[i] < from || g.x0[i] >= from + span) return null;
    if (i !== zoom && g.depth[i] === g.depth[zoom]) return null;
    return [(g.x0[i] - from) / span * width, d.samples[i] / span * width, rowY(g.depth[i])];
  }

  function draw() {
    frame = 0;
    width = scroller.clientWidth;
    if (!width) return;
    const h = scroller.clientHeight, top = scroller.scrollTop;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(h * dpr);
      canvas.style.width = width + "px";
      canvas.style.height = h + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, h);
    ctx.font = font;
    ctx.textBaseline = "middle";
    let drawn = 0;
    for (const i of g.order) {
      const b = box(i);
      if (!b) continue;
      const [x, w, y0] = b;
      const y = y0 - top;
      if (w < 0.2 || y + ROW <= 0 || y >= h) continue;
      drawn++;
      ctx.fillStyle = d.color[i];
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), ROW - 1);
      if (i === hover) {
        ctx.strokeStyle = textColor(d.color[i]);
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x + 0.75, y + 0.75, Math.max(w - 2.5, 0), ROW - 2.5);
      }
      if (w >= MIN_LABEL_PX) {
        const s = fit(String(d.name[i]), w - 2 * PAD);
        if (s) {
          ctx.fillStyle = textColor(d.color[i]);
          ctx.fillText(s, x + PAD, y + ROW / 2);
        }
      }
    }
    canvas.dataset.drawn = String(drawn);
  }

  function redraw() { if (!frame) frame = requestAnimationFrame(draw); }

  function at(ev) {  // the frame under the pointer, or -1
    const r = canvas.getBoundingClientRect();
    const px = ev.clientX - r.left, py = ev.clientY - r.top + scroller.scrollTop;
    for (const i of g.order) {
      const b = box(i);
      if (b && px >= b[0] && px < b[0] + Math.max(b[1], 1) && py >= b[2] && py < b[2] + ROW) return i;
    }
    return -1;
  }

  // the tooltip beside the pointer (ev) or, from the keyboard, under the frame
  function showTip(i, ev) {
    if (i < 0) { tip.hidden = true; return; }
    const head = document.createElement("b");
    head.textContent = String(d.name[i]);
    const lines = String((d.tip && d.tip[i]) || "").split("\n");
    lines.push(i === zoom ? (i === g.root ? "" : "click it again, or press Esc, to zoom out")
      : (above.has(i) ? "click (or Enter) to zoom out to it" : "click (or Enter) to zoom in"));
    tip.replaceChildren(head, ...lines.filter(Boolean).map((s) => {
      const div = document.createElement("div");
      div.textContent = s;
      return div;
    }));
    tip.hidden = false;
    const r = outer.getBoundingClientRect();
    let x, y;
    if (ev) {
      x = ev.clientX - r.left + 14; y = ev.clientY - r.top + 14;
    } else {
      const b = box(i) || [0, 0, 0];
      x = b[0] + Math.min(b[1] / 2, 40); y = b[2] - scroller.scrollTop + ROW + 4;
    }
    tip.style.left = Math.max(0, Math.min(x, r.width - tip.offsetWidth - 4)) + "px";
    tip.style.top = (y + tip.offsetHeight > r.height ? Math.max(0, y - tip.offsetHeight - 22) : y) + "px";
  }

  canvas.addEventListener("mousemove", (ev) => {
    const i = at(ev);
    if (i !== hover) { hover = i; canvas.dataset.hover = String(i); redraw(); }
    canvas.style.cursor = i >= 0 ? "pointer" : "default";
    showTip(i, ev);
  });
  canvas.addEventListener("mouseleave", () => { hover = -1; tip.hidden = true; redraw(); });
  canvas.addEventListener("click", (ev) => {
    const i = at(ev);
    if (i < 0) return;
    setZoom(i === zoom && i !== g.root ? d.parent[i] : i);
    draw();
    showTip(at(ev), ev);
  });
  // the frame the keyboard is on: drawn outlined, named in the tooltip, scrolled into view
  function focusFrame(i) {
    if (i < 0 || !box(i)) return;
    hover = i;
    canvas.dataset.hover = String(i);
    const y = rowY(g.depth[i]);
    if (y < scroller.scrollTop) scroller.scrollTop = y;
    else if (y + ROW > scroller.scrollTop + scroller.clientHeight) scroller.scrollTop = y + ROW - scroller.clientHeight;
    draw();
    showTip(i, null);
  }

  function neighbour(i, step) {  // the next frame drawn on i's level, left (-1) or right (+1)
    const row = g.levels[g.depth[i]];
    for (let k = row.indexOf(i) + step; k >= 0 && k < row.length; k += step) {
      const b = box(row[k]);
      if (b && b[1] >= 0.2) return row[k];
    }
    return -1;
  }

  canvas.addEventListener("keydown", (ev) => {
    const at0 = hover >= 0 && box(hover) ? hover : zoom;
    const deeper = d.flame ? "ArrowUp" : "ArrowDown", shallower = d.flame ? "ArrowDown" : "ArrowUp";
    let to = -2;
    if (ev.key === "Escape") {
      if (zoom === g.root) return;
      setZoom(d.parent[zoom] >= 0 ? d.parent[zoom] : g.root);
      to = hover >= 0 && box(hover) ? hover : zoom;
    } else if (ev.key === "Enter" || ev.key === " ") {
      setZoom(at0 === zoom && at0 !== g.root ? d.parent[at0] : at0);
      to = at0;
    } else if (ev.key === deeper) {
      to = g.kids[at0].length ? g.kids[at0][0] : -1;
    } else if (ev.key === shallower) {
      to = d.parent[at0];
    } else if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") {
      to = neighbour(at0, ev.key === "ArrowLeft" ? -1 : 1);
    } else {
      return;
    }
    ev.preventDefault();
    if (to >= 0 && box(to)) focusFrame(to); else draw();
  });
  // focused from the keyboard (Tab), not by a click: start on the zoomed frame
  canvas.addEventListener("focus", () => { if (hover < 0 && canvas.matches(":focus-visible")) focusFrame(zoom); });
  canvas.addEventListener("blur", () => { tip.hidden = true; });
  scroller.addEventListener("scroll", () => { tip.hidden = true; hover = -1; redraw(); }, { passive: true });
  const ro = new ResizeObserver(() => { if (scroller.clientWidth !== width) draw(); });
  ro.observe(scroller);

  // labels measured before the page's font arrived are measured again with it
  if (document.fonts && document.fonts.status !== "loaded") {
    document.fonts.ready.then(() => { widths.clear(); redraw(); });
  }

  setZoom(zoom);
  // open at the zoomed frame's level (a flame graph at its bottom, where the root is)
  const y = rowY(g.depth[zoom]);
  scroller.scrollTop = d.flame ? Math.max(0, y + 3 * ROW - view) : Math.max(0, y - 2 * ROW);
  draw();
  const takeDown = () => {
    ro.disconnect();
    if (frame) cancelAnimationFrame(frame);
    outer.remove();
    if (shown.get(parentElement) === takeDown) shown.delete(parentElement);
  };
  shown.set(parentElement, takeDown);
  return takeDown;
}
