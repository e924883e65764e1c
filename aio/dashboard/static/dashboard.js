// The AIO cost dashboard. Data comes from /api/dashboard/* (the HttpOnly cookie authenticates the fetches).
// Every text from the log is put in the page with textContent, never as HTML.
"use strict";

const TIER_COLORS = { small: "#4e79a7", medium: "#f28e2b", large: "#e15759", none: "#9c9c9c", all: "#59a14f" };
const RANGES = [["24h", "24 h"], ["7d", "7 d"], ["30d", "30 d"], ["custom", "custom"]];
const charts = {};
const panelRanges = {}; // panel id -> {range, start, end}
let pageRange = { range: "24h", start: "", end: "" };

// ---- formatting -------------------------------------------------------------------------------------------------

const usd = (x) => (x === null || x === undefined ? "–" : "$" + (Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(2) : x.toFixed(4)));
const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
const num = (x) => (x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US", { maximumFractionDigits: 1 }));
const ms = (x) => (x === null || x === undefined ? "–" : x >= 1000 ? (x / 1000).toFixed(2) + " s" : x.toFixed(1) + " ms");
const color = (tier) => TIER_COLORS[tier] || "#76b7b2";
// Requests refused before any tier took them are stored without a tier ("none"): shown as "rejected", not a tier.
const tierName = (tier) => (tier === "none" ? "rejected" : tier);
// "2025-03-04T06:00:00.123456Z" → "2025-03-04 06:00 UTC"
const when = (iso) => (iso ? iso.replace("T", " ").slice(0, 16) + " UTC" : "–");

// Short bucket labels: hours as "06:00" (the date, "03-05", at midnight), days as "03-05".
function shortLabels(buckets) {
  return buckets.map((b) => {
    if (!b.includes("T")) return b.slice(5, 10);
    const hour = b.slice(11, 16);
    return hour === "00:00" ? b.slice(5, 10) : hour;
  });
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child === null || child === undefined ? "" : String(child)));
  }
  return node;
}

function table(id, caption, headers, rows) {
  const t = document.getElementById(id);
  t.replaceChildren();
  if (caption) t.append(el("caption", {}, caption));
  t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const row of rows) {
    body.append(el("tr", {}, ...row.map((cell) => (cell instanceof Node ? el("td", {}, cell) : el("td", {}, cell)))));
  }
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: String(headers.length) }, "no data in this range")));
  t.append(body);
}

function chart(id, config) {
  if (charts[id]) charts[id].destroy();
  config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false,
    interaction: { mode: "index", intersect: false } }, config.options || {});
  // Horizontal x labels: Chart.js skips the ones that do not fit instead of tilting them over each other.
  const scales = config.options.scales = config.options.scales || {};
  scales.x = Object.assign({}, scales.x);
  scales.x.ticks = Object.assign({ maxRotation: 0, autoSkip: true, autoSkipPadding: 8 }, scales.x.ticks || {});
  charts[id] = new Chart(document.getElementById(id), config);
}

// ---- ranges -----------------------------------------------------------------------------------------------------

function rangeQuery(r) {
  const q = new URLSearchParams({ range: r.range });
  if (r.range === "custom") {
    if (r.start) q.set("start", r.start);
    if (r.end) q.set("end", r.end);
  }
  return q;
}

function buildRangeControl(container, initial, onChange, label) {
  container.replaceChildren();
  const select = el("select", { "aria-label": (label || "range") });
  for (const [value, text] of RANGES) select.append(el("option", { value }, text));
  select.value = initial.range;
  const start = el("input", { type: "date", "aria-label": "start" });
  const end = el("input", { type: "date", "aria-label": "end" });
  start.value = initial.start || "";
  end.value = initial.end || "";
  const apply = el("button", { type: "button" }, "apply");
  const custom = el("span", {}, start, " – ", end, " ", apply);
  custom.hidden = initial.range !== "custom";
  const fire = () => onChange({ range: select.value, start: start.value, end: end.value });
  select.addEventListener("change", () => {
    custom.hidden = select.value !== "custom";
    if (select.value !== "custom" || start.value) fire();
  });
  apply.addEventListener("click", fire);
  container.append(...(label ? [el("span", {}, label + ":")] : []), select, custom);
}

