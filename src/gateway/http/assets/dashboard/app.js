// The analyst dashboard: reads /v1/analytics/summary and /v1/analytics/routes for one time
// range with the key the user gives, and draws a sortable summary and per-route charts.
"use strict";

const $ = (id) => document.getElementById(id);
const SPANS = { hour: 3600, day: 86400, week: 7 * 86400 };

// The bucket a range is drawn in: a few dozen points or more, never thousands.
function bucketFor(span) {
  if (span <= 6 * 3600) return ["minute", 60];
  if (span <= 14 * 86400) return ["hour", 3600];
  return ["day", 86400];
}

// [from, to) in unix seconds, `to` just past now for the presets.
function chosenRange() {
  const choice = $("range").value;
  let from, to;
  if (choice === "custom") {
    from = Math.floor(new Date($("from").value).getTime() / 1000);
    to = Math.floor(new Date($("to").value).getTime() / 1000);
    if (!(from < to)) throw new Error("choose a custom range whose start comes before its end");
  } else {
    to = Math.floor(Date.now() / 1000) + 1;
    from = to - SPANS[choice];
  }
  const [bucket, secs] = bucketFor(to - from);
  return { from: Math.floor(from / secs) * secs, to, bucket, secs };
}

const pct = (v) => (v * 100).toFixed(1) + "%";
const fixed = (n) => (v) => v.toFixed(n);
const count = (v) => v.toLocaleString();
const ms = (v) => v.toLocaleString() + " ms";

function speedupCell(td, row) {
  if (row.speedup === null) {
    td.className = "not-measured";
    td.textContent = "not measured";
    td.title = "no request of this route was decoded plainly in the range (plain choices or shadow checks)";
    return;
  }
  td.textContent = row.speedup.toFixed(2) + "×";
  if (row.speedup_low !== null) {
    const ci = document.createElement("span");
    ci.className = "ci";
    ci.textContent = ` (${row.speedup_low.toFixed(2)}–${row.speedup_high.toFixed(2)})`;
    td.appendChild(ci);
  }
  td.title = `${row.served_tokens_per_second.toFixed(1)} tok/s decoding vs ${row.plain_tokens_per_second.toFixed(1)} plain, ` +
    `plain from ${row.plain_requests} plain requests and ${row.plain_shadow_checks} shadow checks (${row.plain_decode_tokens} tokens)`;
}

// The summary's columns: field, heading, how a value reads (null reads "—").
const COLUMNS = [
  ["tenant", "tenant", String, "text"],
  ["class", "class", String, "text"],
  ["requests", "requests", count],
  ["prompt_tokens", "prompt tokens", count],
  ["completion_tokens", "completion tokens", count],
  ["acceptance_rate", "acceptance", pct],
  ["tokens_per_pass", "tokens / pass", fixed(2)],
  ["ttft_p50_ms", "TTFT p50", ms],
  ["ttft_p95_ms", "TTFT p95", ms],
  ["itl_p50_ms", "ITL p50", ms],
  ["itl_p95_ms", "ITL p95", ms],
  ["strategy_mix", "strategy mix", null, "mix"],
  ["speedup", "speed-up vs plain", null],
  ["prefix_cache_hit_rate", "prefix-cache hits", pct],
  ["queue_p50_ms", "queue p50", ms],
  ["queue_p95_ms", "queue p95", ms],
];

// The mix's main parts (10% and more) shown, the rest summed; the whole mix on hover.
function mixCell(td, mix) {
  const parts = Object.entries(mix).sort((a, b) => b[1] - a[1]);
  const main = parts.filter(([, s]) => s >= 0.1);
  const rest = parts.slice(main.length).reduce((a, [, s]) => a + s, 0);
  const text = main.map(([k, s]) => `${k} ${Math.round(s * 100)}%`);
  if (rest > 0) text.push(`other ${rest < 0.01 ? "<1" : Math.round(rest * 100)}%`);
  td.textContent = text.join(", ") || "—";
  td.title = parts.map(([k, s]) => `${k}: ${(s * 100).toFixed(1)}%`).join("\n");
}

