// schedx graph view: two graphs (before / after a pass) side by side, laid out on the server by
// Graphviz, drawn here as SVG. Pan (drag), zoom (wheel, +/-), fit the width or show the whole, a minimap per panel, search by
// name or op (Enter: next match, centred), click a node for its details; the details can open a
// kernel in the Schedule page (a trigger value sent to Python). No library, nothing downloaded.
//
// Data from Python (st.components.v2): {before, after: JSON strings of a snapshot payload
// (explorer/graph/viewdata.py), sb, sa: status codes per node, titles: [before, after], style}.

const NS = "http://www.w3.org/2000/svg";
const SIDES = ["before", "after"];
// Labels are drawn at 10 px (cluster labels too): at a scale under READABLE_SCALE they would be
// under 9 px on the screen, so they are hidden there (and a graph opens, or fits, no smaller).
const READABLE_SCALE = 0.9;
const TEXT_MIN_SCALE = READABLE_SCALE; // below this zoom, labels are hidden (unreadable, and slow to draw)

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function el(tag, cls, parent, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function buildShell(root) {
  // Leave what Streamlit put in the root (the component's <style>) in place.
  // (the root may be a shadow root, where ":scope" matches nothing)
  Array.from(root.children).forEach((old) => { if (old.classList.contains("sx-root")) old.remove(); });
  const wrap = el("div", "sx-root", root);
  // The viewer's own events stop at its root: bubbling on, each reached the page's document-level
  // listeners (React's), which took 150-400 ms of script per click or drag step on a 1000-node graph
  // before the viewer could draw the next frame.
  for (const type of ["click", "dblclick", "pointerdown", "pointermove", "pointerup", "wheel", "mousedown",
                      "mousemove", "mouseup"]) {
    wrap.addEventListener(type, (ev) => ev.stopPropagation());
  }
  const bar = el("div", "sx-bar", wrap);
  const search = el("input", "sx-search", bar);
  search.type = "search";
  search.placeholder = "Find a node by name or op (Enter: next)";
  search.setAttribute("aria-label", "Find a node");
  const count = el("span", "sx-count", bar);
  const prev = el("button", "sx-btn", bar, "↑");
  prev.title = "Previous match (Shift+Enter)";
  const next = el("button", "sx-btn", bar, "↓");
  next.title = "Next match (Enter)";
  const fit = el("button", "sx-btn sx-fit-all", bar, "Fit both");
  fit.title = "Fit both graphs to their panels";
  const summary = el("span", "sx-summary", bar);
  const panels = el("div", "sx-panels", wrap);
  const state = { wrap, search, count, summary, panels: {}, matches: [], cursor: -1, selected: null };
  for (const side of SIDES) {
    const p = el("div", "sx-panel", panels);
    p.dataset.side = side;
    const title = el("div", "sx-title", p);
    // The stage holds still and takes the pointer; the SVG inside it moves (see live()).
    const stage = el("div", "sx-stage", p);
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "sx-canvas");
    stage.appendChild(svg);
    svg.innerHTML = `<defs><marker id="sx-arrow-${side}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
      markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#64748b"/></marker></defs>
      <g class="sx-world"><g class="sx-clusters"></g><g class="sx-edges"></g><g class="sx-nodes"></g></g>`;
    const mini = el("canvas", "sx-mini", p);
    const tools = el("div", "sx-tools", p);
    const zin = el("button", "sx-btn", tools, "+");
    zin.title = "Zoom in";
    const zout = el("button", "sx-btn", tools, "−");
    zout.title = "Zoom out";
    const zfit = el("button", "sx-btn sx-fit", tools, "Fit");
    zfit.title = "Fit the width (labels stay readable; scroll or drag for the rest, the minimap shows all)";
    const zall = el("button", "sx-btn sx-whole", tools, "Whole");
    zall.title = "The whole graph in the panel (small on a deep graph)";
    const info = el("div", "sx-info", p);
    state.panels[side] = {
      side, el: p, title, stage, svg, world: svg.querySelector(".sx-world"), mini, tools, info, sel: null,
      view: { s: 1, x: 0, y: 0 }, graph: null, key: null, nodeEls: [], edgeEls: [], status: [],
      statusKey: null, miniBase: null, built: null, miniKey: null,
    };
    zin.onclick = () => zoomBy(state.panels[side], 1.4);
    zout.onclick = () => zoomBy(state.panels[side], 1 / 1.4);
    zfit.onclick = () => fitWidth(state.panels[side]);
    zall.onclick = () => fitPanel(state.panels[side]);
    attachPanZoom(state, state.panels[side]);
    // a panel resized (the window, the sidebar, the pass list folding away): the details stay
    // clear of the node, the tools and the minimap
    new ResizeObserver(() => keepInfoClear(state.panels[side])).observe(stage);
  }
  fit.onclick = () => SIDES.forEach((s) => fitWidth(state.panels[s]));
  search.addEventListener("input", () => runSearch(state));
  search.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") { ev.preventDefault(); step(state, ev.shiftKey ? -1 : 1); }
    if (ev.key === "Escape") { search.value = ""; runSearch(state); }
  });
  prev.onclick = () => step(state, -1);
  next.onclick = () => step(state, 1);
  return state;
}

