// etj live timeline: polls the worker's JSON views and redraws an SVG. Vanilla JS, no build.
//
// Views used (all JSON, answered by the worker that owns the key, whichever worker serves this):
//   /timeline/api/consultants/      -> {consultants: [name]}
//   /moods/{c}/                     -> {partition, served_by, moods: [{event_time, mood}]}
//   /joins/{c}/                     -> {joins: [{id, event_time, recommendation, mood,
//                                        mood_event_time, revision, cause, previous_mood}]}
//   /timeline/api/clock/{c}/        -> {stream_time, retention_horizon, partition}
//   /stats/                         -> this worker's counters
//   /timeline/api/zones/            -> {zones: [{zone_id, pollution_level, event_time, cars}]}
//   /zones/{z}/cars/                -> the cars of zone z
// Any other event-time join (/timeline/?join=<name>), the same drawing from:
//   /joins/                         -> the joins this worker runs (the join picker)
//   /joins/{join}/                  -> its description, with `timeline`: which output fields
//                                      are a dot's time, its answer, what it was, its label
//   /timeline/api/joins/{join}/keys/ -> {keys: [key]}
//   /joins/{join}/{key}/            -> {versions, joins, stream_time, retention_horizon, ...}
"use strict";

const POLL_MS = 1000;
const LIST_EVERY = 3;          // refresh the pickers' lists every 3rd poll
const SVG_NS = "http://www.w3.org/2000/svg";
// Tableau 10: distinguishable, colour-blind friendlier than random hues
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const NO_MOOD = "#c8ccd2";

const state = {
  // the join drawn: "moods" keeps the mood join's own views; another event-time join is read
  // through the views every join has (?join=<name>)
  join: new URLSearchParams(location.search).get("join"),
  fields: null,           // that join's `timeline` fields (/joins/{join}/)
  consultant: null,
  windowMs: 300000,
  moods: [], joins: [], clock: null, owner: null,
  seen: new Map(),        // join id -> {revision, at}: when this page first saw a revision
  zone: null,
  tick: 0,
  moodColours: new Map(),
};

const $ = (id) => document.getElementById(id);

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;"}[c]));
}

function colourOf(mood) {
  if (mood === null || mood === undefined) return NO_MOOD;
  if (!state.moodColours.has(mood)) {
    let h = 0;
    for (const ch of mood) h = (h * 31 + ch.codePointAt(0)) >>> 0;
    // first come first served while the palette lasts, then by hash
    const used = new Set(state.moodColours.values());
    const free = PALETTE.find((c) => !used.has(c));
    state.moodColours.set(mood, free || PALETTE[h % PALETTE.length]);
  }
  return state.moodColours.get(mood);
}

function fmtTime(ms, withMs) {
  if (ms === null || ms === undefined) return "–";
  const iso = new Date(ms).toISOString();
  return withMs ? iso.slice(11, 23) : iso.slice(11, 19);
}

function fmtNum(n) {
  return Number(n || 0).toLocaleString("en-US");
}

// the views' bearer token, when the workers require one (docs/operating/security.md): open
// the page as /timeline/#token=<token>; it is kept for this tab only and dropped from the URL
const TOKEN = (() => {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) {
    sessionStorage.setItem("etj-token", given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("etj-token");
})();

async function getJSON(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 5000);
  const headers = TOKEN ? {Authorization: "Bearer " + TOKEN} : {};
  try {
    const resp = await fetch(path, {cache: "no-store", signal: ctl.signal, headers});
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    return {status: resp.status, body};
  } catch (e) {
    return {status: 0, body: {error: String(e)}};
  } finally {
    clearTimeout(timer);
  }
}

function sum(obj) {
  return Object.values(obj || {}).reduce((a, b) => a + b, 0);
}

// ---- header: this worker's counters ---------------------------------------------------------

async function refreshStats() {
  const {status, body} = await getJSON("/stats/");
  if (status !== 200 || !body) return;
  const items = [
    ["records in", sum(body.records_in)], ["joins", body.joins],
    ["corrections", body.corrections], ["late", sum(body.late)],
    ["dead letters", sum(body.dead_letters)],
  ];
  $("stats").innerHTML = items.map(([k, v]) => `<span>${esc(k)} <b>${fmtNum(v)}</b></span>`)
    .join("") + `<span title="counters of the worker serving this page">${
      body.ready ? "ready" : "recovering"} · ${esc(body.served_by)}</span>`;
}