function cell(row, [field, , fmt, kind]) {
  const td = document.createElement("td");
  td.dataset.field = field;
  const v = row[field];
  td.dataset.value = typeof v === "object" && v !== null ? JSON.stringify(v) : v === null ? "" : String(v);
  if (kind) td.className = kind;
  if (field === "speedup") speedupCell(td, row);
  else if (field === "strategy_mix") mixCell(td, v);
  else td.textContent = v === null ? "—" : fmt(v);
  return td;
}

// A sortable table: a header click sorts by that column, again reverses it; `first` is the
// order it opens in (from the link's `#sort=field` or `#sort=-field`).
function table(node, rows, first) {
  const head = document.createElement("tr");
  const body = document.createElement("tbody");
  let sorted = { field: null, dir: 1 };
  const fill = () => {
    body.replaceChildren(...rows.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.route = row.tenant + " / " + row.class;
      tr.append(...COLUMNS.map((c) => cell(row, c)));
      return tr;
    }));
  };
  for (const c of COLUMNS) {
    const th = document.createElement("th");
    th.textContent = c[1];
    th.dataset.field = c[0];
    if (c[3]) th.className = "text";
    const sortBy = (dir) => {
      sorted = { field: c[0], dir };
      // The mix sorts by its main part's name, then by that part's share.
      const main = (m) => Object.entries(m).sort((a, b) => b[1] - a[1])[0] || ["", 0];
      const key = (r) => (c[0] === "strategy_mix" ? main(r.strategy_mix).join(" ") : r[c[0]]);
      rows.sort((a, b) => {
        const [x, y] = [key(a), key(b)];
        if (x === y) return 0;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * sorted.dir;
      });
      head.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", sorted.dir > 0 ? "ascending" : "descending");
      fill();
    };
    th.addEventListener("click", () => sortBy(sorted.field === c[0] ? -sorted.dir : 1));
    head.appendChild(th);
    if (first && first.field === c[0]) sortBy(first.dir);
  }
  const thead = document.createElement("thead");
  thead.appendChild(head);
  node.replaceChildren(thead, body);
  if (!sorted.field) fill();
}

function routeCharts(id, rows, range, marks) {
  const times = rows.map((r) => r.bucket_start);
  const by = (f) => new Map(rows.map((r) => [r.bucket_start, f(r)]));
  const common = { from: range.from, to: range.to, bucket: range.secs, times, marks };
  const charts = document.createElement("div");
  charts.className = "charts";
  charts.append(
    Charts.line({ ...common, name: "acceptance", title: "acceptance rate (accepted ÷ drafted)", yTitle: "acceptance", yMax: 1, fmt: pct,
      tickFmt: (v) => Math.round(v * 100) + "%",
      series: [{ label: "acceptance rate", values: by((r) => (r.drafted > 0 ? r.acceptance_rate : null)) }] }),
    Charts.line({ ...common, name: "tokens-per-pass", title: "tokens per target pass", yTitle: "tokens / pass", yMin: 0, fmt: fixed(2),
      series: [{ label: "tokens per pass", values: by((r) => (r.target_passes > 0 ? r.tokens_per_pass : null)) }] }),
    Charts.line({ ...common, name: "ttft", title: "time to first token", yTitle: "ms", fmt: ms,
      series: [{ label: "TTFT p50", values: by((r) => r.ttft_p50_ms) }, { label: "TTFT p95", values: by((r) => r.ttft_p95_ms) }] }),
    Charts.line({ ...common, name: "itl", title: "inter-token latency", yTitle: "ms", fmt: ms,
      series: [{ label: "ITL p50", values: by((r) => r.itl_p50_ms) }, { label: "ITL p95", values: by((r) => r.itl_p95_ms) }] }),
    Charts.bars({ ...common, name: "strategy-mix", title: "strategy mix (requests per strategy:k)", yTitle: "requests", fmt: count,
      stacks: by((r) => r.strategy_mix) }),
  );
  const sec = document.createElement("section");
  sec.className = "route";
  sec.dataset.route = id;
  const h = document.createElement("h3");
  h.className = "title";
  h.textContent = `${id} — ${rows.reduce((a, r) => a + r.requests, 0).toLocaleString()} requests`;
  sec.append(h, charts);
  return sec;
}

