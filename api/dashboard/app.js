// Ultraplane dashboard: polls the API's own /v1 endpoints with the visitor's token and draws
// the fleet chip by chip and the queue. Plain DOM, no framework, nothing fetched from outside;
// every text from the API goes in through textContent, never as HTML. See docs/dashboard.md.
"use strict";

const TOKEN_KEY = "ultraplane.token";
const NAMESPACES_KEY = "ultraplane.namespaces";
const KINDS = [["TrainingJob", "trainingjobs", "tj"], ["InferenceJob", "inferencejobs", "ij"]];

const state = { config: null, timer: null, cards: new Map(), colours: new Map(), failures: 0 };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(new URL(path, document.baseURI), { headers, cache: "no-store" });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).message || message; } catch (_) { /* not JSON */ }
    throw new HttpError(response.status, message);
  }
  return response.json();
}

// A colour per job, kept while the page is open: hues a golden angle apart in the order
// jobs are first seen (neighbours differ most), three lightness bands, and never the red of
// a failed chip.
function colour(key) {
  if (!state.colours.has(key)) {
    const n = state.colours.size;
    let hue = (210 + n * 137.508) % 360;
    if (hue > 335 || hue < 20) hue = (hue + 45) % 360;
    state.colours.set(key, `hsl(${Math.round(hue)}, 62%, ${40 + (n % 3) * 10}%)`);
  }
  return state.colours.get(key);
}

function watts(w) {
  if (Math.abs(w) >= 1e6) return `${(w / 1e6).toFixed(2)} MW`;
  if (Math.abs(w) >= 1e3) return `${(w / 1e3).toFixed(1)} kW`;
  return `${Math.round(w)} W`;
}

function chipId(us, server, chip) {
  return `${us}/s${String(server).padStart(2, "0")}/c${String(chip).padStart(2, "0")}`;
}

// ---- jobs -----------------------------------------------------------------------------------

async function listAll(path) {
  const items = [];
  let next = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(`${path}${sep}limit=500${next ? `&continue=${encodeURIComponent(next)}` : ""}`);
    items.push(...page.items);
    next = page.metadata && page.metadata.continue;
  } while (next);
  return items;
}

function typedNamespaces() {
  return (sessionStorage.getItem(NAMESPACES_KEY) || "").split(",").map((s) => s.trim()).filter(Boolean);
}

// Jobs this caller may list: across namespaces when allowed, else namespace by namespace (the
// static token's own list, the ones typed at sign-in, and those its jobs on the fleet show).
async function readableJobs(fleet) {
  const granted = state.config.auth.namespaces;
  const jobs = [];
  let namespaces = granted;
  if (namespaces === null) {
    try {
      for (const [, plural] of KINDS) jobs.push(...await listAll(`v1/${plural}`));
      return { jobs, scope: null };
    } catch (error) {
      if (!(error instanceof HttpError) || error.status !== 403) throw error;
      namespaces = [];
    }
  }
  const seen = new Set([...namespaces, ...typedNamespaces()]);
  for (const us of fleet) {
    for (const key of us.jobs) {
      const parts = key.split("#")[0].split("/");
      if (parts.length === 3) seen.add(parts[1]);
    }
  }
  const listed = [];
  for (const ns of [...seen].sort()) {
    try {
      for (const [, plural] of KINDS) jobs.push(...await listAll(`v1/namespaces/${encodeURIComponent(ns)}/${plural}`));
      listed.push(ns);
    } catch (error) {
      if (!(error instanceof HttpError) || (error.status !== 403 && error.status !== 422)) throw error;
    }
  }
  return { jobs, scope: listed };
}

function jobChips(job) {
  const spec = job.spec || {};
  return spec.chips != null ? spec.chips : (spec.chipsPerReplica || 0) * (spec.replicas || 1);
}

function jobKey(job) {
  const prefix = job.kind === "InferenceJob" ? "ij" : "tj";
  return `${prefix}/${job.metadata.namespace}/${job.metadata.name}`;
}

