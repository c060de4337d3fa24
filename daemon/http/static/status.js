// The status page: polls the HTTP API (/api/v1/...) 2 s after each refresh and renders the queue, the nodes
// and one job's attempts and output.  Plain JavaScript, no build step.
// Auth: token mode sends the token kept in sessionStorage (typed in the field, or given once as
// #token=... in the address, which is never sent to the server); without a token configured the
// controller accepts loopback alone.  Munge mode: a browser cannot make MUNGE credentials, so the
// API answers 401 and the page says so (docs/http-api.md).
"use strict";
const API = "api/v1";
const KEY = "reckon.token";
const OUTPUT_TAIL = 65536;  // bytes of a job's output shown (its end)
const RECENT = 3600;  // seconds: the queue shows live jobs and those that ended this recently
const JOB_OPTIONAL = [2, 5, 6, 8], NODE_OPTIONAL = [4, 5];  // columns a phone leaves out (class opt)
// A row's keys only (a whole job object is ~0.5 KB: 10,000 live jobs would be megabytes a poll),
// and at most MAX_ROWS rows, the oldest first as squeue lists them.
const ROW_FIELDS = "id,name,user,state,held,agent,attempt,cpus,slots,signal,exit_code,submitted_at";
const MAX_ROWS = 500;
const PERIOD = 2000;  // ms between the end of one refresh and the start of the next
let selected = null;
let controllerNow = null;  // the controller's clock, from its last query reply (no skew with ours)

