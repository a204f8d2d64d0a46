// schedx source <-> assembly view: a kernel's TVMScript and its assembly side by side, each line of
// the script that became code linked to its instructions, as Compiler Explorer links C to assembly.
// Hover or click a script line: its own instructions light up in the assembly (a loop's line: its
// loop control, the increment, compare and branch; its body is shaded in the script), the assembly
// scrolls to them; hover or click an instruction: its script line lights up. A click pins the
// selection (click again, or Esc, to release). The assembly opens at the hot loop (the innermost
// loop with the most FMAs). No library, nothing downloaded.
//
// Data from Python (st.components.v2, app/source_asm_view.py): {key, source: [lines], asm: [lines],
// a2s: [script line per assembly line, 0 = none], blocks: [[first, last], ...] (loops, blocks),
// notes: {script line: what a loop header became}, share: [mapped, instructions] of the hot loop | null,
// classes: {assembly line: "fma" | "vec"}, changed: [assembly lines changed by the last step],
// hot: [first, last] | null, titles: [script, assembly]}.

function el(tag, cls, parent, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function pane(parent, title) {
  const box = el("div", "sa-pane", parent);
  const head = el("div", "sa-title", box, title);
  const lines = el("div", "sa-lines", box);
  return { box, head, lines, rows: [] };
}

function fill(p, texts, side) {
  p.lines.textContent = "";
  const frag = document.createDocumentFragment();
  p.rows = texts.map((text, i) => {
    const row = el("div", "sa-line", frag);
    row.dataset.line = String(i + 1);
    row.dataset.side = side;
    el("span", "n", row, String(i + 1));
    row.appendChild(document.createTextNode(text || " "));
    if (text.length > 110) row.title = text.trim();
    return row;
  });
  p.lines.appendChild(frag);
}

function scrollTo(p, line) {
  const row = p.rows[line - 1];
  if (!row) return;
  const top = row.offsetTop - p.lines.offsetTop;
  const view = p.lines.clientHeight;
  if (top < p.lines.scrollTop || top > p.lines.scrollTop + view - 20) p.lines.scrollTop = Math.max(0, top - view / 3);
}

function build(root, data) {
  if (root.__saState && root.__saState.watch) root.__saState.watch.disconnect(); // the last view's, if it never showed
  // the root may be a shadow root, where ":scope" matches nothing: remove the last drawing by hand
  Array.from(root.children).forEach((old) => { if (old.classList.contains("sa-root")) old.remove(); });
  const wrap = el("div", "sa-root", root);
  wrap.style.height = `${data.height || 640}px`; // a definite height: each pane scrolls on its own
  const bar = el("div", "sa-bar", wrap);
  const legend = el("span", "", bar);
  legend.innerHTML = '<span class="sa-key" style="background:#93c5fd"></span>became code ' +
    '<span class="sa-key" style="background:#fde68a"></span>selected ' +
    '<span class="sa-key" style="background:#bbf7d0"></span>FMA ' +
    '<span class="sa-key" style="background:#fee2e2"></span>hot loop';
  const hotBtn = el("button", "sa-btn", bar, "Hot loop");
  hotBtn.title = "Scroll the assembly to the loop with the most FMAs";
  const status = el("span", "sa-status", bar);
  // what the hovered line became, on a line of its own, one text line high: the panes never move under the mouse
  const said = el("div", "sa-said", wrap);
  const panes = el("div", "sa-panes", wrap);
  const src = pane(panes, (data.titles || [])[0] || "TVMScript");
  const asm = pane(panes, (data.titles || [])[1] || "Assembly");
  fill(src, data.source, "src");
  fill(asm, data.asm, "asm");
  const a2s = data.a2s || [];
  const s2a = new Map(); // script line -> its assembly lines
  a2s.forEach((s, i) => { if (s) { if (!s2a.has(s)) s2a.set(s, []); s2a.get(s).push(i + 1); } });
  const blocks = new Map((data.blocks || []).map(([a, b]) => [a, b]));
  const notes = data.notes || {};
  const state = { wrap, src, asm, a2s, s2a, blocks, notes, said, lit: [], pinned: null, status, key: data.key };
  for (const [line] of s2a) if (src.rows[line - 1]) src.rows[line - 1].classList.add("m");
  for (const [a, b] of blocks) {
    for (let s = a; s <= b; s++) if (s2a.has(s)) { src.rows[a - 1].classList.add("m"); break; }
  }
  a2s.forEach((s, i) => { if (s) asm.rows[i].classList.add("m"); });
  for (const [line, cls] of Object.entries(data.classes || {})) asm.rows[Number(line) - 1]?.classList.add(cls);
  for (const line of data.changed || []) asm.rows[line - 1]?.classList.add("chg");
  if (data.hot) for (let l = data.hot[0]; l <= data.hot[1]; l++) asm.rows[l - 1]?.classList.add("hot");
  hotBtn.onclick = () => { if (data.hot) scrollTo(asm, data.hot[0]); };
  const share = data.share && data.share[1] ? `${Math.round((100 * data.share[0]) / data.share[1])}% of the hot ` +
    `loop's instructions mapped to a line (${data.share[0]} of ${data.share[1]}); ` : "";
  status.textContent = s2a.size ? `${share}${s2a.size} script lines became code` :
    "no line of the script carries a location";
  if (data.share) wrap.dataset.share = String(data.share[0]) + "/" + String(data.share[1]);
  const light = (side, line, scroll) => select(state, side, line, scroll);
  for (const p of [src, asm]) {
    p.lines.addEventListener("mouseover", (ev) => {
      const row = ev.target.closest(".sa-line");
      // a line longer than its pane shows shows itself whole on hover (the pane scrolls sideways too)
      if (row && !row.title && row.offsetWidth > p.lines.clientWidth) row.title = row.lastChild.textContent.trim();
      if (state.pinned) return;
      if (row) light(row.dataset.side, Number(row.dataset.line), true);
    });
    p.lines.addEventListener("click", (ev) => {
      const row = ev.target.closest(".sa-line");
      if (!row) return;
      const id = `${row.dataset.side}:${row.dataset.line}`;
      state.pinned = state.pinned === id ? null : id;
      light(row.dataset.side, Number(row.dataset.line), true);
      wrap.dataset.pinned = state.pinned || "";
    });
  }
  wrap.tabIndex = 0;
  wrap.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { state.pinned = null; wrap.dataset.pinned = ""; } });
  return state;
}