// The first waiting jobs' explanations (`.../explanation`: blockers and predicted start),
// asked again at most every EXPLAIN_SECONDS; a server without the endpoint is not asked again.
const EXPLAIN_FIRST = 10;
const EXPLAIN_SECONDS = 10;
const explained = new Map();
let explainable = true;

async function explain(waiting) {
  const now = Date.now();
  for (const job of waiting.slice(0, EXPLAIN_FIRST)) {
    if (!explainable) return;
    const key = jobKey(job);
    const known = explained.get(key);
    if (known && now - known.at < EXPLAIN_SECONDS * 1000) continue;
    const plural = job.kind === "InferenceJob" ? "inferencejobs" : "trainingjobs";
    try {
      const answer = await api(`v1/namespaces/${encodeURIComponent(job.metadata.namespace)}/${plural}/${encodeURIComponent(job.metadata.name)}/explanation`);
      explained.set(key, { at: now, answer });
    } catch (error) {
      if (error instanceof HttpError && error.status === 404 && /^Not Found$/i.test(error.message)) explainable = false;
      else explained.set(key, { at: now, answer: null });
    }
  }
}

function stamp(text) {
  return String(text).replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, " UTC").replace(/Z$/, " UTC");
}

// The predicted start, where the scheduler gives one: the job's explanation, a status
// field, else its message; the queue head with nothing predicted is "next".
function predictedStart(job) {
  const status = job.status || {};
  const known = explained.get(jobKey(job));
  if (known && known.answer && known.answer.predictedStart) return stamp(known.answer.predictedStart);
  const field = status.predictedStartTime || status.predictedStart;
  if (field) return stamp(field);
  const match = /predicted to start in ([^);]+)/.exec(status.message || "");
  if (match) return `in ${match[1]}`;
  return status.queuePosition === 0 ? "next" : "-";
}

// ---- fleet ----------------------------------------------------------------------------------

function shape(us) {
  const profile = state.config.profiles[us.profile];
  if (profile && profile.servers * profile.chipsPerServer === us.chips) return profile;
  return { servers: Math.ceil(us.chips / 4), chipsPerServer: 4 };
}

// Past this many UltraServers each is drawn as a bar (used, failed) instead of chip by chip:
// a thousand grids of 144 chips would make every update slow.
const GRID_LIMIT = 128;

function card(us, compact) {
  let entry = state.cards.get(us.name);
  const { servers, chipsPerServer } = shape(us);
  const size = compact ? 0 : servers * chipsPerServer;
  if (entry && entry.compact === compact && entry.chips.length === size) return entry;
  const chips = [];
  let grid;
  let bar = null;
  if (compact) {
    bar = { used: el("span", { class: "used" }), failed: el("span", { class: "failed" }) };
    grid = el("div", { class: "bar", role: "img", "aria-label": `chips of ${us.name}` }, bar.used, bar.failed);
  } else {
    grid = el("div", { class: "chips", role: "img", "aria-label": `chips of ${us.name}` });
    grid.style.gridTemplateColumns = `repeat(${Math.max(chipsPerServer, 12 - (12 % chipsPerServer))}, 1fr)`;
    for (let s = 0; s < servers; s++) {
      for (let c = 0; c < chipsPerServer; c++) {
        const chip = el("i", { class: "chip", "data-chip": chipId(us.name, s, c) });
        chips.push(chip);
        grid.append(chip);
      }
    }
  }
  const name = el("span", { class: "name", text: us.name });
  const power = el("span", { class: "power", "data-role": "power" });
  const facts = el("div", { class: "facts" });
  const node = el("article", { class: "us", "data-ultraserver": us.name },
    el("header", {}, name, power), grid, facts);
  entry = { node, chips, power, facts, bar, compact };
  if (state.cards.has(us.name)) state.cards.get(us.name).node.replaceWith(node);
  state.cards.set(us.name, entry);
  return entry;
}

function paint(chip, job, title) {
  const kind = job === null ? "free" : job;
  if (chip.dataset.job === kind) return;
  chip.dataset.job = kind;
  chip.className = "chip";
  chip.style.background = "";
  if (job === "failed" || job === "other") chip.classList.add(job);
  else if (job !== null) chip.style.background = colour(job);
  chip.title = title;
}