// -- drawing ---------------------------------------------------------------------------------
function fillOf(style, node, code) {
  if (code && style.status[code]) return style.status[code];
  return ["#94a3b8", style.kind[node.k] || "#ffffff"];
}

// Graphs by key, for the page's lifetime (the module is loaded once per page): a graph sent once
// is not sent again, and its drawing is kept per panel, so going back to a pass is a swap.
const GRAPHS = new Map();

function buildWorld(panel, graph) {
  const nodes = graph.nodes;
  let clusters = "";
  for (const [label, x, y, w, h] of graph.clusters) {
    clusters += `<rect class="c" x="${x}" y="${y}" width="${w}" height="${h}" rx="6"/>` +
      `<text class="cl" x="${x + w / 2}" y="${y + 11}">${esc(label)}</text>`;
  }
  let edges = "";
  for (const [, , d] of graph.edges) edges += `<path class="e" d="${d}" marker-end="url(#sx-arrow-${panel.side})"/>`;
  let out = "";
  for (let i = 0; i < nodes.length; i++) {
    const n = nodes[i];
    const x0 = n.x - n.w / 2, y0 = n.y - n.h / 2;
    const lines = n.t;
    const lh = 11.5;
    const top = n.y - ((lines.length - 1) * lh) / 2 + 3.5;
    let text = "";
    for (let k = 0; k < lines.length; k++) {
      const cls = k === 0 && lines.length === 3 ? "t b" : k === lines.length - 1 ? "t m" : "t";
      text += `<text class="${cls}" x="${n.x}" y="${(top + k * lh).toFixed(1)}">${esc(lines[k])}</text>`;
    }
    out += `<g class="n" data-i="${i}"><rect x="${x0.toFixed(1)}" y="${y0.toFixed(1)}" width="${n.w}" height="${n.h}" rx="4"/>${text}</g>`;
  }
  const world = document.createElementNS(NS, "g");
  world.setAttribute("class", "sx-world");
  world.innerHTML = `<g class="sx-clusters">${clusters}</g><g class="sx-edges">${edges}</g><g class="sx-nodes">${out}</g>`;
  return { world, nodeEls: Array.from(world.querySelectorAll("g.n")), edgeEls: Array.from(world.querySelectorAll("path.e")),
    clusterEls: Array.from(world.querySelectorAll("g.sx-clusters > *")), statusKey: null, view: null,
    boxes: null, off: null };
}

function showGraph(panel, key, entry) {
  if (panel.built) panel.built.view = { ...panel.view }; // where the user left the previous graph
  clearTimeout(panel.settle); // a gesture on the previous graph that had not come to rest
  panel.settle = null;
  panel.svg.style.transform = "";
  panel.drawn = null;
  let built = entry.built[panel.side];
  if (!built) {
    built = buildWorld(panel, entry.graph);
    entry.built[panel.side] = built;
  }
  panel.svg.replaceChild(built.world, panel.world);
  panel.world = built.world;
  panel.built = built;
  panel.graph = entry.graph;
  panel.key = key;
  panel.nodeEls = built.nodeEls;
  panel.edgeEls = built.edgeEls;
  unmark(built);
  unmark(built, "hits");
  panel.el.dataset.key = key;
  panel.el.dataset.nodes = String(entry.graph.nodes.length);
  panel.statusKey = built.statusKey;
  openInfo(panel.info, false);
  panel.sel = null;
  return built.view;
}