// ---- loading ----------------------------------------------------------------------------------------------------

async function api(endpoint, r, extra) {
  const q = r ? rangeQuery(r) : new URLSearchParams();
  for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
  const response = await fetch(`/api/dashboard/${endpoint}?${q}`, { credentials: "same-origin", cache: "no-store" });
  if (response.status === 401 || response.status === 403) {
    window.location.assign("/dashboard");
    throw new Error("signed out");
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body && body.error ? body.error.message : `HTTP ${response.status}`);
  return body;
}

const RENDERERS = { summary: renderSummary, traffic: renderTraffic, cost: renderCost, breakdown: renderBreakdown,
  latency: renderLatency, quality: renderQuality, router: renderRouter, engine: renderEngine };

async function loadPanel(section) {
  const endpoint = section.dataset.endpoint;
  const status = document.getElementById("status");
  try {
    const data = await api(endpoint, endpoint === "engine" ? null : panelRanges[section.id] || pageRange);
    RENDERERS[endpoint](data);
    section.dataset.loaded = "true";
    status.textContent = "";
  } catch (err) {
    if (err.message !== "signed out") status.textContent = `${section.querySelector("h2").textContent}: ${err.message}`;
    section.dataset.loaded = "error";
  }
}

function loadAll() {
  return Promise.all([...document.querySelectorAll("section.panel:not([data-follows])")].map(loadPanel));
}

// ---- panels -----------------------------------------------------------------------------------------------------

// "bad" below the pass rate at which the quality monitor moves traffic up, "warn" until it would recover.
function qualityClass(rate, limits) {
  if (rate === null || rate === undefined || !limits) return "";
  return rate < limits.red_below ? "bad" : rate < limits.amber_below ? "warn" : "good";
}

// The server's note names the demo tiers itself ("demo tiers: all three serve one real model, ..."): shown as it is,
// capitalised, with what it means for the figures; the advice to configure tiers only where the note lacks it.
function demoBanner(note) {
  const advice = note.includes("README") ? "." : ": configure tiers (README, Configuration).";
  return note.charAt(0).toUpperCase() + note.slice(1) +
    ". Costs, savings and quality here describe the demo, not a real deployment" + advice;
}

function estimateTile(tile, e) {
  if (!e) return tile("tile-estimate", "Quality vs all-large (est.)", "–",
    "tiers not measured yet: routing by the quality knob (aio calibrate)");
  const band = `${pct(e.low)}–${pct(e.high)}`;
  return tile("tile-estimate", "Quality vs all-large (est.)", pct(e.relative_accuracy),
    `${band} (90%), target ${pct(e.target)}, on ${num(e.num_prompts)} ${e.on}`,
    e.relative_accuracy + 1e-9 >= e.target ? "good" : "warn");
}