function drawFleet(fleet, chipOwner) {
  const container = $("fleet");
  const present = new Set();
  const compact = fleet.length > GRID_LIMIT;
  container.classList.toggle("compact", compact);
  for (const us of fleet) {
    present.add(us.name);
    const entry = card(us, compact);
    if (!entry.node.isConnected) container.append(entry.node);
    entry.node.classList.toggle("unschedulable", !us.schedulable);
    entry.power.textContent = watts(us.powerWatts || 0);
    // failedChips are the UltraServer's local refs (s03/c01), as in its spec.
    const failed = new Set(us.failedChips.map((ref) => ref.startsWith(`${us.name}/`) ? ref : `${us.name}/${ref}`));
    let known = 0;
    const owners = entry.chips.map((chip) => {
      const owner = chipOwner.get(chip.dataset.chip) || null;
      if (owner && !failed.has(chip.dataset.chip)) known += 1;
      return owner;
    });
    // Chips held by jobs this token may not read: counted by the API, placed where free.
    let others = Math.max(0, us.allocatedChips - known);
    entry.chips.forEach((chip, i) => {
      const id = chip.dataset.chip;
      if (failed.has(id)) paint(chip, "failed", `${id}: failed`);
      else if (owners[i]) paint(chip, owners[i], `${id}: ${owners[i]}`);
      else if (others > 0) { others -= 1; paint(chip, "other", `${id}: another tenant`); }
      else paint(chip, null, `${id}: free`);
    });
    if (entry.bar) {
      entry.bar.used.style.width = `${(100 * us.allocatedChips) / Math.max(1, us.chips)}%`;
      entry.bar.failed.style.width = `${(100 * us.failedChips.length) / Math.max(1, us.chips)}%`;
    }
    const util = Math.round((us.utilization || 0) * 100);
    const bits = [`${us.allocatedChips}/${us.chips} chips`, `${util}% busy`];
    if (us.failedChips.length) bits.push(`${us.failedChips.length} failed`);
    if (!us.schedulable) bits.push("cordoned");
    if (us.reservedFor) bits.push(`reserved for ${us.reservedFor}`);
    entry.facts.textContent = bits.join(" \u00b7 ");
  }
  for (const [name, entry] of state.cards) {
    if (!present.has(name)) { entry.node.remove(); state.cards.delete(name); }
  }
}

function drawLegend(running, fleet) {
  const legend = $("legend");
  legend.replaceChildren();
  for (const job of running) {
    const key = jobKey(job);
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = colour(key);
    const status = job.status || {};
    const progress = status.progressPercent != null ? ` ${Math.round(status.progressPercent)}%` : "";
    legend.append(el("li", { "data-job": key, title: status.message || status.phase || "" }, swatch,
      `${key} (${jobChips(job)} chips, ${status.phase}${progress})`));
  }
  const mine = new Set(running.map(jobKey));
  const other = fleet.some((us) => us.jobs.some((k) => !mine.has(k.split("#")[0])));
  if (other) legend.append(el("li", { "data-job": "other" }, el("span", { class: "swatch other" }), "another tenant"));
  if (fleet.some((us) => us.failedChips.length)) legend.append(el("li", {}, el("span", { class: "swatch failed" }), "failed chip"));
  legend.append(el("li", {}, el("span", { class: "swatch free" }), "free"));
}

function drawQueue(waiting) {
  const body = $("queue").tBodies[0];
  body.replaceChildren();
  for (const job of waiting) {
    const status = job.status || {};
    const position = status.queuePosition != null ? String(status.queuePosition) : "-";
    body.append(el("tr", { "data-job": jobKey(job) },
      el("td", { class: "num", text: position }),
      el("td", { text: jobKey(job) }),
      el("td", { class: "num", text: String(jobChips(job)) }),
      el("td", { class: "num", text: String(job.spec.priority ?? 0) }),
      el("td", { text: status.reason || status.phase || "Pending" }),
      el("td", { text: predictedStart(job) }),
      el("td", { text: status.message || "" })));
  }
  $("queue-empty").hidden = waiting.length > 0;
}