function colour(state, panel, codes, style) {
  panel.status = codes;
  const sk = panel.key + ":" + codes.join("");
  if (sk !== panel.statusKey) {
    const nodes = panel.graph.nodes;
    for (let i = 0; i < nodes.length; i++) {
      const [stroke, fill] = fillOf(style, nodes[i], codes[i] || 0);
      const r = panel.nodeEls[i].firstChild;
      r.setAttribute("fill", fill);
      r.setAttribute("stroke", stroke);
      r.setAttribute("stroke-width", codes[i] ? "2" : "1");
    }
    panel.statusKey = sk;
    panel.built.statusKey = sk;
  }
  if (panel.miniKey !== sk) drawMiniBase(panel, style);
  panel.miniKey = sk;
  panel.el.dataset.statusKey = String(codes.length) + ":" + String(hashCodes(codes));
}

function hashCodes(codes) {
  let h = 0;
  for (const c of codes) h = (h * 31 + c + 1) | 0;
  return h >>> 0;
}

// -- view: pan, zoom, fit, minimap ------------------------------------------------------------
function size(panel) {
  const r = panel.stage.getBoundingClientRect();
  return [Math.max(r.width, 50), Math.max(r.height, 50)];
}

// The view is drawn in two ways. apply() sets the SVG's own transform: Chrome then lays out again
// every label of the page (both panels: ~100 ms on two 1000-node graphs, 0.5 ms without labels).
// live() moves the drawn SVG with a CSS transform instead, which the compositor applies to the
// picture it has (one frame, no layout), and apply()s the view once the gesture rests (SETTLE_MS)
// or reaches beyond what was drawn around the view. Zoom and pan steps are live; fit, open and
// centre are applied at once.
const SETTLE_MS = 180;
function apply(panel) {
  panel.el.dataset.appliedAt = String(performance.now()); // the redraw's start (benchmarks time it to its frame)
  clearTimeout(panel.settle);
  panel.settle = null;
  const v = panel.view;
  const wh = size(panel);  // read once, before anything is written (a read after a write forces a layout)
  panel.world.setAttribute("transform", `translate(${v.x.toFixed(1)},${v.y.toFixed(1)}) scale(${v.s.toFixed(4)})`);
  panel.svg.style.transform = "";
  panel.drawn = { ...v };
  panel.el.classList.toggle("sx-lod", v.s < TEXT_MIN_SCALE);
  cull(panel, wh);
  drawMiniView(panel, wh);
}

function live(panel) {
  const v = panel.view, d = panel.drawn;
  if (!d) { apply(panel); return; }
  const wh = size(panel);
  const k = v.s / d.s;
  // what was drawn covers three views around the drawn one (cull): beyond it, or across the
  // label threshold, draw now
  const [W, H] = wh;
  const vw = W / v.s, vh = H / v.s, x0 = -v.x / v.s, y0 = -v.y / v.s;
  const dw = W / d.s, dh = H / d.s, dx0 = -d.x / d.s - dw, dy0 = -d.y / d.s - dh;
  const outside = x0 < dx0 || y0 < dy0 || x0 + vw > dx0 + 3 * dw || y0 + vh > dy0 + 3 * dh;
  if (outside || (v.s < TEXT_MIN_SCALE) !== (d.s < TEXT_MIN_SCALE)) { apply(panel); return; }
  panel.svg.style.transform = `translate(${(v.x - d.x * k).toFixed(1)}px,${(v.y - d.y * k).toFixed(1)}px) scale(${k.toFixed(4)})`;
  drawMiniView(panel, wh);
  clearTimeout(panel.settle);
  panel.settle = setTimeout(() => apply(panel), SETTLE_MS);
}

// -- culling: only what lies near the view is drawn. Chrome re-rasterises every element of an SVG
// group whose transform changes: on a 1000-node graph a zoom or pan step took 300 ms; the nodes,
// edges and clusters more than a view's width or height away from it are not displayed (a node's
// box, an edge's the union of its ends' boxes, a cluster's rectangle and label).
function boxesOf(graph) {
  const n = graph.nodes, e = graph.edges, c = graph.clusters;
  const nb = new Float64Array(4 * n.length), eb = new Float64Array(4 * e.length), cb = new Float64Array(4 * c.length);
  n.forEach((d, i) => nb.set([d.x - d.w / 2, d.y - d.h / 2, d.x + d.w / 2, d.y + d.h / 2], 4 * i));
  e.forEach(([t, h], k) => {
    const a = 4 * t, b = 4 * h, pad = 30;  // an edge's curve stays near its ends
    eb.set([Math.min(nb[a], nb[b]) - pad, Math.min(nb[a + 1], nb[b + 1]) - pad,
      Math.max(nb[a + 2], nb[b + 2]) + pad, Math.max(nb[a + 3], nb[b + 3]) + pad], 4 * k);
  });
  c.forEach(([, x, y, w, h], k) => cb.set([x, y, x + w, y + h], 4 * k));
  return { n: nb, e: eb, c: cb };
}