function renderSummary(data) {
  const t = data.total;
  const banner = document.getElementById("demo-banner");
  banner.hidden = !data.demo_tiers;
  banner.textContent = data.demo_tiers ? demoBanner(data.demo_tiers) : "";
  const tile = (id, label, value, sub, cls) => el("div", { class: "tile", id }, el("div", { class: "label" }, label),
    el("div", { class: "value " + (cls || "") }, value), el("div", { class: "sub" }, sub || ""));
  const bought = t.quality_pass_rate === null ? "no answers verified yet" : `at a ${pct(t.quality_pass_rate)} pass rate`;
  const qualityCls = qualityClass(t.quality_pass_rate, data.quality_limits);
  document.getElementById("kpi-tiles").replaceChildren(
    tile("tile-requests", "Requests", num(t.requests), `+ ${num(t.rejected)} rejected before a tier (4xx)`),
    tile("tile-tokens", "Tokens", num(t.tokens), `${num(t.prompt_tokens)} in / ${num(t.completion_tokens)} out`),
    tile("tile-cost", "Actual cost", usd(t.cost_usd),
      t.cascades ? `incl. ${usd(t.cascade_cost_usd)} for ${num(t.cascades)} cascaded requests' first answers` : ""),
    tile("tile-baseline", "All-large baseline", usd(t.baseline_cost_usd)),
    tile("tile-savings", "Savings", usd(t.savings_usd),
      (t.savings_pct === null ? "" : t.savings_pct.toFixed(1) + "% of the baseline, ") + bought,
      qualityCls === "good" || qualityCls === "" ? "good" : qualityCls),
    tile("tile-quality", "Quality pass rate", pct(t.quality_pass_rate),
      `${num(t.quality_verdicts)} sampled answers; judge ${usd(t.judge_cost_usd)}` + (data.quality_limits
        ? `; limits ${pct(data.quality_limits.red_below)} / ${pct(data.quality_limits.amber_below)}` : ""), qualityCls),
    tile("tile-errors", "Error rate", pct(t.error_rate), `${num(t.errors)} of the served requests not ok; ` +
      `${num(t.rejected)} rejected (4xx) counted apart`, t.error_rate > 0.05 ? "bad" : ""),
    tile("tile-ttft", "p95 TTFT", ms(t.ttft_p95_ms)),
    estimateTile(tile, data.quality_estimate));
  const rows = Object.entries(data.tiers).map(([tier, v]) => [tier, num(v.requests), num(v.tokens), usd(v.cost_usd),
    usd(v.baseline_cost_usd), usd(v.savings_usd), v.savings_pct === null ? "–" : v.savings_pct.toFixed(1) + "%",
    pct(v.quality_pass_rate), pct(v.error_rate), ms(v.ttft_p95_ms)]);
  table("kpi-tiers", `Per tier (${when(data.range.start)} → ${when(data.range.end)}, ${data.range.source})`,
    ["tier", "requests", "tokens", "cost", "baseline", "savings", "savings %", "pass rate", "errors", "p95 TTFT"], rows);
  const body = document.querySelector("#kpi-tiers tbody");
  if (data.rejected && data.rejected.requests) {
    body.append(el("tr", { class: "rejected" }, el("td", {}, "rejected"), el("td", {}, num(data.rejected.requests)),
      el("td", { colspan: "8" }, "refused before a tier took them (bad input, auth, limits): no cost, not errors")));
  }
}

function stacked(id, buckets, tiers, key, title, percent) {
  chart(id, { type: "bar", data: { labels: shortLabels(buckets), datasets: Object.entries(tiers).map(([tier, v]) => ({
      label: tierName(tier), data: v[key].map((x) => (x === null ? 0 : percent ? 100 * x : x)), backgroundColor: color(tier) })) },
    options: { plugins: { title: { display: true, text: title } },
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, max: percent ? 100 : undefined } } } });
}

function renderTraffic(data) {
  stacked("chart-traffic-requests", data.buckets, data.tiers, "requests", "Requests by tier");
  stacked("chart-traffic-tokens", data.buckets, data.tiers, "token_share", "Share of tokens by tier (%)", true);
}

function renderCost(data) {
  const t = data.total;
  chart("chart-cost", { type: "line", data: { labels: shortLabels(data.buckets), datasets: [
      { label: "actual cost ($)", data: t.cost_usd, borderColor: "#4e79a7", backgroundColor: "#4e79a7" },
      { label: "all-large baseline ($)", data: t.baseline_cost_usd, borderColor: "#e15759", backgroundColor: "#e15759", borderDash: [6, 4] },
      { label: "cumulative savings ($)", data: t.cumulative_savings_usd, borderColor: "#59a14f", backgroundColor: "#59a14f", yAxisID: "y2" }] },
    options: { plugins: { title: { display: true, text: "Cost per bucket; cumulative savings (right axis)" } },
      scales: { y: { beginAtZero: true }, y2: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false } } } } });
  stacked("chart-cost-tiers", data.buckets, data.tiers, "cost_usd", "Actual cost by tier ($)");
}