// Each team's queue: a bar of its nominal quota, filled by what it uses, with what it
// borrows beyond it in another colour (the bar's scale is the larger of the two).
function drawTeams(queues) {
  $("teams").hidden = queues.length === 0;
  const body = $("queues").tBodies[0];
  body.replaceChildren();
  for (const queue of queues) {
    const spec = queue.spec || {};
    const status = queue.status || {};
    const nominal = status.nominalChips ?? 0;
    const used = status.usedChips ?? 0;
    const borrowed = status.borrowedChips ?? 0;
    const fair = status.fairShareChips;  // a queue of a cohort: its weighted share now
    const scale = Math.max(nominal, used, fair ?? 0, 1);
    const own = el("span", { class: "used" });
    const lent = el("span", { class: "borrowed" });
    own.style.width = `${(100 * (used - borrowed)) / scale}%`;  // CSSOM: allowed by the CSP
    lent.style.width = `${(100 * borrowed) / scale}%`;
    const bar = el("div", { class: "bar", role: "img",
      "aria-label": `${used} of ${nominal} nominal chips in use, ${borrowed} borrowed`
        + (fair == null ? "" : `, fair share ${fair}`) }, own, lent);
    if (fair != null) {
      const mark = el("i", { class: "fair", title: `fair share: ${fair} chips` });
      mark.style.left = `${(100 * fair) / scale}%`;
      bar.append(mark);
    }
    body.append(el("tr", { "data-queue": queue.metadata.name },
      el("td", { text: queue.metadata.name }),
      el("td", { text: spec.cohort || "-" }),
      el("td", { class: "num", text: String(nominal) }),
      el("td", { class: "num", text: String(used) }),
      el("td", { class: "num", text: String(borrowed) }),
      el("td", { class: "num", text: String(status.pendingJobs ?? 0) }),
      el("td", { class: "num", text: fair == null ? "-" : String(fair) }),
      el("td", {}, bar)));
  }
}

// Each power budget: its limit, predicted and measured draw, headroom and capped jobs, and a
// bar of the predicted draw against the limit (red once over it).
function drawBudgets(budgets) {
  $("budgets").hidden = budgets.length === 0;
  const body = $("power").tBodies[0];
  body.replaceChildren();
  for (const budget of budgets) {
    const limit = budget.spec.watts;
    const status = budget.status || {};
    const predicted = status.predictedWatts ?? 0;
    const fill = el("span", { class: "used" });
    fill.style.width = `${Math.min(100, (100 * predicted) / Math.max(limit, 1))}%`;
    const bar = el("div", { class: predicted > limit ? "bar over" : "bar", role: "img",
      "aria-label": `predicted ${watts(predicted)} of ${watts(limit)}` }, fill);
    body.append(el("tr", { "data-budget": budget.metadata.name },
      el("td", { text: budget.metadata.name }),
      el("td", { class: "num", text: watts(limit) }),
      el("td", { class: "num", text: watts(predicted) }),
      el("td", { class: "num", text: status.measuredWatts == null ? "-" : watts(status.measuredWatts) }),
      el("td", { class: "num", text: watts(status.headroomWatts ?? limit - predicted) }),
      el("td", { class: "num", text: String((status.capped || []).length) }),
      el("td", {}, bar)));
  }
}

function drawTotals(fleet, running, waiting) {
  const chips = fleet.reduce((n, us) => n + us.chips, 0);
  const used = fleet.reduce((n, us) => n + us.allocatedChips, 0);
  $("fleet-power").textContent = watts(fleet.reduce((w, us) => w + (us.powerWatts || 0), 0));
  $("fleet-chips").textContent = `${used} / ${chips}`;
  $("fleet-failed").textContent = String(fleet.reduce((n, us) => n + us.failedChips.length, 0));
  $("fleet-running").textContent = String(running.length);
  $("fleet-queued").textContent = String(waiting.length);
}

// ---- the loop -------------------------------------------------------------------------------