function showNear(els, box, off, per, x0, y0, x1, y1) {
  for (let i = 0; i < off.length; i++) {
    const far = box[4 * i] > x1 || box[4 * i + 2] < x0 || box[4 * i + 1] > y1 || box[4 * i + 3] < y0 ? 1 : 0;
    if (far === off[i]) continue;  // only changes touch the page
    off[i] = far;
    for (let k = 0; k < per; k++) els[per * i + k].style.display = far ? "none" : "";
  }
}

function cull(panel, wh) {
  const b = panel.built;
  if (!b || !panel.graph) return;
  if (!b.boxes) {
    b.boxes = boxesOf(panel.graph);
    b.off = { n: new Uint8Array(b.nodeEls.length), e: new Uint8Array(b.edgeEls.length),
      c: new Uint8Array(b.clusterEls.length / 2) };
  }
  const [W, H] = wh, v = panel.view;
  const vw = W / v.s, vh = H / v.s, x0 = -v.x / v.s - vw, y0 = -v.y / v.s - vh, x1 = x0 + 3 * vw, y1 = y0 + 3 * vh;
  showNear(b.nodeEls, b.boxes.n, b.off.n, 1, x0, y0, x1, y1);
  showNear(b.edgeEls, b.boxes.e, b.off.e, 1, x0, y0, x1, y1);
  showNear(b.clusterEls, b.boxes.c, b.off.c, 2, x0, y0, x1, y1);
  panel.el.dataset.shown = String(b.off.n.length - b.off.n.reduce((a, x) => a + x, 0));  // nodes displayed
}

function fitPanel(panel) {
  if (!panel.graph) return;
  const [W, H] = size(panel);
  const g = panel.graph;
  const s = Math.min((W - 20) / Math.max(g.w, 1), (H - 20) / Math.max(g.h, 1), 1.5);
  panel.view = { s, x: (W - g.w * s) / 2, y: Math.max(10, (H - g.h * s) / 2) };
  apply(panel);
  keepInfoClear(panel);
}

// Fit: as wide as the panel (at most 1.5x), from the top; a graph whose height then fits is
// centred whole. A deep graph stays readable and scrolls (wheel, drag, the minimap) instead of
// shrinking to a strip (a 1000-node chain fitted whole was drawn at scale 0.14); a wide one stays
// at READABLE_SCALE, from its left edge, and pans sideways (fitted to a 250-px panel, ResNet-18's
// labels were 4 px tall).
function fitWidth(panel) {
  if (!panel.graph) return;
  const [W, H] = size(panel);
  const g = panel.graph;
  const s = Math.max(Math.min((W - 20) / Math.max(g.w, 1), 1.5), READABLE_SCALE);
  panel.view = { s, x: g.w * s > W - 20 ? 10 : (W - g.w * s) / 2, y: Math.max(10, (H - g.h * s) / 2) };
  if (g.h * s > H - 20) panel.view.y = 10;
  apply(panel);
  keepInfoClear(panel);
}

// A graph opens readable: whole if it fits at a scale where labels can be read, else from its
// top at that scale; "Whole" shows it whole (its labels hidden where they would be unreadable).
function openView(panel) {
  if (!panel.graph) return;
  const [W, H] = size(panel);
  const g = panel.graph;
  const fitW = (W - 20) / Math.max(g.w, 1);
  const fitAll = Math.min(fitW, (H - 20) / Math.max(g.h, 1));
  if (fitAll >= READABLE_SCALE) {
    fitPanel(panel);
    return;
  }
  const s = READABLE_SCALE;
  panel.view = { s, x: g.w * s > W - 20 ? 10 : (W - g.w * s) / 2, y: 10 };
  apply(panel);
}

