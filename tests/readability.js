// The readability check of the browser tests (tests/browser.py: readability_findings). Run in the
// page by Playwright's page.evaluate; returns a list of findings, each {kind, where, text, detail}:
//   clipped   text cut by its own box or by an ancestor that hides overflow (an ellipsis, a cut
//             metric, a button label, a table cell, a line of code outside a sideways scroller,
//             a picker's value)
//   sideways  a table or data grid wider than its frame: columns reachable only by scrolling
//   cell      a data grid (st.dataframe, drawn on a canvas) whose column is narrower than a value
//             or its header: read from the grid's own columns and cells, not from the DOM
//   small     a label drawn under MIN_PX (an SVG label: its font size times the drawing's scale)
//   overlap   a popup over the control it belongs to (the graph's details over its panel's
//             buttons or the node it explains), or cut by its panel; a chart title under the
//             chart's toolbar
// Everything shown counts, in the page and in open shadow roots (the graph viewer); what is hidden
// (a closed expander, another tab, labels the graph hides when zoomed out) does not.
(opts) => {
  const MIN_PX = (opts && opts.minPx) || 9;
  const SLACK = 1; // pixels of rounding allowed
  const findings = [];
  const seen = new Set();

  const short = (s) => String(s || "").replace(/\s+/g, " ").trim().slice(0, 80);
  function where(e) {
    const parts = [];
    for (let n = e, d = 0; n && n.nodeType === 1 && d < 12; d++) {
      const id = n.getAttribute("data-testid");
      const key = Array.from(n.classList || []).find((c) => c.startsWith("st-key-") || c.startsWith("sx-"));
      if (id || key) parts.unshift(id || key);
      if (parts.length >= 3) break;
      n = n.parentElement || (n.parentNode && n.parentNode.host) || null;
    }
    const label = e.getAttribute && e.getAttribute("aria-label");
    return (parts.join(" > ") || e.tagName.toLowerCase()) + (label ? ` [${label}]` : "");
  }
  function add(kind, e, text, detail) {
    const key = kind + "|" + where(e) + "|" + short(text);
    if (seen.has(key)) return;
    seen.add(key);
    findings.push({ kind, where: where(e), text: short(text), detail });
  }

  // every element, shadow roots included
  const all = [];
  (function walk(root) {
    for (const e of root.querySelectorAll("*")) {
      all.push(e);
      if (e.shadowRoot) walk(e.shadowRoot);
    }
  })(document);

  function shown(e) {
    if (!e.getClientRects().length) return false;
    const cs = getComputedStyle(e);
    if (cs.visibility === "hidden" || cs.display === "none" || Number(cs.opacity) === 0) return false;
    const r = e.getBoundingClientRect();
    // a text kept for screen readers only (a 1-px box: Streamlit's "Skip to main content")
    return r.width > 1 && r.height > 1;
  }
  function ownText(e) {
    let t = "";
    for (const n of e.childNodes) if (n.nodeType === 3) t += n.textContent;
    return t.trim();
  }
  const parentOf = (n) => n.parentElement || (n.parentNode && n.parentNode.host) || null;
  const isCode = (e) => !!e.closest("pre, code, .sx-code, .sa-lines, .sa-line");
  const isCell = (e) => !!e.closest("td, th");
  const SCROLLS = new Set(["auto", "scroll"]);
  const HIDES = new Set(["hidden", "clip"]);

  // -- HTML text: clipped by itself or an ancestor, or too small
  for (const e of all) {
    if (e instanceof SVGElement || e.closest("canvas, script, style, noscript, textarea, select, option")) continue;
    const text = ownText(e);
    if (!text || !shown(e)) continue;
    const cs = getComputedStyle(e);
    const px = parseFloat(cs.fontSize);
    if (px < MIN_PX - 0.05) add("small", e, text, `font-size ${px.toFixed(1)} px`);
    if ((HIDES.has(cs.overflowX) || cs.textOverflow === "ellipsis") && e.scrollWidth > e.clientWidth + SLACK) {
      add("clipped", e, text, `scrollWidth ${e.scrollWidth} > clientWidth ${e.clientWidth}`);
      continue;
    }
    // the nearest ancestor that does not let it overflow
    const box = e.getBoundingClientRect();
    for (let a = parentOf(e); a && a !== document.documentElement; a = parentOf(a)) {
      const as = getComputedStyle(a);
      if (as.overflowX === "visible") continue;
      const ab = a.getBoundingClientRect();
      const out = box.right > ab.right + SLACK || box.left < ab.left - SLACK;
      if (out && HIDES.has(as.overflowX)) {
        add("clipped", e, text, `cut by ${where(a)} (${Math.round(box.right - ab.right)} px over)`);
      } else if (out && SCROLLS.has(as.overflowX) && !isCode(e) && a.scrollWidth > a.clientWidth + SLACK) {
        add(isCell(e) ? "sideways" : "clipped", e, text, `${Math.round(a.scrollWidth - a.clientWidth)} px ` +
            `beyond the visible width of ${where(a)}: reachable only by scrolling sideways`);
      }
      break;
    }
  }

  // -- a picker's value (a selectbox shows it in a combobox input, cut where it is too long)
  for (const e of all) {
    if (e.tagName !== "INPUT" || e.getAttribute("role") !== "combobox" || !e.value || !shown(e)) continue;
    if (e.scrollWidth > e.clientWidth + SLACK) {
      add("clipped", e, e.value, `a picker's value: scrollWidth ${e.scrollWidth} > clientWidth ${e.clientWidth}`);
    }
  }

  // -- tables wider than their frame (an HTML table in a scroller)
  for (const t of all) {
    if (t.tagName !== "TABLE" || t.closest("canvas") || !shown(t)) continue;
    const frame = parentOf(t);
    if (frame && SCROLLS.has(getComputedStyle(frame).overflowX) && frame.scrollWidth > frame.clientWidth + SLACK) {
      add("sideways", t, t.querySelector("th, td") ? t.querySelector("th, td").textContent : "",
          `table ${frame.scrollWidth} px wide in a frame of ${frame.clientWidth} px`);
    }
  }

  // -- SVG labels (the graph viewer, Plotly): font size times the drawing's scale
  for (const e of all) {
    if (e.tagName !== "text" || !(e instanceof SVGElement)) continue;
    const text = e.textContent.trim();
    if (!text || !shown(e)) continue;
    const ctm = e.getScreenCTM();
    const scale = ctm ? Math.sqrt(Math.abs(ctm.a * ctm.d - ctm.b * ctm.c)) : 1;
    const px = parseFloat(getComputedStyle(e).fontSize) * scale;
    if (px < MIN_PX - 0.05) add("small", e, text, `${px.toFixed(1)} px (font ${getComputedStyle(e).fontSize} x scale ${scale.toFixed(2)})`);
  }

  // -- popups over the control they belong to
  const hit = (a, b) => a.left < b.right - SLACK && b.left < a.right - SLACK && a.top < b.bottom - SLACK && b.top < a.bottom - SLACK;
  for (const info of all) {
    if (!info.classList.contains("sx-info") || info.hidden || !shown(info)) continue;
    const panel = info.closest(".sx-panel");
    const ib = info.getBoundingClientRect();
    const controls = Array.from(panel.querySelectorAll(".sx-tools button, .sx-mini, g.n.sel, .sx-title"));
    for (const c of controls) {
      if (shown(c) && hit(ib, c.getBoundingClientRect())) {
        add("overlap", info, c.textContent || c.getAttribute("class"), `the details cover ${where(c)} ` +
            (c.matches("g.n.sel") ? "(the node they explain)" : "(a control of the panel)"));
      }
    }
    const pb = panel.querySelector(".sx-stage").getBoundingClientRect();
    if (ib.bottom > pb.bottom + SLACK || ib.right > pb.right + SLACK || ib.left < pb.left - SLACK) {
      add("overlap", info, info.textContent, "the details are cut by their panel");
    }
    for (const b of info.querySelectorAll("button")) {
      const bb = b.getBoundingClientRect();
      if (bb.right > ib.right + SLACK || bb.left < ib.left - SLACK) add("clipped", b, b.textContent, "a button cut by the details box");
    }
  }
  for (const pop of all) {
    if (!pop.matches('[data-baseweb="popover"], [role="tooltip"], [data-testid="stTooltipContent"]') || !shown(pop)) continue;
    const owner = document.querySelector('[aria-expanded="true"]');
    if (owner && shown(owner) && !pop.contains(owner) && hit(pop.getBoundingClientRect(), owner.getBoundingClientRect())) {
      add("overlap", pop, owner.textContent || owner.getAttribute("aria-label"), `a popup covers ${where(owner)}`);
    }
  }
  for (const plot of all) {
    if (!plot.classList.contains("js-plotly-plot") || !shown(plot)) continue;
    const bar = plot.querySelector(".modebar");
    const title = plot.querySelector(".gtitle");
    if (bar && title && bar.getClientRects().length && hit(bar.getBoundingClientRect(), title.getBoundingClientRect())) {
      add("overlap", title, title.textContent, "the chart's title runs under Plotly's toolbar");
    }
  }

  // -- data grids (st.dataframe: glide-data-grid draws on a canvas). The grid's columns (their
  // widths, as the column config made them) and cells are read from the grid component itself;
  // each shown value is measured in the grid's font.
  const ctx = document.createElement("canvas").getContext("2d");
  for (const frame of document.querySelectorAll('[data-testid="stDataFrame"]')) {
    if (!shown(frame)) continue;
    const scroller = frame.querySelector(".dvn-scroller");
    if (scroller && scroller.scrollWidth > scroller.clientWidth + SLACK) {
      add("sideways", frame, Array.from(frame.querySelectorAll("th")).map((t) => t.textContent).join(" | "),
          `grid columns ${scroller.scrollWidth} px wide in a frame of ${scroller.clientWidth} px`);
    }
    const grid = gridProps(frame);
    if (!grid) continue;
    const theme = frame.querySelector(".stDataFrameGlideDataEditor");
    const ts = theme ? getComputedStyle(theme) : null;
    const family = (ts && ts.getPropertyValue("--gdg-font-family").trim()) || "sans-serif";
    const base = (ts && ts.getPropertyValue("--gdg-base-font-style").trim()) || "400 14px";
    const head = (ts && ts.getPropertyValue("--gdg-header-font-style").trim()) || base;
    const pad = parseFloat((ts && ts.getPropertyValue("--gdg-cell-horizontal-padding")) || "8") || 8;
    const rows = Math.min(grid.rows, 400);
    grid.columns.forEach((col, c) => {
      if (typeof col.width !== "number") return;
      const room = col.width - 2 * pad;
      ctx.font = `${head} ${family}`;
      const title = col.title || "";
      const need = ctx.measureText(title).width + (col.icon ? 20 : 0);  // an icon before the title
      if (title && need > room + SLACK) {
        add("cell", frame, title, `header "${title}" needs ${Math.ceil(need)} px, its column has ${Math.floor(room)}`);
      }
      ctx.font = `${base} ${family}`;
      for (let r = 0; r < rows; r++) {
        let cell;
        try { cell = grid.getCellContent([c, r]); } catch (err) { break; }
        const shownText = cell && typeof cell.displayData === "string" ? cell.displayData
          : cell && typeof cell.data === "string" ? cell.data : "";
        if (!shownText) continue;
        const w = ctx.measureText(shownText).width;
        if (w > room + SLACK) {
          add("cell", frame, shownText, `column "${title}" is ${Math.floor(room)} px, the value needs ${Math.ceil(w)}`);
          break; // one finding per column
        }
      }
    });
  }
  return findings;

  // The glide grid's own props (columns with their widths, getCellContent, rows), found by walking
  // the React fibres under the dataframe's element.
  function gridProps(frame) {
    const k = Object.keys(frame).find((key) => key.startsWith("__reactFiber"));
    if (!k) return null;
    const stack = [frame[k]];
    const root = frame[k];
    for (let n = 0; stack.length && n < 50000; n++) {
      const f = stack.pop();
      const p = f.memoizedProps;
      if (p && Array.isArray(p.columns) && typeof p.getCellContent === "function" && typeof p.rows === "number") {
        return { columns: p.columns, getCellContent: p.getCellContent, rows: p.rows };
      }
      if (f.sibling && f !== root) stack.push(f.sibling);
      if (f.child) stack.push(f.child);
    }
    return null;
  }
}