async function refresh() {
  const fleet = (await api("v1/ultraservers")).items;
  const queues = (await api("v1/tenantqueues")).items;
  const budgets = (await api("v1/powerbudgets")).items;
  const { jobs, scope } = await readableJobs(fleet);
  const chipOwner = new Map();
  const running = [];
  const waiting = [];
  for (const job of jobs) {
    const status = job.status || {};
    const allocation = status.allocation || {};
    const chips = [...(allocation.chips || []), ...(allocation.replicas || []).flatMap((r) => r.chips || [])];
    if (chips.length && !["Succeeded", "Failed"].includes(status.phase)) {
      running.push(job);
      for (const chip of chips) chipOwner.set(chip, jobKey(job));
    } else if (!status.phase || status.phase === "Pending" || status.phase === "Preempted") {
      waiting.push(job);
    }
  }
  waiting.sort((a, b) => (a.status.queuePosition ?? 1e9) - (b.status.queuePosition ?? 1e9));
  await explain(waiting);
  drawFleet(fleet, chipOwner);
  drawLegend(running, fleet);
  drawQueue(waiting);
  drawTeams(queues);
  drawBudgets(budgets);
  await drawServices(jobs);  // services.js
  drawTotals(fleet, running, waiting);
  const note = $("scope-note");
  note.hidden = scope === null;
  note.textContent = scope === null ? "" : scope.length
    ? `Jobs of namespaces ${scope.join(", ")}; other tenants' chips show as "another tenant".`
    : "This token may list no namespace's jobs; enter namespaces at sign-in to see yours.";
}

function setLive(text, cls) {
  const live = $("live");
  live.textContent = text;
  live.className = `live ${cls}`;
}

async function tick() {
  try {
    await refresh();
    state.failures = 0;
    $("error").hidden = true;
    setLive(`live \u00b7 ${new Date().toLocaleTimeString()}`, "ok");
  } catch (error) {
    if (error instanceof HttpError && error.status === 401) { signIn("The token is not accepted."); return; }
    state.failures += 1;
    $("error").textContent = `Could not update: ${error.message}`;
    $("error").hidden = false;
    setLive("stale", "stale");
  }
  const seconds = (state.config.pollSeconds || 2) * (document.hidden ? 5 : 1) * Math.min(8, 1 + state.failures);
  state.timer = setTimeout(tick, seconds * 1000);
}

// Nothing one token read stays on screen for the next.
function clearView() {
  state.cards.forEach((entry) => entry.node.remove());
  state.cards.clear();
  explained.clear();
  $("legend").replaceChildren();
  $("queue").tBodies[0].replaceChildren();
  clearServices();  // services.js
  for (const id of ["fleet-power", "fleet-chips", "fleet-failed", "fleet-running", "fleet-queued"]) $(id).textContent = "-";
  $("who").textContent = "";
  $("sign-out").hidden = true;
  $("scope-note").hidden = true;
}

function signIn(message) {
  clearTimeout(state.timer);
  clearView();
  sessionStorage.removeItem(TOKEN_KEY);
  const error = $("login-error");
  error.textContent = message || "";
  error.hidden = !message;
  $("namespaces").value = sessionStorage.getItem(NAMESPACES_KEY) || "";
  if (!$("login").open) $("login").showModal();
  setLive("signed out", "stale");
}

async function start() {
  try {
    state.config = await api("dashboard/config");
  } catch (error) {
    if (error instanceof HttpError && error.status === 401) {
      signIn(sessionStorage.getItem(TOKEN_KEY) ? "The token is not accepted." : "");
      return;
    }
    $("error").textContent = `Could not reach the API: ${error.message}`;
    $("error").hidden = false;
    setTimeout(start, 5000);
    return;
  }
  const auth = state.config.auth;
  $("who").textContent = auth.required ? `signed in as ${auth.caller}` : "";
  $("sign-out").hidden = !auth.required;
  if (params.has("poll")) state.config.pollSeconds = Number(params.get("poll")) || state.config.pollSeconds;
  tick();
}

const params = new URLSearchParams(location.search);

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    sessionStorage.setItem(NAMESPACES_KEY, $("namespaces").value.trim());
    $("token").value = "";
    $("login").close();
    start();
  });
  $("login").addEventListener("cancel", (event) => event.preventDefault());
  $("sign-out").addEventListener("click", () => signIn(""));
  start();
});
