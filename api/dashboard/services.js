// Ultraplane dashboard: each inference service over time. For every InferenceJob that holds
// chips, its history (`.../inferencejobs/{name}/history`) drawn as three small SVG charts:
// offered load, replicas (desired dashed, ready solid) and p99 TTFT against its objective.
// Loaded after app.js and sharing its helpers ($, el, api, jobKey, HttpError); plain SVG,
// nothing fetched from outside. See docs/dashboard.md.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
// At most this many services are charted (one history request each per refresh).
const SERVICE_LIMIT = 12;
const CHART = { width: 300, height: 90, left: 4, right: 4, top: 18, bottom: 4 };
const serviceCards = new Map();  // job key -> { node, facts, charts }

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

function number(value, digits) {
  return value == null ? "-" : Number(value).toLocaleString("en-US", { maximumFractionDigits: digits ?? 0 });
}

// One chart: `series` are { name, values (one per sample, null: not reported), dashed };
// `level` is an optional horizontal line (the objective). The y scale starts at 0 and ends at
// the largest value drawn; the x scale spans the samples' times. Lines are steps: a figure
// holds until the next sample says otherwise.
function drawChart(chart, times, series, level, empty) {
  const { width, height, left, right, top, bottom } = CHART;
  const drawn = series.flatMap((s) => s.values.filter((v) => v != null));
  chart.svg.replaceChildren();
  chart.svg.append(svgEl("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
  if (!drawn.length) {  // said, never drawn as zero; the objective still shows where it is
    const text = svgEl("text", { class: "empty", x: width / 2, y: height / 2 + 4, "text-anchor": "middle" });
    text.textContent = empty;
    chart.svg.append(text);
    chart.svg.setAttribute("aria-label", `${chart.title}: ${empty}`);
    if (level == null) return;
  }
  const top_ = Math.max(...drawn, level ?? 0, 1e-9) * 1.1;
  const t0 = times[0];
  const span = Math.max(times[times.length - 1] - t0, 1e-9);
  const x = (t) => left + ((t - t0) / span) * (width - left - right);
  const y = (v) => height - bottom - (v / top_) * (height - top - bottom);
  if (level != null) {
    chart.svg.append(svgEl("line", { class: "objective", "data-series": "objective", "data-last": level,
      x1: left, y1: y(level), x2: width - right, y2: y(level) }));
  }
  const said = [];
  for (const s of drawn.length ? series : []) {
    const points = [];
    let last = null;
    s.values.forEach((v, i) => {
      if (v == null) return;
      if (last != null) points.push(`${x(times[i]).toFixed(1)},${y(last).toFixed(1)}`);
      points.push(`${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`);
      last = v;
    });
    if (times.length === 1 && last != null) points.push(`${(width - right).toFixed(1)},${y(last).toFixed(1)}`);
    chart.svg.append(svgEl("polyline", { class: `line ${s.name}${s.dashed ? " dashed" : ""}`,
      "data-series": s.name, "data-last": last ?? "", points: points.join(" ") }));
    said.push(`${s.name} ${number(last, 1)}`);
  }
  const scale = svgEl("text", { class: "scale", x: left + 2, y: top - 3 });
  scale.textContent = `max ${number(top_ / 1.1, 1)}`;
  chart.svg.append(scale);
  if (level != null) said.push(`objective ${number(level, 1)}`);
  if (!drawn.length) said.unshift(empty);
  chart.svg.setAttribute("aria-label", `${chart.title}: ${said.join(", ")}`);
}

function serviceCard(key) {
  let entry = serviceCards.get(key);
  if (entry) return entry;
  const charts = {};
  const figures = el("div", { class: "charts" });
  for (const [id, title] of [["load", "Offered load (req/s)"], ["replicas", "Replicas (desired - - , ready \u2014)"],
    ["ttft", "p99 TTFT (ms) against its objective"]]) {
    const svg = svgEl("svg", { viewBox: `0 0 ${CHART.width} ${CHART.height}`, role: "img", "data-chart": id });
    charts[id] = { svg, title };
    figures.append(el("figure", {}, el("figcaption", { text: title }), svg));
  }
  const facts = el("p", { class: "facts" });
  const node = el("article", { class: "service", "data-service": key }, el("h3", { text: key }), facts, figures);
  entry = { node, facts, charts };
  serviceCards.set(key, entry);
  $("service-charts").append(node);
  return entry;
}

function drawService(key, history) {
  const entry = serviceCard(key);
  const samples = history.samples || [];
  if (!samples.length) return;
  const times = samples.map((s) => s.t);
  const pick = (name) => samples.map((s) => s[name]);
  const objective = history.ttftObjectiveMs;
  drawChart(entry.charts.load, times, [{ name: "load", values: pick("requestsPerSecond") }], null, "no load reported");
  // desired last: dashed over the ready line, both visible when they agree
  drawChart(entry.charts.replicas, times, [{ name: "ready", values: pick("readyReplicas") },
    { name: "desired", values: pick("desiredReplicas"), dashed: true }], null, "no replicas");
  drawChart(entry.charts.ttft, times, [{ name: "ttft", values: pick("ttftP99Ms") }], objective,
    objective == null ? "no TTFT reported, no objective" : "no TTFT reported");
  const now = samples[samples.length - 1];
  const bits = [`${now.readyReplicas}/${now.desiredReplicas} replicas ready`,
    now.requestsPerSecond == null ? "no load reported" : `${number(now.requestsPerSecond, 1)} req/s`];
  if (now.ttftP99Ms != null) bits.push(`p99 TTFT ${number(now.ttftP99Ms)} ms`);
  if (objective != null) bits.push(`objective ${number(objective)} ms`);
  entry.facts.textContent = bits.join(" \u00b7 ");
}

// Called by app.js's refresh with every job this caller may read.
async function drawServices(jobs) {
  const serving = jobs.filter((job) => job.kind === "InferenceJob"
    && ["Admitted", "Running"].includes((job.status || {}).phase)).slice(0, SERVICE_LIMIT);
  $("services").hidden = serving.length === 0;
  const present = new Set();
  for (const job of serving) {
    const key = jobKey(job);
    const { namespace, name } = job.metadata;
    try {
      const history = await api(`v1/namespaces/${encodeURIComponent(namespace)}/inferencejobs/${encodeURIComponent(name)}/history`);
      present.add(key);
      drawService(key, history);
    } catch (error) {  // deleted since the list, or a server without histories: no chart
      if (!(error instanceof HttpError) || ![403, 404].includes(error.status)) throw error;
    }
  }
  for (const [key, entry] of serviceCards) {
    if (!present.has(key)) { entry.node.remove(); serviceCards.delete(key); }
  }
}

function clearServices() {
  serviceCards.forEach((entry) => entry.node.remove());
  serviceCards.clear();
  $("services").hidden = true;
}