// A key's budget: spent of the budget this period, what is left and the next reset; flagged past the soft limit.
function budgetText(b) {
  if (!b) return "";
  const flag = b.exceeded ? "⛔ " : b.soft_exceeded ? "⚠ " : "";
  const reset = b.next_reset ? `, resets ${b.next_reset.slice(0, 16).replace("T", " ")} UTC` : "";
  return `${flag}${usd(b.spent_usd)} of ${usd(b.budget_usd)}/${b.period}, ${usd(b.left_usd)} left${reset}`;
}

function renderBreakdown(data) {
  const titles = { tier: "By tier", key: "By API key", user: "By user", model: "By model" };
  for (const [by, b] of Object.entries(data.breakdowns)) {
    const budgets = by === "key";
    const rows = b.rows.map((row) => [by === "tier" ? tierName(row.label) : row.label, num(row.requests), num(row.tokens), usd(row.cost_usd),
      usd(row.savings_usd), pct(row.cost_share), ...(budgets ? [budgetText(row.budget)] : [])]);
    if (b.other) rows.push([`(${b.other.groups} more)`, num(b.other.requests), num(b.other.tokens), usd(b.other.cost_usd), usd(b.other.savings_usd), "",
      ...(budgets ? [""] : [])]);
    table(`breakdown-${by}`, titles[by], [by, "requests", "tokens", "cost", "savings", "share", ...(budgets ? ["budget"] : [])], rows);
  }
}

function renderLatency(data) {
  const names = { ttft_ms: "TTFT", itl_ms: "inter-token", latency_ms: "end-to-end", queue_ms: "queue" };
  const tiers = Object.keys(data.tiers).filter((t) => t !== "all" && t !== "none");
  chart("chart-latency", { type: "bar", data: { labels: tiers.map(tierName), datasets: ["p50", "p95", "p99"].map((q, i) => ({
      label: `TTFT ${q} (ms)`, data: tiers.map((t) => (data.tiers[t].ttft_ms ? data.tiers[t].ttft_ms[q] : null)),
      backgroundColor: ["#a0cbe8", "#4e79a7", "#1f3b5c"][i] })) },
    options: { plugins: { title: { display: true, text: `TTFT per tier (${data.method})` } } } });
  const rows = [];
  for (const [tier, metrics] of Object.entries(data.tiers)) {
    for (const metric of data.metrics) {
      const m = metrics[metric];
      if (!m) { rows.push([tierName(tier), names[metric], "0", "–", "–", "–", "n/a (not reported)"]); continue; }
      const ratio = m.p99_p50_ratio === null ? "–" : m.p99_p50_ratio.toFixed(1) + "×";
      rows.push([tierName(tier), names[metric], num(m.count), ms(m.p50), ms(m.p95), ms(m.p99),
        m.contention ? el("span", { class: "bad" }, ratio + " contention") : ratio]);
    }
  }
  table("latency-table", `p99/p50 above ${data.contention_ratio}× means contention (flagged with n ≥ ` +
    `${data.contention_min_samples} and p50 ≥ ${data.contention_min_p50_ms} ms)`,
    ["tier", "metric", "n", "p50", "p95", "p99", "p99/p50"], rows);
}