function zoomBy(panel, factor, cx, cy) {
  const [W, H] = size(panel);
  const v = panel.view;
  const px = cx === undefined ? W / 2 : cx, py = cy === undefined ? H / 2 : cy;
  const s = Math.min(Math.max(v.s * factor, 0.01), 8);
  v.x = px - ((px - v.x) * s) / v.s;
  v.y = py - ((py - v.y) * s) / v.s;
  v.s = s;
  live(panel);
}

function centreOn(panel, i, minScale, leaveRight) {
  const n = panel.graph.nodes[i];
  const [W, H] = size(panel);
  const v = panel.view;
  if (minScale && v.s < minScale) v.s = minScale;
  const free = leaveRight ? Math.max(W - Math.min(350, W * 0.7), W * 0.3) : W; // the details box covers the right
  v.x = free / 2 - n.x * v.s;
  v.y = H / 2 - n.y * v.s;
  apply(panel);
}

const DRAG_PX = 3; // a press that moves further than this is a drag (pan), not a click

function attachPanZoom(state, panel) {
  const svg = panel.stage;
  let drag = null;
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect();
    zoomBy(panel, Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });
  svg.addEventListener("pointerdown", (ev) => {
    // The node under the pointer, taken now: once the stage captures the pointer (for a drag that
    // leaves the panel), pointerup's target is the stage itself, never the node clicked.
    const node = ev.target.closest ? ev.target.closest("g.n") : null;
    drag = { x: ev.clientX, y: ev.clientY, vx: panel.view.x, vy: panel.view.y, moved: false, node };
    svg.setPointerCapture(ev.pointerId);
  });
  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > DRAG_PX) drag.moved = true;
    if (drag.moved) {
      panel.view.x = drag.vx + dx;
      panel.view.y = drag.vy + dy;
      live(panel);
    }
  });
  svg.addEventListener("pointerup", (ev) => {
    const press = drag;
    drag = null;
    // a click: pressed and released on a node without moving past DRAG_PX (a drag pans, never selects)
    if (!press || press.moved || !press.node) return;
    if (Math.abs(ev.clientX - press.x) + Math.abs(ev.clientY - press.y) > DRAG_PX) return;
    select(state, panel.side, Number(press.node.dataset.i), false);
  });
  svg.addEventListener("pointercancel", () => { drag = null; });
  svg.addEventListener("dblclick", () => fitWidth(panel));
  const mini = panel.mini;
  const jump = (ev) => {
    if (!panel.graph || !panel.miniScale) return;
    const r = mini.getBoundingClientRect();
    const gx = (ev.clientX - r.left) / panel.miniScale, gy = (ev.clientY - r.top) / panel.miniScale;
    const [W, H] = size(panel);
    panel.view.x = W / 2 - gx * panel.view.s;
    panel.view.y = H / 2 - gy * panel.view.s;
    live(panel);
  };
  let miniDrag = false;
  mini.addEventListener("pointerdown", (ev) => { miniDrag = true; mini.setPointerCapture(ev.pointerId); jump(ev); });
  mini.addEventListener("pointermove", (ev) => { if (miniDrag) jump(ev); });
  mini.addEventListener("pointerup", () => { miniDrag = false; });
}

function drawMiniBase(panel, style) {
  const g = panel.graph;
  const maxW = 150, maxH = 150;
  const s = Math.min(maxW / Math.max(g.w, 1), maxH / Math.max(g.h, 1));
  const mini = panel.mini;
  const ratio = window.devicePixelRatio || 1;
  mini.style.width = `${Math.max(g.w * s, 20)}px`;
  mini.style.height = `${Math.max(g.h * s, 20)}px`;
  mini.width = Math.ceil(Math.max(g.w * s, 20) * ratio);
  mini.height = Math.ceil(Math.max(g.h * s, 20) * ratio);
  panel.miniScale = s;
  const base = document.createElement("canvas");
  base.width = mini.width;
  base.height = mini.height;
  const ctx = base.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.fillStyle = "rgba(255,255,255,0.92)";
  ctx.fillRect(0, 0, mini.width, mini.height);
  g.nodes.forEach((n, i) => {
    const code = panel.status[i] || 0;
    ctx.fillStyle = code ? style.status[code][0] : "#94a3b8";
    ctx.fillRect((n.x - n.w / 2) * s, (n.y - n.h / 2) * s, Math.max(n.w * s, 1), Math.max(n.h * s, 1));
  });
  panel.miniBase = base;
  drawMiniView(panel);
}

