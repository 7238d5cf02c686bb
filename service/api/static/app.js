"use strict";
// attention-mt page: plain JavaScript, no build step, no CDN.

const $ = (id) => document.getElementById(id);
const state = { models: {}, defaults: {}, result: null, model: null, reranked: false };
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
// Language names from the browser itself (works offline, for any code a bundle declares).
const LANGUAGE_NAMES = typeof Intl.DisplayNames === "function" ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
function languageName(code) {
  try {
    return (LANGUAGE_NAMES && LANGUAGE_NAMES.of(code.replace("_", "-"))) || code;
  } catch (err) {
    return code;  // not a BCP 47 tag (e.g. a bundle's own code): show it as it is
  }
}

function viridis(w) {
  const x = Math.min(Math.max(w, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// Errors from the API, in words a person can act on.
function describeError(status, body) {
  const e = (body && body.error) || {};
  const message = e.message || `the service answered ${status}`;
  if (e.code === "input_too_long") return `Too long: ${message}.`;
  if (e.code === "unsupported_language_pair") return `Not supported: ${message}.`;
  if (status === 503) return `The service is busy or starting up; try again in a moment (${message}).`;
  if (status === 413) return `The text is too large to send (${message}).`;
  return `Could not translate: ${message}.`;
}

// API keys: when the service answers 401, the page asks for a key (once for every call waiting),
// keeps it for this tab only (sessionStorage) and sends it as X-API-Key on every call.
const KEY_STORE = "attention-mt.api-key";
let apiKey = readStoredKey();
let keyPrompt = null;

function readStoredKey() {
  try {
    return sessionStorage.getItem(KEY_STORE);
  } catch (err) {
    return null;  // storage turned off: the key lives in this page only
  }
}

function keepKey(key) {
  apiKey = key;
  try {
    sessionStorage.setItem(KEY_STORE, key);
  } catch (err) {
    // storage turned off: keep it in memory
  }
}

function askForKey(rejected) {
  if (keyPrompt) return keyPrompt;
  keyPrompt = new Promise((resolve) => {
    $("key-note").textContent = rejected
      ? "That key was not accepted; enter another."
      : "This service asks for an API key. It is kept in this tab only.";
    $("key-section").hidden = false;
    $("api-key").focus();
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      keepKey($("api-key").value);
      $("api-key").value = "";
      $("key-section").hidden = true;
      keyPrompt = null;
      resolve();
    }, { once: true });
  });
  return keyPrompt;
}

async function send(path, body, key) {
  const headers = body === undefined ? {} : { "content-type": "application/json" };
  if (key) headers["x-api-key"] = key;
  try {
    return await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new Error("Cannot reach the translation service.");
  }
}

async function api(path, body) {
  for (;;) {
    const key = apiKey;
    const response = await send(path, body, key);
    if (response.status === 401) {
      // a key entered while this call was out is tried before asking again
      if (key === apiKey) await askForKey(Boolean(key));
      continue;
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new Error(describeError(response.status, data));
    return data;
  }
}

function showError(id, message) {
  const el = $(id);
  el.textContent = message || "";
  el.hidden = !message;
}

function tokenLabel(t) {
  return t.special ? t.text : t.text.trim() || "▁";
}

// Where each sentence (or clause) after the first starts: its first target row and source column.
function segmentStarts(segments) {
  const rows = new Set(), cols = new Set();
  (segments || []).slice(1).forEach((seg) => {
    rows.add(seg.target_tokens.start);
    cols.add(seg.source_tokens.start);
  });
  return { rows, cols };
}

// A heatmap table: rows = target tokens, columns = source tokens; sentence boundaries drawn as lines.
function heatmap(source, target, matrix, options = {}) {
  const starts = segmentStarts(options.segments);
  const table = document.createElement("table");
  table.className = "heatmap";
  table.setAttribute("role", "grid");
  table.setAttribute("aria-label", options.title || "attention heatmap");
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  const columns = source.map((tok, s) => {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = tokenLabel(tok);
    if (tok.special) th.classList.add("special");
    if (starts.cols.has(s)) th.classList.add("segment-start");
    if (options.unattended && options.unattended.has(s)) {
      th.classList.add("unattended");
      th.title = "Barely attended to (low coverage). A heuristic: it may have been left out of the translation.";
    }
    head.appendChild(th);
    return th;
  });
  const body = table.createTBody();
  target.forEach((tok, t) => {
    const row = body.insertRow();
    if (starts.rows.has(t)) row.classList.add("segment-start");
    const th = document.createElement("th");
    th.scope = "row";
    th.tabIndex = 0;
    th.textContent = tokenLabel(tok);
    const highlight = (on) => columns.forEach((col, s) => {
      col.style.background = on ? `rgba(253, 231, 37, ${Math.min(1, matrix[t][s] * 1.5)})` : "";
      col.classList.toggle("attended", on && matrix[t][s] >= 0.2);
    });
    th.addEventListener("mouseenter", () => highlight(true));
    th.addEventListener("mouseleave", () => highlight(false));
    th.addEventListener("focus", () => highlight(true));
    th.addEventListener("blur", () => highlight(false));
    row.appendChild(th);
    source.forEach((stok, s) => {
      const cell = row.insertCell();
      const w = matrix[t][s];
      cell.className = starts.cols.has(s) ? "cell segment-start" : "cell";
      cell.tabIndex = t === 0 && s === 0 ? 0 : -1;
      cell.dataset.t = t;
      cell.dataset.s = s;
      cell.dataset.weight = w.toFixed(3);
      cell.style.background = viridis(w);
      const text = `${tokenLabel(tok)} → ${tokenLabel(stok)}: ${w.toFixed(3)}`;
      cell.setAttribute("aria-label", text);
      const show = () => { $("tooltip").textContent = text; };
      cell.addEventListener("mouseenter", show);
      cell.addEventListener("focus", show);
    });
  });
  table.addEventListener("keydown", (event) => moveFocus(event, table, target.length, source.length));
  const wrap = document.createElement("div");
  wrap.className = "heatmap-wrap";
  if (options.caption) {
    const h = document.createElement("h3");
    h.textContent = options.caption;
    wrap.appendChild(h);
  }
  wrap.appendChild(table);
  return wrap;
}

// Arrow keys move between cells (one tab stop per heatmap).
function moveFocus(event, table, rows, cols) {
  const cell = event.target.closest("td.cell");
  if (!cell) return;
  let t = Number(cell.dataset.t), s = Number(cell.dataset.s);
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (!(event.key in moves)) return;
  event.preventDefault();
  t = Math.min(Math.max(t + moves[event.key][0], 0), rows - 1);
  s = Math.min(Math.max(s + moves[event.key][1], 0), cols - 1);
  const next = table.querySelector(`td.cell[data-t="${t}"][data-s="${s}"]`);
  cell.tabIndex = -1;
  next.tabIndex = 0;
  next.focus();
}

function granularity() {
  return document.querySelector('input[name="granularity"]:checked').value;
}

// The pair picker lists each language pair's default model by name (codes may hold "-", e.g. pt-BR).
function selectedModel() {
  return state.models[$("pair").value];
}

// Reranking needs a default model of the opposite pair (the service scores candidates with it).
function canRerank(model) {
  return Boolean(model) && `${model.target}-${model.source}` in state.defaults;
}

function rerankAsked() {
  return !$("rerank-control").hidden && $("rerank").checked;
}

function pairChanged() {
  $("rerank-control").hidden = !canRerank(selectedModel());
}

async function loadModels() {
  try {
    const data = await api("/v1/models");
    data.models.forEach((m) => { state.models[m.name] = m; });
    state.defaults = data.defaults;
    $("pair").replaceChildren(...Object.values(data.defaults).map((name) => {
      const m = state.models[name];
      return new Option(`${languageName(m.source)} → ${languageName(m.target)} (${m.name}: ${m.family}, ${m.attention})`, name);
    }));
    pairChanged();
  } catch (err) {
    showError("error", err.message);
  }
}

function meanOfHeads(perHead) {
  const n = perHead.length;
  return perHead[0].map((row, t) => row.map((_, s) => perHead.reduce((acc, h) => acc + h[t][s], 0) / n));
}

function setupViewControls(model) {
  const transformer = model.family === "transformer";
  $("view-controls").hidden = !transformer;
  if (!transformer) return;
  const layer = model.attention_view.layer < 0 ? model.layers + model.attention_view.layer : model.attention_view.layer;
  $("layer").replaceChildren(...Array.from({ length: model.layers }, (_, i) => new Option(`layer ${i}`, i, i === layer, i === layer)));
  // start on the bundle's default view, the one /v1/translate's matrix was drawn with
  const chosen = String(model.attention_view.heads);
  const option = (text, value) => new Option(text, value, String(value) === chosen, String(value) === chosen);
  const heads = [option("mean of heads", "mean"), new Option("all heads", "all")];
  for (let h = 0; h < model.heads; h++) heads.push(option(`head ${h}`, h));
  $("head").replaceChildren(...heads);
}

// What the underlines mean, in the words of the model's own measurement (export/omission.py).
function omissionNote(signals, model, flagged) {
  const measured = model && model.attention_view ? model.attention_view.omission : null;
  const pct = (x) => `${Math.round(x * 100)}%`;
  if (measured && measured.threshold === 0) {
    return "No words are underlined for this model: on held-out news text, words it gave little attention "
      + "were dropped no more often than other words, so low attention says nothing about omissions here.";
  }
  if (flagged === 0) return "";
  const base = `Underlined source tokens got little attention (coverage below ${signals.unattended_threshold})`;
  if (!measured) return `${base}; a heuristic hint of a possible omission, not measured for this model.`;
  return `${base}. On held-out news text, ${pct(measured.precision)} of words underlined this way were missing `
    + `from the translation (against ${pct(measured.dropped_share)} of all words), and the underline caught `
    + `${pct(measured.recall)} of the missing words.`;
}

function drawMain(best, model) {
  const unattended = new Set(best.signals.unattended_source);
  const note = $("unattended-note");
  note.textContent = omissionNote(best.signals, model, unattended.size);
  note.hidden = note.textContent === "";
  $("heatmaps").replaceChildren(heatmap(best.source_tokens, best.target_tokens, best.attention, {
    unattended, title: `attention of ${model.name}`, segments: best.segments,
  }));
}

async function translate() {
  const text = $("source").value;
  showError("error", "");
  $("translate").disabled = true;
  try {
    const model = selectedModel();
    // the model's own beam size (its search defaults); up to 3 alternatives
    const body = {
      q: text, model: model.name, n_best: Math.min(3, model.search.beam_size),
      attention: { granularity: granularity() }, rerank: rerankAsked(),
    };
    const data = await api("/v1/translate", body);
    const best = data.translations[0];
    state.result = best;
    state.reranked = body.rerank;  // the views re-read this translation: the same search
    state.model = state.models[data.model];
    $("translation").textContent = best.text;
    $("translation").lang = model.target;
    $("alternatives").replaceChildren(...best.alternatives.map((alt) => {
      const li = document.createElement("li");
      li.textContent = `${alt.text} `;
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = `(score ${alt.score.toFixed(2)})`;
      li.appendChild(score);
      return li;
    }));
    const bestScore = document.createElement("span");
    bestScore.className = "score";
    bestScore.textContent = ` (score ${best.score.toFixed(2)})`;
    $("translation").appendChild(bestScore);
    setupViewControls(state.model);
    drawMain(best, state.model);
    $("result").hidden = false;
    if ($("forced").value === "") $("forced").placeholder = best.text;
  } catch (err) {
    showError("error", err.message);
  } finally {
    $("translate").disabled = false;
  }
}

// Layer and head pickers: the displayed translation, re-read through /v1/attention.
async function changeView() {
  if (!state.result) return;
  const model = state.model;
  const layer = Number($("layer").value);
  const head = $("head").value;
  showError("error", "");
  try {
    // no forced_target: /v1/attention decodes exactly what /v1/translate gave, sentence by sentence
    const data = await api("/v1/attention", {
      q: $("source").value, model: model.name,
      layers: [layer], heads: head === "mean" || head === "all" ? null : [Number(head)],
      self_attention: false, granularity: granularity(), rerank: state.reranked,
    });
    const perHead = data.cross_attention[0];
    const unattended = new Set(data.signals.unattended_source);
    if (head === "all") {
      const grid = document.createElement("div");
      grid.className = "small-multiples";
      perHead.forEach((m, h) => grid.appendChild(heatmap(data.source_tokens, data.target_tokens, m, {
        caption: `layer ${layer}, head ${data.heads[h]}`, unattended, segments: data.segments,
      })));
      $("heatmaps").replaceChildren(grid);
    } else {
      const matrix = head === "mean" ? meanOfHeads(perHead) : perHead[0];
      $("heatmaps").replaceChildren(heatmap(data.source_tokens, data.target_tokens, matrix, {
        caption: `layer ${layer}, ${head === "mean" ? "mean of heads" : `head ${head}`}`, unattended, segments: data.segments,
      }));
    }
  } catch (err) {
    showError("error", err.message);
  }
}

async function scoreForced() {
  showError("forced-error", "");
  const forced = $("forced").value;
  if (!forced.trim()) {
    showError("forced-error", "Type a translation to score.");
    return;
  }
  try {
    const data = await api("/v1/attention", {
      q: $("source").value, forced_target: forced, model: selectedModel().name,
      self_attention: false, granularity: granularity(),
    });
    const perLayer = data.cross_attention;
    const view = data.attention_view;
    const layerIndex = view.layer < 0 ? perLayer.length + view.layer : view.layer;
    const matrix = meanOfHeads(perLayer[layerIndex]);
    $("forced-score").replaceChildren();
    const total = document.createElement("p");
    total.textContent = `Log-probability of your translation: ${data.score.toFixed(2)} (higher is more likely to the model)`;
    const list = document.createElement("ul");
    list.className = "logprobs";
    data.target_tokens.forEach((tok) => {
      const li = document.createElement("li");
      li.textContent = `${tokenLabel(tok)} ${tok.logprob.toFixed(2)}`;
      list.appendChild(li);
    });
    $("forced-score").append(total, list);
    $("forced-heatmap").replaceChildren(heatmap(data.source_tokens, data.target_tokens, matrix, {
      caption: `your translation, layer ${layerIndex}, mean of heads`,
    }));
    $("forced-result").hidden = false;
  } catch (err) {
    showError("forced-error", err.message);
  }
}

$("translate").addEventListener("click", translate);
$("pair").addEventListener("change", pairChanged);
$("score").addEventListener("click", scoreForced);
$("layer").addEventListener("change", changeView);
$("head").addEventListener("change", changeView);
document.querySelectorAll('input[name="granularity"]').forEach((r) => r.addEventListener("change", () => {
  if (state.result) translate();
}));
for (const id of ["source", "forced"]) {
  $(id).addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      (id === "source" ? translate : scoreForced)();
    }
  });
}
loadModels();