if (location.hash.startsWith("#token=")) {
  sessionStorage.setItem(KEY, decodeURIComponent(location.hash.slice(7)));
  history.replaceState(null, "", location.pathname + location.search);
}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const response = await fetch(API + path, {headers, cache: "no-store"});
  let body;
  try { body = await response.json(); } catch (e) { body = {error: response.statusText}; }
  if (!response.ok) {
    const error = new Error(body.error || ("HTTP " + response.status));
    error.status = response.status;
    throw error;
  }
  return body;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function when(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const d = new Date(seconds * 1000);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function badge(state) { return el("span", state, "state " + state); }

function fill(table, rows, empty) {
  const body = document.querySelector(table + " tbody");
  body.replaceChildren(...rows);
  document.querySelector(empty).hidden = rows.length > 0;
}

function jobRow(job) {
  const tr = el("tr");
  tr.dataset.job = job.id;
  if (job.id === selected) tr.className = "selected";
  const exit = job.signal ? "signal " + job.signal : (job.exit_code ?? "");
  const cells = [job.id, job.name, job.user ?? "", null, job.agent ?? "", job.attempt, job.cpus ?? job.slots, exit,
                 when(job.submitted_at)];
  cells.forEach((value, i) => {
    const td = el("td", i === 3 ? null : value, JOB_OPTIONAL.includes(i) ? "opt" : "");
    if (i === 3) td.append(badge(job.held ? "HELD" : job.state));
    tr.append(td);
  });
  tr.addEventListener("click", () => { selected = job.id; refresh(); });
  return tr;
}

function nodeRow(node) {
  const tr = el("tr");
  tr.dataset.node = node.name;
  const mem = node.mem === null || node.mem === undefined ? "" : bytes(node.mem_used || 0) + " / " + bytes(node.mem);
  const gpus = (node.gpus || []).length ? (node.gpus_used || []).length + " / " + node.gpus.length : "";
  [node.name, null, (node.cpus_used ?? node.used) + " / " + (node.cpus ?? node.slots), mem, gpus, when(node.since)]
    .forEach((value, i) => {
      const td = el("td", i === 1 ? null : value, NODE_OPTIONAL.includes(i) ? "opt" : "");
      if (i === 1) td.append(badge(node.state));
      tr.append(td);
    });
  return tr;
}

let shown = {key: null, job: null};  // the selected job's `show` reply, and what it was read at

async function showJob(id) {
  // The job's fields from the query index every refresh (cheap); its attempts (`show`, which
  // reads the fact log) again only when its state or attempt changed.
  const [brief] = (await api("/query?ids=" + encodeURIComponent(id))).jobs;
  if (brief === undefined) throw new Error("unknown job " + id);
  const key = [id, brief.state, brief.attempt, brief.held].join("|");
  if (shown.key !== key) shown = {key, job: (await api("/jobs/" + encodeURIComponent(id))).job};
  const job = {...shown.job, ...brief, attempts: shown.job.attempts, pending_reason: shown.job.pending_reason,
               pending_code: shown.job.pending_code};
  document.getElementById("job").hidden = false;
  document.getElementById("job-id").textContent = job.id;
  const fields = [["name", job.name], ["state", job.state], ["user", job.user], ["command", (job.command || []).join(" ")],
                  ["node", job.agent], ["why pending", job.pending_code ? job.pending_code + ": " + job.pending_reason : job.pending_reason], ["reason", job.reason],
                  ["submitted", when(job.submitted_at)], ["started", when(job.started_at)],
                  ["finished", when(job.finished_at)], ["stdout", job.stdout], ["stderr", job.stderr]];
  const dl = document.getElementById("job-fields");
  dl.replaceChildren(...fields.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  document.querySelector("#attempts tbody").replaceChildren(...(job.attempts || []).map((a) => {
    const tr = el("tr");
    const usage = a.usage || {};
    const cpu = usage.cpu_user === undefined ? "" : (usage.cpu_user + usage.cpu_system).toFixed(2);
    [a.attempt, a.agent ?? "", a.ended ?? "", cpu, usage.max_rss ? bytes(usage.max_rss) : ""]
      .forEach((v) => tr.append(el("td", v)));
    return tr;
  }));
  const stream = document.getElementById("stream").value;
  const out = document.getElementById("output");
  try {
    const head = await api(`/jobs/${encodeURIComponent(id)}/logs?stream=${stream}&limit=1`);
    if (head.waiting) { out.textContent = "(" + head.waiting + ")"; return; }
    const offset = Math.max(0, head.size - OUTPUT_TAIL);
    const chunk = await api(`/jobs/${encodeURIComponent(id)}/logs?stream=${stream}&offset=${offset}&limit=${OUTPUT_TAIL}`);
    out.textContent = (offset > 0 ? "...\n" : "") + (chunk.data || (chunk.waiting ? "(" + chunk.waiting + ")" : "(empty)"));
  } catch (e) {
    out.textContent = "(" + e.message + ")";
  }
}

async function refresh() {
  try {
    // The query op answers from the controller's index, off its core loop (cheap to poll).
    const since = (controllerNow ?? Date.now() / 1000) - RECENT;
    const query = `/query?since=${since.toFixed(3)}&limit=${MAX_ROWS + 1}&fields=${ROW_FIELDS}`;
    const [{jobs, now}, {nodes}, {status}] = await Promise.all([api(query), api("/nodes"), api("/status")]);
    controllerNow = now;
    const more = jobs.length > MAX_ROWS;
    if (more) jobs.length = MAX_ROWS;
    jobs.sort((a, b) => Number(b.id.split("_")[0]) - Number(a.id.split("_")[0]) || (a.id < b.id ? -1 : 1));
    fill("#jobs", jobs.map(jobRow), "#jobs-empty");
    fill("#nodes", nodes.map(nodeRow), "#nodes-empty");
    const counts = Object.entries(status.jobs || {}).map(([k, v]) => `${v} ${k.toLowerCase()}`).join(", ");
    document.getElementById("summary").textContent =
      `${counts || "no jobs"}; ${nodes.length} node(s)` +
      (more ? `; the oldest ${MAX_ROWS} live or recent jobs shown (reckon jobs lists them all)` : "");
    if (selected !== null) await showJob(selected);
    document.getElementById("error").hidden = true;
  } catch (e) {
    const box = document.getElementById("error");
    box.textContent = e.status === 401
      ? "not authorized: " + e.message + " (token mode: enter the token above; munge mode: a browser cannot " +
        "make MUNGE credentials, use the API with curl)"
      : "cannot reach the controller: " + e.message;
    box.hidden = false;
  }
  document.body.dataset.refreshed = String(Date.now());
}

document.getElementById("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = document.getElementById("token").value.trim();
  if (value) sessionStorage.setItem(KEY, value); else sessionStorage.removeItem(KEY);
  document.getElementById("token").value = "";
  refresh();
});
document.getElementById("job-close").addEventListener("click", () => {
  selected = null;
  document.getElementById("job").hidden = true;
  refresh();
});
document.getElementById("stream").addEventListener("change", () => refresh());
if (location.search.startsWith("?job=")) selected = decodeURIComponent(location.search.slice(5));
// The next refresh starts PERIOD after this one ended: a slow controller or network is never
// asked twice at once.
async function poll() {
  await refresh();
  setTimeout(poll, PERIOD);
}
poll();