function say(state, text) {
  state.said.textContent = text || "\u00a0";
  state.said.title = text || "";
}

function select(state, side, line, scroll) {
  for (const row of state.lit) row.classList.remove("sel", "in");
  state.lit = [];
  const on = (row, cls) => { if (row) { row.classList.add(cls); state.lit.push(row); } };
  let srcLines = [], asmLines = [];
  if (side === "src") {
    const last = state.blocks.get(line) || line;
    asmLines = state.s2a.get(line) || []; // its own instructions only: a loop's are its loop control
    srcLines = [line];
    for (let s = line + 1; s <= last; s++) on(state.src.rows[s - 1], "in");
    const note = state.notes[String(line)];
    say(state, note || (asmLines.length ? `line ${line}: ${asmLines.length} instructions` : ""));
  } else {
    const s = state.a2s[line - 1];
    if (s) { srcLines = [s]; asmLines = state.s2a.get(s) || [line]; } else asmLines = [line];
    say(state, s ? state.notes[String(s)] || `line ${s}` : "no script line");
  }
  srcLines.forEach((l) => on(state.src.rows[l - 1], "sel"));
  asmLines.forEach((l) => on(state.asm.rows[l - 1], "sel"));
  state.wrap.dataset.selSrc = srcLines.join(",");
  state.wrap.dataset.selAsm = String(asmLines.length);
  if (scroll) {
    if (side === "src" && asmLines.length) scrollTo(state.asm, asmLines[0]);
    if (side === "asm" && srcLines.length) scrollTo(state.src, srcLines[0]);
  }
}

export default function (component) {
  const { data, parentElement } = component;
  if (!data) return;
  let state = parentElement.__saState;
  if (!state || state.key !== data.key || !parentElement.contains(state.wrap)) {
    state = build(parentElement, data);
    parentElement.__saState = state;
    // open at the hot loop once the view is shown (it may be drawn in a hidden tab: nothing scrolls there)
    const opened = () => {
      if (data.hot) scrollTo(state.asm, data.hot[0]);
      const first = data.hot ? state.a2s.slice(data.hot[0] - 1, data.hot[1]).find((s) => s) : 0;
      if (first) scrollTo(state.src, first);
      state.wrap.dataset.ready = "1";
    };
    const watch = new ResizeObserver(() => {
      if (state.asm.lines.clientHeight > 0) { watch.disconnect(); opened(); }
    });
    state.watch = watch;
    watch.observe(state.asm.lines);
  }
}