function drawMiniView(panel, wh) {
  if (!panel.miniBase) return;
  const ctx = panel.mini.getContext("2d");
  const ratio = window.devicePixelRatio || 1;
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, panel.mini.width, panel.mini.height);
  ctx.drawImage(panel.miniBase, 0, 0);
  ctx.scale(ratio, ratio);
  const [W, H] = wh || size(panel);
  const v = panel.view, s = panel.miniScale;
  ctx.strokeStyle = "#dc2626";
  ctx.lineWidth = 1.5;
  ctx.strokeRect((-v.x / v.s) * s, (-v.y / v.s) * s, (W / v.s) * s, (H / v.s) * s);
}

// -- search and selection --------------------------------------------------------------------
function runSearch(state) {
  const q = state.search.value.trim().toLowerCase();
  state.matches = [];
  state.cursor = -1;
  for (const side of SIDES) {
    const panel = state.panels[side];
    if (!panel.graph) continue;
    unmark(panel.built, "hits");
    if (!q) continue;
    panel.graph.nodes.forEach((n, i) => {
      // one node per ONNX node and per fused group it stands for (explorer.graph.viewdata.search_text)
      if (n.s.includes(q) || (n.g && (n.g.startsWith(q) || n.g.replace(/^fused_/, "").startsWith(q)))) {
        state.matches.push([side, i]);
        mark(panel.built, panel.nodeEls[i], "hit", "hits");
      }
    });
  }
  const nb = state.matches.filter((m) => m[0] === "before").length;
  state.count.textContent = q ? `${nb} before · ${state.matches.length - nb} after` : "";
  state.wrap.dataset.matches = String(state.matches.length);
}

function step(state, delta) {
  if (!state.matches.length) runSearch(state);
  if (!state.matches.length) return;
  state.cursor = (state.cursor + delta + state.matches.length) % state.matches.length;
  const [side, i] = state.matches[state.cursor];
  select(state, side, i, true);
}

function counterparts(panel, other, i) {
  const mine = new Set(panel.graph.nodes[i].o);
  if (!mine.size || !other.graph) return [];
  const out = [];
  other.graph.nodes.forEach((n, j) => { if (n.o.some((o) => mine.has(o))) out.push(j); });
  return out;
}

// A graph's marked elements (selected, twin, search hit, hot edge), kept so that unmarking touches
// only them: removing a class from every element of a 1000-node graph writes every element's class
// attribute and restyles them all (hundreds of ms between a click and its details).
// A search's hits are kept apart (``set`` "hits"): selecting a hit keeps the others lit.
function mark(built, e, cls, set = "marked") {
  e.classList.add(cls);
  (built[set] || (built[set] = new Set())).add(e);
}

function unmark(built, set = "marked") {
  if (!built || !built[set]) return;
  built[set].forEach((e) => e.classList.remove(...(set === "hits" ? ["hit"] : ["sel", "twin", "hot"])));
  built[set].clear();
}

function select(state, side, i, centre) {
  for (const s of SIDES) {
    const p = state.panels[s];
    unmark(p.built);
    openInfo(p.info, false);
  }
  const panel = state.panels[side];
  const other = state.panels[side === "before" ? "after" : "before"];
  if (!panel.graph || !panel.nodeEls[i]) return;
  mark(panel.built, panel.nodeEls[i], "sel");
  panel.graph.edges.forEach(([t, h], k) => { if (t === i || h === i) mark(panel.built, panel.edgeEls[k], "hot"); });
  const twins = counterparts(panel, other, i);
  twins.forEach((j) => mark(other.built, other.nodeEls[j], "twin"));
  if (centre) centreOn(panel, i, READABLE_SCALE, true);
  state.selected = [side, i];
  panel.sel = i;
  other.sel = null;
  state.wrap.dataset.selected = `${side}:${panel.graph.nodes[i].t[0]}`;
  showInfo(state, panel, i, twins.map((j) => other.graph.nodes[j].t[0]));
  revealInPage(panel.nodeEls[i]);
  // the other panel comes to the node's counterpart a frame later: redrawing it (a 1000-node graph:
  // hundreds of ms) no longer holds back the details the user clicked for
  if (twins.length) {
    const scale = Math.max(other.view.s, centre ? READABLE_SCALE : 0);
    requestAnimationFrame(() => setTimeout(() => {  // (a frame's callbacks run before its paint: after it)
      if (state.selected && state.selected[0] === side && state.selected[1] === i) centreOn(other, twins[0], scale);
    }, 0));
  }
}