async function getJson(path, key) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + key } });
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.message) || r.statusText);
  return body;
}

async function load() {
  const key = $("key").value.trim();
  if (!key) return;
  localStorage.setItem("specgate-key", key);
  $("status").className = "";
  $("status").textContent = "loading…";
  try {
    const range = chosenRange();
    const q = new URLSearchParams({ from: range.from, to: range.to });
    if ($("tenant").value.trim()) q.set("tenant", $("tenant").value.trim());
    const [summary, series] = await Promise.all([
      getJson("/v1/analytics/summary?" + q, key),
      getJson(`/v1/analytics/routes?${q}&bucket=${range.bucket}`, key),
    ]);
    draw(summary, series, range, key, q);
  } catch (e) {
    $("status").className = "error";
    $("status").textContent = e.message;
    document.body.dataset.ready = "error";
  }
}

function draw(summary, series, range, key, q) {
  const hash = new URLSearchParams(location.hash.slice(1));
  const sort = hash.get("sort") || "";
  const first = sort && { field: sort.replace(/^-/, ""), dir: sort.startsWith("-") ? -1 : 1 };
  table($("tenants"), summary.data.filter((r) => r.class === "all"), first);
  table($("routes-table"), summary.data.filter((r) => r.class !== "all"), first);
  $("csv").dataset.href = "/v1/analytics/summary?" + q + "&format=csv";
  $("csv").onclick = async (e) => {
    e.preventDefault();
    const r = await fetch($("csv").dataset.href, { headers: { Authorization: "Bearer " + key } });
    if (!r.ok) {
      $("status").className = "error";
      $("status").textContent = "CSV: " + (((await r.json()).error || {}).message || r.statusText);
      return;
    }
    const a = document.createElement("a");
    a.href = URL.createObjectURL(await r.blob());
    a.download = `specgate-summary-${range.from}-${range.to}.csv`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  };
  $("summary").hidden = false;
  const routes = new Map();
  for (const row of series.data) {
    const id = row.tenant + " / " + row.class;
    if (!routes.has(id)) routes.set(id, []);
    routes.get(id).push(row);
  }
  const marksFor = (tenant, cls) => summary.policy_changes.filter((c) => c.tenant === tenant && c.class === cls);
  $("routes").replaceChildren(...[...routes].map(([id, rows]) => {
    rows.sort((a, b) => a.bucket_start - b.bucket_start);
    return routeCharts(id, rows, range, marksFor(rows[0].tenant, rows[0].class));
  }));
  const fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  const none = summary.data.length ? "" : "no requests in this range: ";
  $("status").textContent = `${none}${routes.size} routes, ${fmt.format(new Date(range.from * 1000))} – ${fmt.format(new Date(range.to * 1000))} ` +
    `(${Charts.ZONE}), ${range.bucket} buckets; ${summary.policy_changes.length} policy changes`;
  Object.assign(document.body.dataset, { from: range.from, to: range.to, bucket: range.bucket, ready: "1" });
}

function start() {
  const hash = new URLSearchParams(location.hash.slice(1));
  $("key").value = hash.get("key") || localStorage.getItem("specgate-key") || "";
  if (hash.get("tenant")) $("tenant").value = hash.get("tenant");
  if (SPANS[hash.get("range")] || hash.get("range") === "custom") $("range").value = hash.get("range");
  const local = (t) => new Date((t - new Date(t * 1000).getTimezoneOffset() * 60) * 1000).toISOString().slice(0, 16);
  const now = Math.floor(Date.now() / 1000);
  $("from").value = local(Number(hash.get("from")) || now - 86400);
  $("to").value = local(Number(hash.get("to")) || now);
  const showCustom = () => { $("custom").hidden = $("range").value !== "custom"; };
  $("range").addEventListener("change", showCustom);
  showCustom();
  $("form").addEventListener("submit", (e) => { e.preventDefault(); load(); });
  load();
}

start();