function renderQuality(data) {
  document.getElementById("quality-judge").textContent =
    `Judge cost (replays on the reference tier, not in the user cost above): ${usd(data.judge_cost_usd)} for ` +
    `${num(data.total.verdicts)} verdicts; pass rate ${pct(data.total.pass_rate)}` +
    (data.total.ci_low === null ? "" : ` (95% CI ${pct(data.total.ci_low)}–${pct(data.total.ci_high)})`);
  const datasets = [];
  for (const [tier, v] of Object.entries(data.tiers)) {
    const c = color(tier);
    const pick = (k) => v.series.map((p) => (p[k] === null ? null : 100 * p[k]));
    datasets.push({ label: `${tierName(tier)} pass rate %`, data: pick("pass_rate"), borderColor: c, backgroundColor: c, spanGaps: true });
    datasets.push({ label: `${tier} 95% CI low`, data: pick("ci_low"), borderColor: c, borderDash: [3, 3], pointRadius: 0, borderWidth: 1, spanGaps: true });
    datasets.push({ label: `${tier} 95% CI high`, data: pick("ci_high"), borderColor: c, borderDash: [3, 3], pointRadius: 0, borderWidth: 1, spanGaps: true });
  }
  chart("chart-quality", { type: "line", data: { labels: shortLabels(data.buckets), datasets },
    options: { plugins: { title: { display: true, text: "Pass rate per tier (Wilson 95% interval dashed)" } },
      scales: { y: { min: 0, max: 100 } } } });
  table("quality-table", "Per tier", ["tier", "verdicts", "passed", "pass rate", "95% CI", "judge cost"],
    Object.entries(data.tiers).map(([tier, v]) => [tier, num(v.verdicts), num(v.passed), pct(v.pass_rate),
      v.ci_low === null ? "–" : `${pct(v.ci_low)}–${pct(v.ci_high)}`, usd(v.judge_cost_usd)]));
  table("failing-samples", `Latest ${data.failing_samples.length} failing samples`,
    ["when", "tier", "similarity", "prompt", "tier's answer", "reference answer"],
    data.failing_samples.map((s) => [when(s.created_at), s.tier,
      s.similarity.toFixed(3) + " " + s.method, s.prompt, s.answer, s.reference_answer]));
}

// Dashed vertical lines at the thresholds, each labelled; a label that would overlap one already drawn goes one
// row lower. The label boxes are kept on the chart (chart.$thresholdLabelBoxes) for the browser test.
const thresholdLines = {
  id: "thresholdLines",
  afterDatasetsDraw(c, args, options) {
    const x = c.scales.x;
    c.$thresholdLabelBoxes = [];
    if (!x || !options.lines) return;
    const { ctx, chartArea } = c;
    const rowHeight = 14;
    ctx.save();
    ctx.textBaseline = "top";
    for (const line of [...options.lines].sort((a, b) => a.value - b.value)) {
      const px = x.left + (x.right - x.left) * line.value;
      ctx.strokeStyle = line.color;
      ctx.setLineDash([5, 4]);
      ctx.beginPath(); ctx.moveTo(px, chartArea.top); ctx.lineTo(px, chartArea.bottom); ctx.stroke();
      const width = ctx.measureText(line.label).width;
      const left = Math.max(chartArea.left, Math.min(px + 3, chartArea.right - width));
      let top = chartArea.top + 2;
      const overlaps = (b) => left < b.left + b.width && b.left < left + width && top < b.top + b.height && b.top < top + rowHeight;
      while (c.$thresholdLabelBoxes.some(overlaps)) top += rowHeight;
      ctx.fillStyle = line.color;
      ctx.fillText(line.label, left, top);
      c.$thresholdLabelBoxes.push({ left, top, width, height: rowHeight, label: line.label });
    }
    ctx.restore();
  },
};

