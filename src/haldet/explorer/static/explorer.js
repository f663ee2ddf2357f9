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
  function axes(svg, xlabel, ylabel) {
    el("rect", {x: 30, y: 10, width: 220, height: 220, fill: "none", stroke: "#999"}, svg);
    el("text", {x: 140, y: 252, "text-anchor": "middle", "font-size": 11}, svg).textContent = xlabel;
    const t = el("text", {x: 12, y: 120, "text-anchor": "middle", "font-size": 11, transform: "rotate(-90 12 120)"}, svg);
    t.textContent = ylabel;
  }
  function curve(svg, points, colour) {
    const d = points.map((p, i) => (i ? "L" : "M") + (30 + 220 * p[0]).toFixed(1) + "," + (230 - 220 * p[1]).toFixed(1)).join("");
    el("path", {d: d, fill: "none", stroke: colour, "stroke-width": 2}, svg);
    return el("circle", {r: 4, fill: "#d62728", cx: 30, cy: 230}, svg);
  }
  function histogram(svg, data) {
    const bins = data.hist_pos.length, top = Math.max(1, ...data.hist_pos, ...data.hist_neg);
    const w = 320 / bins, lo = data.edges[0], hi = data.edges[bins];
    el("rect", {x: 30, y: 10, width: 320, height: 220, fill: "none", stroke: "#999"}, svg);
    for (let i = 0; i < bins; i++) {
      const hn = 220 * data.hist_neg[i] / top, hp = 220 * data.hist_pos[i] / top;
      el("rect", {x: 30 + i * w, y: 230 - hn, width: w - 1, height: hn, fill: "#2ca02c", "fill-opacity": 0.5}, svg)
        .appendChild(document.createElementNS(NS, "title")).textContent = "correct: " + data.hist_neg[i];
      el("rect", {x: 30 + i * w, y: 230 - hp, width: w - 1, height: hp, fill: "#d62728", "fill-opacity": 0.5}, svg)
        .appendChild(document.createElementNS(NS, "title")).textContent = "hallucination: " + data.hist_pos[i];
    }
    el("text", {x: 30, y: 252, "font-size": 11}, svg).textContent = fmt(lo);
    el("text", {x: 350, y: 252, "font-size": 11, "text-anchor": "end"}, svg).textContent = fmt(hi);
    el("text", {x: 190, y: 252, "font-size": 11, "text-anchor": "middle"}, svg).textContent = "score (red: hallucination, green: correct)";
    const line = el("line", {y1: 10, y2: 230, stroke: "#000", "stroke-dasharray": "4 2"}, svg);
    return (t) => { const x = 30 + 320 * (hi > lo ? (t - lo) / (hi - lo) : 0); line.setAttribute("x1", x); line.setAttribute("x2", x); };
  }
  for (const panel of document.querySelectorAll("section.panel")) {
    const blob = panel.querySelector("script.curve-data");
    if (!blob) continue;
    const data = JSON.parse(blob.textContent);
    const roc = panel.querySelector("svg.roc"), pr = panel.querySelector("svg.pr");
    axes(roc, "false positive rate", "true positive rate");
    axes(pr, "recall", "precision");
    el("line", {x1: 30, y1: 230, x2: 250, y2: 10, stroke: "#ccc"}, roc);
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
      rocDot.setAttribute("cx", 30 + 220 * r[0]); rocDot.setAttribute("cy", 230 - 220 * r[1]);
      prDot.setAttribute("cx", 30 + 220 * p[0]); prDot.setAttribute("cy", 230 - 220 * p[1]);
      moveLine(t);
    }
    // the threshold in use: the lowest stop still >= it predicts exactly the same items (stops are the scores)
    let start = 0;
    if (data.start !== null) data.thresholds.forEach((t, i) => { if (t >= data.start) start = i; });
    slider.value = start;
    slider.addEventListener("input", () => show(Number(slider.value)));
    show(start);
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