// ---- consultant picker ----------------------------------------------------------------------

function generic() {
  return state.join !== null && state.join !== "moods";
}

// the join picker: every event-time join this worker runs; the default is the mood join when it
// runs, else the first one
async function refreshJoins() {
  const {status, body} = await getJSON("/joins/");
  if (status !== 200 || !body) return;
  const names = body.joins.filter((j) => j.kind === "event-time").map((j) => j.name);
  if (state.join === null) state.join = names.includes("moods") ? "moods" : (names[0] || "moods");
  const sel = $("join");
  sel.innerHTML = names.map((n) => `<option value="${esc(n)}">${esc(n)}</option>`).join("");
  sel.value = state.join;
  $("key-label").firstChild.textContent = generic() ? "Key " : "Consultant ";
  if (generic()) {
    const d = await getJSON(`/joins/${encodeURIComponent(state.join)}/`);
    if (d.status === 200 && d.body) state.fields = d.body.timeline;
  }
}

async function refreshConsultants() {
  const path = generic() ? `/timeline/api/joins/${encodeURIComponent(state.join)}/keys/`
                         : "/timeline/api/consultants/";
  const {status, body} = await getJSON(path);
  if (status !== 200 || !body) return;
  const sel = $("consultant");
  const names = generic() ? body.keys : body.consultants;
  const current = Array.from(sel.options).map((o) => o.value).filter((v) => v);
  if (names.join("\n") !== current.join("\n")) {
    const keep = state.consultant;
    sel.innerHTML = names.length ? names.map((n) => `<option value="${esc(n)}">${esc(n)}</option>`)
      .join("") : `<option value="">${generic() ? "no keys yet" : "no consultants yet"}</option>`;
    if (keep && !names.includes(keep)) {
      sel.insertAdjacentHTML("afterbegin", `<option value="${esc(keep)}">${esc(keep)}</option>`);
    }
    if (keep) sel.value = keep;
  }
  if (!state.consultant && names.length) {
    const wanted = decodeURIComponent(location.hash.replace(/^#/, ""));
    choose(names.includes(wanted) ? wanted : names[0]);
  }
}

function choose(name) {
  if (name === state.consultant) return;
  state.consultant = name || null;
  state.moods = []; state.joins = []; state.clock = null; state.seen = new Map();
  $("consultant").value = name;
  if (name) history.replaceState(null, "", "#" + encodeURIComponent(name));
  refreshTimeline().then(draw);
}

// ---- one consultant's state -----------------------------------------------------------------

// one key of any event-time join, as the mood join's drawing wants it: versions as bands (named
// by the first copied dimension field), joins as dots (their event time, answer and label)
async function refreshKey() {
  const who = state.consultant;
  const f = state.fields;
  if (!who || !f) return;
  const r = await getJSON(`/joins/${encodeURIComponent(state.join)}/${encodeURIComponent(who)}/`);
  if (who !== state.consultant) return;
  const st = $("status");
  if (r.status !== 200 || !r.body) {
    st.textContent = `HTTP ${r.status}: ${(r.body && r.body.error) || "no answer"} (retrying)`;
    st.className = "status error";
    return;
  }
  const b = r.body;
  const text = (v) => (v === null || v === undefined ? null : String(v));
  state.moods = b.versions.map((v) => ({event_time: v.event_time, mood: text(v[f.answer])}));
  state.joins = f.time === null ? [] : b.joins.map((j) => ({
    id: j.id, event_time: j[f.time], recommendation: j[f.label], mood: text(j[f.answer]),
    previous_mood: text(j[f.previous]), revision: j.revision, cause: j.cause}));
  const now = Date.now();
  for (const j of state.joins) {
    const prev = state.seen.get(j.id);
    if (!prev || prev.revision !== j.revision) state.seen.set(j.id, {revision: j.revision, at: now});
  }
  state.clock = {stream_time: b.stream_time, retention_horizon: b.retention_horizon,
                 partition: b.partition, served_by: b.served_by};
  st.className = "status";
  st.textContent = `${state.join} · partition ${b.partition} · owner ${b.served_by} · ` +
    `updated ${new Date().toLocaleTimeString()}`;
}

async function refreshTimeline() {
  if (generic()) return refreshKey();
  const who = state.consultant;
  if (!who) return;
  const q = encodeURIComponent(who);
  const [m, j, c] = await Promise.all([getJSON(`/moods/${q}/`), getJSON(`/joins/${q}/`),
                                       getJSON(`/timeline/api/clock/${q}/`)]);
  if (who !== state.consultant) return;  // the picker changed meanwhile
  const errors = [m, j, c].filter((r) => r.status !== 200);
  const st = $("status");
  if (errors.length) {
    const e = errors[0];
    st.textContent = `HTTP ${e.status}: ${(e.body && (e.body.error || e.body.detail)) || "no answer"}` +
      " (retrying)";
    st.className = "status error";
    if (errors.some((r) => r.status !== 404)) return;
  } else {
    st.className = "status";
  }
  if (m.status === 200) state.moods = m.body.moods;
  if (j.status === 200) {
    state.joins = j.body.joins;
    const now = Date.now();
    for (const r of state.joins) {
      const prev = state.seen.get(r.id);
      if (!prev || prev.revision !== r.revision) state.seen.set(r.id, {revision: r.revision, at: now});
    }
  }
  if (c.status === 200) state.clock = c.body;
  if (!errors.length) {
    st.textContent = `partition ${c.body.partition} · owner ${c.body.served_by} · ` +
      `updated ${new Date().toLocaleTimeString()}`;
  }
}

// ---- drawing --------------------------------------------------------------------------------

const TICK_STEPS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5,
                    18e5, 36e5, 72e5, 216e5, 432e5, 864e5];

function el(name, attrs, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function domain() {
  const times = [...state.moods.map((m) => m.event_time), ...state.joins.map((j) => j.event_time)];
  const clock = state.clock || {};
  if (clock.stream_time !== null && clock.stream_time !== undefined) times.push(clock.stream_time);
  if (!times.length) return null;
  const end = Math.max(...times);
  const dataStart = Math.min(...times);
  let start = state.windowMs === null ? dataStart : Math.max(dataStart, end - state.windowMs);
  let span = Math.max(end - start, 1000);
  return [start - span * 0.03, end + span * 0.05];
}

function draw() {
  const svg = $("timeline");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const width = Math.max(svg.clientWidth || svg.parentNode.clientWidth || 900, 600);
  const height = 240;
  const M = {left: 16, right: 16, top: 34, bottom: 34};
  const bandTop = M.top, bandH = height - M.top - M.bottom;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  $("corrections-who").textContent = state.consultant ? `(${state.consultant})` : "";
  drawLegend();
  drawCorrections();

  const dom = domain();
  if (!state.consultant || !dom) {
    svg.appendChild(el("text", {x: width / 2, y: height / 2, "text-anchor": "middle",
      class: "empty"}, state.consultant ? "no state yet for " + state.consultant
                                        : "waiting for data…"));
    return;
  }
  const [t0, t1] = dom;
  const x = (t) => M.left + (t - t0) / (t1 - t0) * (width - M.left - M.right);
  const clip = (t) => Math.min(Math.max(t, t0), t1);

  // time axis and grid
  const step = TICK_STEPS.find((s) => (t1 - t0) / s <= Math.max(3, (width - 40) / 110)) ||
               TICK_STEPS[TICK_STEPS.length - 1];
  const axis = el("g", {class: "axis"});
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    axis.appendChild(el("line", {x1: x(t), x2: x(t), y1: bandTop, y2: bandTop + bandH,
                                 class: "grid"}));
    axis.appendChild(el("line", {x1: x(t), x2: x(t), y1: bandTop + bandH, y2: bandTop + bandH + 4}));
    axis.appendChild(el("text", {x: x(t), y: bandTop + bandH + 16, "text-anchor": "middle"},
                        fmtTime(t, step < 1000)));
  }
  axis.appendChild(el("text", {x: width - M.right, y: height - 2, "text-anchor": "end",
                               class: "muted"}, "event time (UTC)"));
  svg.appendChild(axis);

  // mood bands: mood i holds on (t_i, t_{i+1}]: a recommendation at t joins the latest mood < t
  const clock = state.clock || {};
  const bandEnd = Math.max(t1, clock.stream_time || 0);
  const bands = el("g", {id: "bands"});
  state.moods.forEach((m, i) => {
    const next = i + 1 < state.moods.length ? state.moods[i + 1].event_time : bandEnd;
    if (next < t0 || m.event_time > t1) return;
    const a = x(clip(m.event_time)), b = x(clip(next));
    const g = el("g");
    g.appendChild(el("rect", {x: a, y: bandTop, width: Math.max(b - a, 1), height: bandH,
      fill: colourOf(m.mood), "fill-opacity": 0.28, class: "band", "data-mood": m.mood,
      "data-start": m.event_time, "data-end": i + 1 < state.moods.length ? next : ""}));
    g.appendChild(el("rect", {x: a, y: bandTop, width: Math.max(b - a, 1), height: 5,
                              fill: colourOf(m.mood)}));
    if (b - a > 46) {
      g.appendChild(el("text", {x: a + 4, y: bandTop + 18, class: "band-label",
                                fill: colourOf(m.mood)}, m.mood));
    }
    g.appendChild(el("title", {}, `${m.mood} from ${fmtTime(m.event_time, true)}`));
    bands.appendChild(g);
  });
  svg.appendChild(bands);

  // retention horizon and stream time of the consultant's partition
  const lines = el("g", {id: "lines"});
  const vline = (t, cls, label, anchor) => {
    if (t === null || t === undefined) return;
    if (t < t0) {
      lines.appendChild(el("text", {x: M.left + 2, y: bandTop - 20, class: "line-label " + cls +
        "-label", "text-anchor": "start"}, `◀ ${label} ${fmtTime(t)}`));
      return;
    }
    lines.appendChild(el("line", {x1: x(t), x2: x(t), y1: bandTop - 14, y2: bandTop + bandH,
                                  class: cls, "data-time": t}));
    lines.appendChild(el("text", {x: x(t) + (anchor === "end" ? -4 : 4), y: bandTop - 18,
      "text-anchor": anchor, class: "line-label " + cls + "-label"}, `${label} ${fmtTime(t)}`));
  };
  vline(clock.retention_horizon, "horizon", "retention horizon", "start");
  vline(clock.stream_time, "stream-time", "stream time", "end");
  svg.appendChild(lines);

  // recommendations: a dot in the band it joined, coloured by its mood
  const marks = el("g", {id: "marks"});
  const lanes = [0.42, 0.62, 0.82];
  state.joins.forEach((r, i) => {
    if (r.event_time < t0 || r.event_time > t1) return;
    const cx = x(r.event_time), cy = bandTop + bandH * lanes[i % lanes.length];
    const corrected = r.revision > 1;
    const g = el("g");
    if (corrected) {
      g.appendChild(el("circle", {cx, cy, r: 11, class: "was-ring",
                                  stroke: colourOf(r.previous_mood)}));
      g.appendChild(el("text", {x: cx, y: cy - 14, "text-anchor": "middle", class: "was-label"},
                           `was ${r.previous_mood === null ? "none" : r.previous_mood}`));
    }
    g.appendChild(el("circle", {cx, cy, r: corrected ? 6.5 : 5, fill: colourOf(r.mood),
      class: corrected ? "mark corrected" : "mark", "data-id": r.id,
      "data-mood": r.mood === null ? "" : r.mood,
      "data-previous-mood": r.previous_mood === null ? "" : r.previous_mood,
      "data-revision": r.revision, "data-cause": r.cause}));
    g.appendChild(el("title", {}, `${r.recommendation} @ ${fmtTime(r.event_time, true)}\n` +
      `mood: ${r.mood === null ? "none" : r.mood} (rev ${r.revision}, ${r.cause})` +
      (corrected ? `\nwas: ${r.previous_mood === null ? "none" : r.previous_mood}` : "")));
    marks.appendChild(g);
  });
  svg.appendChild(marks);
}

function drawLegend() {
  const moods = [...new Set(state.moods.map((m) => m.mood).concat(
    state.joins.map((j) => j.mood).filter((m) => m !== null)))];
  $("legend").innerHTML = moods.map((m) =>
    `<span><i class="chip" style="background:${colourOf(m)}"></i>${esc(m)}</span>`).join("") +
    `<span><i class="chip" style="background:${NO_MOOD}"></i>no mood</span>` +
    `<span><svg width="26" height="12"><line x1="0" x2="26" y1="6" y2="6" class="horizon"/></svg>` +
    ` retention horizon</span>` +
    `<span><svg width="26" height="12"><line x1="0" x2="26" y1="6" y2="6" class="stream-time"/>` +
    `</svg> stream time</span>`;
}

function drawCorrections() {
  const rows = state.joins.filter((r) => r.revision > 1)
    .map((r) => ({...r, at: (state.seen.get(r.id) || {at: 0}).at}))
    .sort((a, b) => b.at - a.at || b.event_time - a.event_time)
    .slice(0, 10);
  const newest = rows.length ? rows[0].at : 0;
  const fmt = (m) => (m === null ? "none" : m);
  $("corrections").tBodies[0].innerHTML = rows.length ? rows.map((r) =>
    `<tr data-id="${esc(r.id)}" class="${r.at === newest && Date.now() - r.at < 5000 ? "fresh" : ""}">` +
    `<td>${esc(r.recommendation)}</td><td>${fmtTime(r.event_time, true)}</td>` +
    `<td class="was">${esc(fmt(r.previous_mood))}</td><td class="now">${esc(fmt(r.mood))}</td>` +
    `<td>${esc(r.cause)}</td><td class="num">${r.revision}</td></tr>`).join("")
    : `<tr><td colspan="6" class="muted">no corrections among the recent joins</td></tr>`;
}

// ---- zones ----------------------------------------------------------------------------------

async function refreshZones() {
  const {status, body} = await getJSON("/timeline/api/zones/");
  if (status !== 200 || !body) return;
  const zones = body.zones;
  const max = Math.max(1, ...zones.map((z) => z.pollution_level));
  $("zones").tBodies[0].innerHTML = zones.length ? zones.map((z) =>
    `<tr data-zone="${z.zone_id}" class="${z.zone_id === state.zone ? "selected" : ""}">` +
    `<td>${z.zone_id}</td><td class="num">${z.pollution_level.toFixed(1)}</td>` +
    `<td><span class="bar" style="width:${Math.round(80 * Math.max(0, z.pollution_level) / max)}px">` +
    `</span></td><td class="num">${z.cars}</td></tr>`).join("")
    : `<tr><td colspan="4" class="muted">no zone readings yet</td></tr>`;
  if (state.zone === null && zones.length) state.zone = zones[0].zone_id;
  if (state.zone !== null) await refreshZoneCars();
}

async function refreshZoneCars() {
  const zone = state.zone;
  const {status, body} = await getJSON(`/zones/${zone}/cars/`);
  const box = $("zone-cars");
  if (status !== 200 || !body) {
    box.innerHTML = `<p class="muted">zone ${zone}: cars not available (HTTP ${status})</p>`;
    return;
  }
  const cars = Array.isArray(body.cars) ? body.cars : [];
  const cols = cars.length ? Object.keys(cars[0]) : [];
  const head = `<p><b>zone ${zone}</b> · ${cars.length} car(s)` +
    (body.pollution_level !== undefined && body.pollution_level !== null
      ? ` · pollution ${Number(body.pollution_level).toFixed(1)}` : "") + `</p>`;
  box.innerHTML = head + (cars.length ? `<table><thead><tr>${cols.map((c) =>
    `<th>${esc(c)}</th>`).join("")}</tr></thead><tbody>${cars.slice(0, 50).map((car) =>
    `<tr>${cols.map((c) => `<td>${esc(c.endsWith("event_time") ? fmtTime(car[c], true)
      : car[c] === null ? "–" : car[c])}</td>`).join("")}</tr>`).join("")}</tbody></table>` +
    (cars.length > 50 ? `<p class="muted">… ${cars.length - 50} more</p>` : "") : "");
}

// ---- loop -----------------------------------------------------------------------------------

async function poll() {
  try {
    if (state.tick === 0) await refreshJoins();
    const work = [refreshStats(), refreshTimeline()];
    if (state.tick % LIST_EVERY === 0) work.push(refreshConsultants());
    if (state.tick % 2 === 0) work.push(refreshZones());
    await Promise.all(work);
    draw();
  } catch (e) {
    $("status").textContent = "error: " + e;
    $("status").className = "status error";
  } finally {
    state.tick += 1;
    setTimeout(poll, POLL_MS);
  }
}

$("consultant").addEventListener("change", (e) => choose(e.target.value));
$("join").addEventListener("change", (e) => {
  location.href = "/timeline/?join=" + encodeURIComponent(e.target.value);
});
$("window").addEventListener("change", (e) => {
  state.windowMs = e.target.value === "all" ? null : Number(e.target.value);
  draw();
});
$("zones").addEventListener("click", (e) => {
  const tr = e.target.closest("tr[data-zone]");
  if (!tr) return;
  state.zone = Number(tr.dataset.zone);
  for (const row of $("zones").tBodies[0].rows) row.classList.toggle("selected", row === tr);
  refreshZoneCars();
});
window.addEventListener("resize", draw);
poll();
