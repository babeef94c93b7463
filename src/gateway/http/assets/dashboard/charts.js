// Plain SVG time charts for the analyst dashboard: a time axis over the chosen range with
// ticks in the viewer's time zone, one labelled value axis per chart, hover values, and
// policy changes marked on the time axis. No library: the page works offline and without a
// build step, and every number drawn is in the DOM for tests to read.
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
  const W = 430, H = 190, L = 52, R = 14, T = 16, B = 36;
  const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const STEPS = [60, 300, 600, 900, 1800, 3600, 10800, 21600, 43200, 86400, 172800, 604800];

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // Tick times in [from, to] at a round step in local time, at most `most` of them.
  function timeTicks(from, to, most) {
    const step = STEPS.find((s) => (to - from) / s <= most) || STEPS[STEPS.length - 1];
    // Aligned to the step in local time, with each tick's own UTC offset (a range may cross a
    // daylight-saving change).
    const offset = (t) => -new Date(t * 1000).getTimezoneOffset() * 60;
    const aligned = (t) => Math.ceil((t + offset(t)) / step) * step - offset(t);
    const long = to - from > 86400;
    const fmt = new Intl.DateTimeFormat(undefined, step >= 86400
      ? { month: "short", day: "numeric" }
      : long ? { weekday: "short", hour: "2-digit", minute: "2-digit" } : { hour: "2-digit", minute: "2-digit" });
    const ticks = [];
    for (let t = aligned(from); t <= to; t = aligned(t + step)) ticks.push({ t, label: fmt.format(new Date(t * 1000)) });
    return ticks;
  }

  // Round value ticks from 0 (or `min`) up past `max`.
  function valueTicks(min, max, count) {
    const span = Math.max(max - min, 1e-9);
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const ticks = [];
    for (let v = Math.floor(min / step) * step; v <= max + step * 1e-6; v += step) ticks.push(+v.toFixed(10));
    if (ticks[ticks.length - 1] < max) ticks.push(+(ticks[ticks.length - 1] + step).toFixed(10));
    return ticks;
  }

  const timeLabel = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

  // The frame every chart shares: axes, ticks, titles, policy marks and a hover layer.
  function frame(opts, yTicks, pointsDrawn) {
    const { name, from, to, yTitle, marks } = opts;
    const svg = el("svg", { width: W, height: H, "data-series": name, "data-points": pointsDrawn, role: "img" });
    const x = (t) => L + ((t - from) / (to - from)) * (W - L - R);
    const yMin = yTicks[0], yMax = yTicks[yTicks.length - 1];
    const y = (v) => H - B - ((v - yMin) / (yMax - yMin || 1)) * (H - B - T);
    for (const v of yTicks) {
      el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eee" }, svg);
      el("text", { class: "y-tick", x: L - 4, y: y(v) + 3, "text-anchor": "end" }, svg, (opts.tickFmt || opts.fmt)(v));
    }
    el("text", { class: "axis-title", transform: `translate(11 ${(H - B + T) / 2}) rotate(-90)`, "text-anchor": "middle" }, svg, yTitle);
    el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#999" }, svg);
    el("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#999" }, svg);
    for (const tick of timeTicks(from, to, 5)) {
      el("line", { x1: x(tick.t), x2: x(tick.t), y1: H - B, y2: H - B + 4, stroke: "#999" }, svg);
      // A label at either end of the axis stays inside the chart.
      const anchor = x(tick.t) > W - R - 24 ? "end" : x(tick.t) < L + 24 ? "start" : "middle";
      el("text", { class: "x-tick", x: x(tick.t), y: H - B + 15, "text-anchor": anchor }, svg, tick.label);
    }
    el("text", { class: "axis-title", x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle" }, svg, `time (${ZONE})`);
    let lastX = -Infinity, row = 0;
    for (const m of marks || []) {
      if (m.at < from || m.at > to) continue;
      // Marks close together stack their labels instead of writing over each other.
      row = x(m.at) - lastX < 18 ? row + 1 : 0;
      lastX = x(m.at);
      const g = el("g", { class: "policy-mark", "data-version": m.version, "data-default": m.default, "data-by": m.by, "data-at": m.at }, svg);
      el("line", { x1: x(m.at), x2: x(m.at), y1: T, y2: H - B, stroke: "#b00", "stroke-dasharray": "4 3" }, g);
      // "*v3": version 3 of the default (tenant *), which the route followed then.
      el("text", { x: x(m.at) + 2, y: T - 4 + row * 10, fill: "#b00" }, g, `${m.default ? "*" : ""}v${m.version}`);
      const whose = m.default ? "the default policy (tenant *)" : "the route's policy";
      el("title", {}, g, `${whose} v${m.version} (${m.action}) by ${m.by}, ${timeLabel.format(new Date(m.at * 1000))}`);
    }
    if (!pointsDrawn) el("text", { class: "empty", x: (L + W - R) / 2, y: (T + H - B) / 2, "text-anchor": "middle" }, svg, "no data in this range");
    return { svg, x, y };
  }

  // Show the bucket under the pointer: its time and every series' value.
  function hover(svg, x, opts, describe) {
    const tip = document.getElementById("tip");
    const layer = el("rect", { x: L, y: T, width: W - L - R, height: H - B - T, fill: "transparent" }, svg);
    layer.addEventListener("mousemove", (e) => {
      const box = svg.getBoundingClientRect();
      const px = e.clientX - box.left;
      let best = null;
      for (const t of opts.times) if (best === null || Math.abs(x(t) - px) < Math.abs(x(best) - px)) best = t;
      if (best === null || Math.abs(x(best) - px) > 24) { tip.hidden = true; return; }
      tip.replaceChildren();
      const head = document.createElement("b");
      head.textContent = timeLabel.format(new Date(best * 1000));
      tip.appendChild(head);
      for (const line of describe(best)) { const d = document.createElement("div"); d.textContent = line; tip.appendChild(d); }
      tip.style.left = e.pageX + 14 + "px";
      tip.style.top = e.pageY + 10 + "px";
      tip.hidden = false;
    });
    layer.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  function wrap(title, svg, names) {
    const d = document.createElement("div");
    d.className = "chart";
    const h = document.createElement("h3");
    h.textContent = title;
    d.append(h, svg);
    if (names && names.length) {
      const legend = document.createElement("div");
      legend.className = "legend";
      names.forEach((n, k) => { const s = document.createElement("span"); s.style.color = COLORS[k % COLORS.length]; s.textContent = "■ " + n; legend.appendChild(s); });
      d.appendChild(legend);
    }
    return d;
  }

  // Lines over time: series [{label, values: Map(t → number|null)}], points at bucket middles.
  function line(opts) {
    const all = opts.series.flatMap((s) => [...s.values.values()]).filter((v) => v !== null && v !== undefined);
    const top = opts.yMax !== undefined ? opts.yMax : all.length ? Math.max(...all, 1e-9) * 1.05 : 1;
    const ticks = valueTicks(opts.yMin || 0, top, 4);
    const { svg, x, y } = frame(opts, ticks, all.length);
    const mid = (t) => t + opts.bucket / 2;
    opts.series.forEach((s, k) => {
      const color = COLORS[k % COLORS.length];
      const pts = opts.times.filter((t) => s.values.get(t) !== null && s.values.get(t) !== undefined);
      if (pts.length > 1) el("polyline", { points: pts.map((t) => `${x(mid(t))},${y(s.values.get(t))}`).join(" "), fill: "none", stroke: color, "stroke-width": 1.5 }, svg);
      for (const t of pts) {
        const c = el("circle", { cx: x(mid(t)), cy: y(s.values.get(t)), r: 2.5, fill: color }, svg);
        el("title", {}, c, `${s.label}: ${opts.fmt(s.values.get(t))}`);
      }
    });
    hover(svg, (t) => x(mid(t)), opts, (t) => opts.series.map((s) => {
      const v = s.values.get(t);
      return `${s.label}: ${v === null || v === undefined ? "—" : opts.fmt(v)}`;
    }));
    return wrap(opts.title, svg, opts.series.map((s) => s.label));
  }

  // Stacked bars over time: stacks Map(t → {key: count}), one bar per bucket.
  function bars(opts) {
    const keys = [...new Set([...opts.stacks.values()].flatMap((m) => Object.keys(m)))].sort();
    const total = (m) => Object.values(m).reduce((a, b) => a + b, 0);
    const totals = [...opts.stacks.values()].map(total);
    const ticks = valueTicks(0, Math.max(1, ...totals), 4);
    const { svg, x, y } = frame(opts, ticks, totals.filter((n) => n > 0).length);
    const width = Math.max(2, x(opts.from + opts.bucket) - x(opts.from) - 2);
    for (const [t, m] of opts.stacks) {
      let base = 0;
      keys.forEach((key, k) => {
        const n = m[key] || 0;
        if (!n) return;
        const r = el("rect", { x: x(t) + 1, y: y(base + n), width, height: y(base) - y(base + n), fill: COLORS[k % COLORS.length] }, svg);
        el("title", {}, r, `${key}: ${n}`);
        base += n;
      });
    }
    hover(svg, (t) => x(t + opts.bucket / 2), opts, (t) => {
      const m = opts.stacks.get(t) || {};
      return keys.filter((k) => m[k]).map((k) => `${k}: ${m[k]} requests`);
    });
    return wrap(opts.title, svg, keys);
  }

  return { line, bars, timeTicks, ZONE };
})();
