// haldet view: the threshold slider with live confusion counts, the charts it moves over, and unit shading.
// Plain script, no dependencies; every page is already meaningful without it.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(x) { return Number.isFinite(x) ? Number(x.toPrecision(4)).toString() : "–"; }
  // plot area of the ROC and PR charts (viewBox 260 x 260): room on the left and below for tick labels
  const L = 42, T = 10, W = 208, H = 208, B = T + H;
  function axes(svg, xlabel, ylabel) {
    el("rect", {x: L, y: T, width: W, height: H, fill: "none", stroke: "#999"}, svg);
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      const x = L + W * v, y = B - H * v, label = v.toString();
      el("line", {x1: x, y1: B, x2: x, y2: B + 4, stroke: "#999"}, svg);
      el("text", {x: x, y: B + 15, "text-anchor": "middle", "font-size": 10, class: "tick"}, svg).textContent = label;
      el("line", {x1: L - 4, y1: y, x2: L, y2: y, stroke: "#999"}, svg);
      el("text", {x: L - 6, y: y + 3, "text-anchor": "end", "font-size": 10, class: "tick"}, svg).textContent = label;
    }
    el("text", {x: L + W / 2, y: 254, "text-anchor": "middle", "font-size": 11}, svg).textContent = xlabel;
    const t = el("text", {x: 10, y: T + H / 2, "text-anchor": "middle", "font-size": 11, transform: `rotate(-90 10 ${T + H / 2})`}, svg);
    t.textContent = ylabel;
  }
  function curve(svg, points, colour) {
    const d = points.map((p, i) => (i ? "L" : "M") + (L + W * p[0]).toFixed(1) + "," + (B - H * p[1]).toFixed(1)).join("");
    el("path", {d: d, fill: "none", stroke: colour, "stroke-width": 2}, svg);
    return el("circle", {r: 4, fill: "#d62728", cx: L, cy: B}, svg);
  }
  function place(dot, p) { dot.setAttribute("cx", L + W * p[0]); dot.setAttribute("cy", B - H * p[1]); }
  // The histogram's bins are drawn equally wide; `data.axis` says how they were cut from the scores: "linear"
  // (equal widths), "log" (equal ratios, for positive scores spanning decades) or "quantile" (equal counts,
  // for a few far outliers). A score sits in its bin by the same rule, so the threshold line meets its bar.
  function position(data, t) {
    const e = data.edges, bins = e.length - 1;
    if (!(t > e[0])) return 0;
    if (t >= e[bins]) return 1;
    let i = 0;
    while (i < bins - 1 && t >= e[i + 1]) i++;
    const frac = data.axis === "log" ? Math.log(t / e[i]) / Math.log(e[i + 1] / e[i]) : (t - e[i]) / (e[i + 1] - e[i]);
    return (i + frac) / bins;
  }
  function histogram(svg, data) {
    const bins = data.hist_pos.length, top = Math.max(1, ...data.hist_pos, ...data.hist_neg);
    const x0 = 30, w = 320 / bins;
    el("rect", {x: x0, y: 10, width: 320, height: 220, fill: "none", stroke: "#999"}, svg);
    for (let i = 0; i < bins; i++) {
      const hn = 220 * data.hist_neg[i] / top, hp = 220 * data.hist_pos[i] / top;
      const range = " (" + fmt(data.edges[i]) + " to " + fmt(data.edges[i + 1]) + ")";
      el("rect", {x: x0 + i * w, y: 230 - hn, width: w - 1, height: hn, fill: "#2ca02c", "fill-opacity": 0.5}, svg)
        .appendChild(document.createElementNS(NS, "title")).textContent = "correct: " + data.hist_neg[i] + range;
      el("rect", {x: x0 + i * w, y: 230 - hp, width: w - 1, height: hp, fill: "#d62728", "fill-opacity": 0.5}, svg)
        .appendChild(document.createElementNS(NS, "title")).textContent = "hallucination: " + data.hist_pos[i] + range;
    }
    for (const k of [0, Math.round(bins / 4), Math.round(bins / 2), Math.round(3 * bins / 4), bins]) {
      const x = x0 + k * w;
      el("line", {x1: x, y1: 230, x2: x, y2: 234, stroke: "#999"}, svg);
      el("text", {x: x, y: 244, "font-size": 10, "text-anchor": k === 0 ? "start" : k === bins ? "end" : "middle", class: "tick"}, svg)
        .textContent = fmt(data.edges[k]);
    }
    const scale = {linear: "", log: ", log scale", quantile: ", bins of equal counts"}[data.axis] || "";
    el("text", {x: 190, y: 257, "font-size": 11, "text-anchor": "middle"}, svg).textContent = "score" + scale + " (red: hallucination, green: correct)";
    const line = el("line", {y1: 10, y2: 230, stroke: "#000", "stroke-dasharray": "4 2"}, svg);
    return (t) => { const x = x0 + 320 * position(data, t); line.setAttribute("x1", x); line.setAttribute("x2", x); };
  }
  for (const panel of document.querySelectorAll("section.panel")) {
    const blob = panel.querySelector("script.curve-data");
    if (!blob) continue;
    const data = JSON.parse(blob.textContent);
    const roc = panel.querySelector("svg.roc"), pr = panel.querySelector("svg.pr");
    axes(roc, "false positive rate", "true positive rate");
    axes(pr, "recall", "precision");
    el("line", {x1: L, y1: B, x2: L + W, y2: T, stroke: "#ccc"}, roc);
    const rocDot = curve(roc, data.roc, "#1f77b4"), prDot = curve(pr, data.pr, "#1f77b4");
    const moveLine = histogram(panel.querySelector("svg.hist"), data);
    const slider = panel.querySelector("input.threshold"), out = panel.querySelector("output.t-value");
    const cells = {tp: panel.querySelector("td.tp"), fp: panel.querySelector("td.fp"), fn: panel.querySelector("td.fn"), tn: panel.querySelector("td.tn")};
    const rates = panel.querySelector("p.rates");
    function show(i) {
      const t = data.thresholds[i], tp = data.tp[i], fp = data.fp[i], fn = data.pos - tp, tn = data.neg - fp;
      out.textContent = "score ≥ " + fmt(t);
      cells.tp.textContent = tp; cells.fp.textContent = fp; cells.fn.textContent = fn; cells.tn.textContent = tn;
      const prec = tp + fp ? tp / (tp + fp) : NaN, rec = data.pos ? tp / data.pos : NaN;
      rates.textContent = "precision " + fmt(prec) + " · recall " + fmt(rec) + " · false positive rate " + fmt(data.neg ? fp / data.neg : NaN);
      const r = data.roc[i + 1], p = data.pr[i];
      place(rocDot, r); place(prDot, p);
      moveLine(t);
    }
    // the threshold in use: the lowest stop still >= it predicts exactly the same items (stops are the scores)
    let start = 0;
    if (data.start !== null) data.thresholds.forEach((t, i) => { if (t >= data.start) start = i; });
    slider.value = start;
    slider.addEventListener("input", () => show(Number(slider.value)));
    show(start);
  }
  // one unit at a time on the item page: a click on its row marks its span of the answer (overlapping claims
  // included); a second click on the same row shows every unit again
  const answer = document.getElementById("answer");
  if (answer && answer.dataset.answer !== undefined) {
    const text = answer.dataset.answer;
    const whole = Array.from(answer.childNodes).map((n) => n.cloneNode(true));
    let focused = null;
    for (const row of document.querySelectorAll("#units tr.unit-row")) {
      row.addEventListener("click", () => {
        for (const r of document.querySelectorAll("#units tr.unit-row.focused")) r.classList.remove("focused");
        answer.replaceChildren();
        if (focused === row) {
          focused = null;
          for (const n of whole) answer.appendChild(n.cloneNode(true));
          return;
        }
        focused = row;
        row.classList.add("focused");
        const a = Number(row.dataset.start), b = Number(row.dataset.end);
        const mark = document.createElement("mark");
        mark.className = "claim-focus";
        mark.textContent = text.slice(a, b);
        answer.append(text.slice(0, a), mark, text.slice(b));
      });
    }
  }
  // unit shading on the item page: the chosen detector's unit scores as background strength (min-max over the item)
  const shade = document.getElementById("unit-shade");
  if (shade) {
    const units = Array.from(document.querySelectorAll("#answer span.unit"));
    shade.addEventListener("change", () => {
      const name = shade.value;
      const values = units.map((u) => JSON.parse(u.dataset.scores)[name]).filter((v) => Number.isFinite(v));
      const lo = Math.min(...values), hi = Math.max(...values);
      for (const u of units) {
        const v = JSON.parse(u.dataset.scores)[name];
        if (!name || !Number.isFinite(v)) { u.style.backgroundColor = ""; u.removeAttribute("data-shade"); continue; }
        const a = hi > lo ? (v - lo) / (hi - lo) : 1;
        u.style.backgroundColor = "rgba(255, 127, 14, " + (0.1 + 0.8 * a).toFixed(2) + ")";
        u.dataset.shade = a.toFixed(3);
        u.title = u.title.split(" · ")[0] + " · " + name + " = " + fmt(v);
      }
    });
  }
})();