// The page scrolls to show ``el`` (the node selected) when it sits above or below the window: the
// graph is taller than what is left of a 900-px window under the pickers.
function revealInPage(el) {
  const r = el.getBoundingClientRect();
  const room = window.innerHeight, m = 16;
  let delta = 0;
  if (r.bottom > room - m) delta = r.bottom - (room - m);
  if (r.top - delta < m) delta = r.top - m;
  if (Math.abs(delta) < 1) return;
  for (let n = el; n;) {  // out of the shadow root, up to the page's scroller
    n = n.parentElement || (n.parentNode && n.parentNode.host) || null;
    if (!n || n === document.documentElement) break;
    const cs = getComputedStyle(n);
    if (/(auto|scroll)/.test(cs.overflowY) && n.scrollHeight > n.clientHeight) {
      n.scrollTop += delta;
      return;
    }
  }
  (document.scrollingElement || document.documentElement).scrollTop += delta;
}

function row(parent, label, value) {
  if (value === undefined || value === null || value === "") return;
  const r = el("div", "sx-row", parent);
  el("span", "sx-k", r, label);
  el("span", "sx-v", r, String(value));
}

function kernelButton(state, parent, label, index, name) {
  const b = el("button", "sx-open", parent, `${label}: ${name} → Schedule`);
  b.title = "Open this kernel in the Schedule page";
  b.dataset.kernel = name;
  b.onclick = () => state.trigger("open_kernel", { index, name });
}

// The details box opens and closes by its visibility, never its display: taking it in or out of
// the layout (the ``hidden`` attribute) laid the whole panel out again, SVG and all (75-90 ms of a
// click on a 1000-node graph); a box kept in the layout and made visible costs under a millisecond.
function openInfo(info, open) {
  info.classList.toggle("sx-open", open);
}

function isOpen(info) {
  return info.classList.contains("sx-open");
}

function showInfo(state, panel, i, twins) {
  const n = panel.graph.nodes[i];
  const d = n.d;
  const info = panel.info;
  info.innerHTML = "";
  const head = el("div", "sx-info-head", info);
  el("b", "", head, n.t[0]);
  const close = el("button", "sx-close", head, "×");
  close.title = "Close the details";
  close.setAttribute("aria-label", "Close the details");
  close.onclick = () => openInfo(info, false);
  row(info, "op", d.op);
  row(info, "kind", n.k);
  row(info, "output", `${d.type}`);
  row(info, "variable", d.var);
  row(info, "fused group", d.group);
  if (d.inputs && d.inputs.length) {
    el("div", "sx-sec", info, "inputs");
    d.inputs.forEach(([t, ty]) => row(info, t, ty));
  }
  row(info, "constants", d.consts);
  if (d.attrs) {
    el("div", "sx-sec", info, "attributes");
    Object.entries(d.attrs).forEach(([k, v]) => row(info, k, v));
  }
  if (d.onnx) {
    el("div", "sx-sec", info, `from the model (${d.onnx.length + (d.onnx_more || 0)} ONNX node${d.onnx.length > 1 ? "s" : ""})`);
    const list = el("div", "sx-onnx", info);
    d.onnx.forEach(([name, op, attrs]) => {
      const item = el("div", "sx-onnx-item", list);
      el("b", "", item, name);
      el("span", "sx-op", item, ` ${op}`);
      if (attrs) el("div", "sx-attrs", item, attrs);
    });
    if (d.onnx_more) el("div", "sx-attrs", list, `... and ${d.onnx_more} more`);
  }
  if (twins.length) row(info, panel.side === "before" ? "after the pass" : "before the pass", twins.slice(0, 8).join(", ") + (twins.length > 8 ? " ..." : ""));
  const acts = el("div", "sx-acts", info);
  const becomes = d.becomes || [];
  if (d.kernel && !becomes.includes(d.kernel)) kernelButton(state, acts, "kernel here", panel.graph.key, d.kernel);
  becomes.slice(0, 6).forEach((k) => kernelButton(state, acts, k === d.kernel ? "kernel" : "becomes", panel.graph.final, k));
  if (!d.kernel && !becomes.length && n.k !== "input" && n.k !== "output") {
    el("div", "sx-attrs", acts, "Not lowered to a kernel by this pipeline.");
  }
  openInfo(info, true);
  besideNode(panel, i);
}