function renderRouter(data) {
  const th = data.thresholds;
  const lines = Object.entries(th.tiers).filter(([, v]) => v !== null)
    .map(([tier, v]) => ({ value: v, color: color(tier), label: `${tier} ≥ ${v.toFixed(2)}` }));
  document.getElementById("router-thresholds").textContent = `Quality knob ${th.quality.toFixed(2)}; thresholds: ` +
    (lines.map((l) => l.label).join(", ") || "none") + `. Escalations ${data.reroutes.total_escalations}, ` +
    `fallbacks ${data.reroutes.total_fallbacks}.`;
  const edges = data.histogram.edges;
  const labels = edges.slice(0, -1).map((e, i) => `${e.toFixed(2)}–${edges[i + 1].toFixed(2)}`);
  chart("chart-router-scores", { type: "bar", plugins: [thresholdLines],
    data: { labels, datasets: Object.entries(data.histogram.tiers).map(([tier, counts]) => ({
      label: tierName(tier), data: counts, backgroundColor: color(tier) })) },
    options: { plugins: { title: { display: true, text: "Routing score (P(tier answers well)) with the thresholds" },
      thresholdLines: { lines } }, scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } } });
  chart("chart-router-reroutes", { type: "bar", data: { labels: shortLabels(data.reroutes.buckets), datasets: [
      { label: "escalations", data: data.reroutes.escalations, backgroundColor: "#f28e2b" },
      { label: "fallbacks", data: data.reroutes.fallbacks, backgroundColor: "#e15759" }] },
    options: { plugins: { title: { display: true, text: "Escalations and fallbacks" } },
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } } });
  table("router-changes", "Threshold changes in the range", ["when", "by", "quality", "offsets", "note"],
    data.threshold_changes.map((c) => [when(c.changed_at), c.updated_by,
      c.quality === null ? "–" : c.quality.toFixed(2),
      Object.entries(c.offsets).map(([t, o]) => `${t} +${Number(o).toFixed(2)}`).join(", "), c.note || ""]));
  table("router-versions", "Classifier versions (markers: created / promoted)",
    ["version", "status", "created", "promoted", "metrics", "in range"],
    data.classifier_versions.map((v) => [v.version, v.status, v.created_at.slice(0, 10),
      v.promoted_at ? v.promoted_at.slice(0, 10) : "–",
      Object.entries(v.metrics).filter(([, x]) => typeof x === "number").slice(0, 4)
        .map(([k, x]) => `${k} ${x.toFixed(3)}`).join(", "), v.in_range ? "yes" : ""]));
}

function renderEngine(data) {
  table("engine-table", "Refreshed every 5 s", ["tier", "model", "KV cache", "running", "waiting",
    "prefix-cache hits", "preemptions", "speculative acceptance"],
  Object.entries(data.tiers).map(([tier, s]) => (s.available
    ? [tier, s.model, pct(s.kv_cache_usage), num(s.num_running), num(s.num_waiting), pct(s.prefix_cache_hit_rate),
      num(s.num_preemptions), s.speculative ? `${pct(s.speculative.acceptance_rate)} (${s.speculative.method}, k=${s.speculative.current_k})` : "off"]
    : [tier, s.model, "unavailable", "", "", "", "", s.reason])));
}

// ---- start ------------------------------------------------------------------------------------------------------

function start() {
  buildRangeControl(document.getElementById("range-all"), pageRange, (r) => {
    pageRange = r;
    for (const key of Object.keys(panelRanges)) delete panelRanges[key];
    for (const section of document.querySelectorAll("section.panel")) {
      const control = section.querySelector(".range-control");
      if (control) buildRangeControl(control, r, (pr) => { panelRanges[section.id] = pr; loadPanel(section); });
    }
    loadAll();
  }, "All panels");
  for (const section of document.querySelectorAll("section.panel")) {
    const control = section.querySelector(".range-control");
    if (control) buildRangeControl(control, pageRange, (r) => { panelRanges[section.id] = r; loadPanel(section); });
  }
  loadAll().then(() => { document.body.dataset.ready = "true"; });
  setInterval(() => loadPanel(document.getElementById("panel-engine")), 5000);
}

document.addEventListener("DOMContentLoaded", start);