// The details sit beside the node, never over it: docked right, or left when the node is under
// them; if the node is under them on both sides the view slides it clear. They start under the
// panel's title and end above the tools and the minimap beneath them (they scroll inside): at
// 1100 px they covered the minimap and the panel's buttons. A node closer than CLEAR_PX to them
// counts as under them: the page may still shift by a scrollbar's width after.
const CLEAR_PX = 16;
function overlaps(a, b) {
  const m = CLEAR_PX;
  return a.left - m < b.right && b.left < a.right + m && a.top - m < b.bottom && b.top < a.bottom + m;
}

function dock(panel, left) {
  const info = panel.info;
  info.classList.toggle("sx-left", left);
  info.style.top = `${panel.title.offsetHeight + 6}px`;
  info.style.maxHeight = "none";
  const stage = panel.stage.getBoundingClientRect(), box = info.getBoundingClientRect();
  let bottom = stage.bottom - 8;
  for (const c of [panel.tools, panel.mini]) {
    const r = c.getBoundingClientRect();
    if (r.width && r.left < box.right + 8 && box.left - 8 < r.right) bottom = Math.min(bottom, r.top - 8);
  }
  info.style.maxHeight = `${Math.max(60, Math.floor(bottom - box.top))}px`;
  return info.getBoundingClientRect();
}

function besideNode(panel, i) {
  const node = () => panel.nodeEls[i].getBoundingClientRect();
  if (!overlaps(node(), dock(panel, false))) return;
  if (!overlaps(node(), dock(panel, true))) return;
  const details = dock(panel, false);
  // centre the node in the room left of the details; where that room is narrower than the node
  // (a narrow panel), in the room below them
  const stage = panel.stage.getBoundingClientRect(), box = node();
  if (box.width + 2 * CLEAR_PX < details.left - stage.left) {
    panel.view.x += (stage.left + details.left) / 2 - box.width / 2 - box.left;
  } else {
    panel.view.y += (details.bottom + stage.bottom) / 2 - box.height / 2 - box.top;
  }
  apply(panel);
}

// After a fit or a resize, the details open: placed again (a fit may bring the node under them).
function keepInfoClear(panel) {
  if (!isOpen(panel.info) || panel.sel === null || !panel.nodeEls[panel.sel]) return;
  besideNode(panel, panel.sel);
}

// -- entry -----------------------------------------------------------------------------------
function graphFor(state, sent) {
  // sent: {key, json?}; json comes the first time a key is sent to this page
  let entry = GRAPHS.get(sent.key);
  if (!entry && sent.json) {
    entry = { graph: JSON.parse(sent.json), built: {} };
    GRAPHS.set(sent.key, entry);
  }
  if (!entry) state.trigger("need", sent.key); // a graph this page lost: ask for it again
  return entry;
}

export default function (component) {
  const t0 = performance.now();
  const { data, parentElement, setTriggerValue } = component;
  const root = parentElement;
  let state = root.__sxState;
  if (!state || !root.contains(state.wrap)) {
    state = buildShell(root);
    root.__sxState = state;
  }
  state.trigger = setTriggerValue;
  if (!data) return;
  const style = data.style;
  const views = [];
  SIDES.forEach((side, k) => {
    const panel = state.panels[side];
    const sent = data[side];
    panel.title.textContent = (data.titles || [])[k] || side;
    const entry = graphFor(state, sent);
    if (!entry) return;
    if (panel.key !== sent.key) views.push([panel, showGraph(panel, sent.key, entry)]);
    colour(state, panel, data[side === "before" ? "sb" : "sa"] || [], style);
  });
  state.summary.textContent = data.summary || "";
  state.wrap.dataset.drawMs = String(Math.round(performance.now() - t0)); // parse and draw, for benchmarks
  requestAnimationFrame(() => {
    views.forEach(([panel, view]) => {
      if (view) { panel.view = view; apply(panel); } else openView(panel);
    });
    if (state.search.value) runSearch(state);
    if (data.focus && data.focus !== state.focus) {
      state.focus = data.focus;
      state.search.value = data.focus;
      runSearch(state);
      step(state, 1);
    }
    state.wrap.dataset.drawn = `${state.panels.before.key}|${state.panels.after.key}|${data.sb ? data.sb.length : 0}`;
    // The next frame is painted with the new graphs: mark the time then (benchmarks read it).
    requestAnimationFrame(() => { state.wrap.dataset.drawnAt = String(performance.now()); });
  });
}
