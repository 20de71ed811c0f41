// specllama's page: a chat over the server's own /v1/chat/completions stream,
// each token coloured by where it came from, and a race of the same request
// with speculation and without. No build step, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "specllama-api-key";
const THEMES = ["auto", "light", "dark"];
const CHAT = "v1/chat/completions"; // relative: the page works behind a proxy's sub-path too
const MODELS = "v1/models";

const state = {
  key: sessionStorage.getItem(KEY_STORE) || "",
  messages: [], // the conversation: {role, content}
  controller: null, // the running request's AbortController
  race: null, // the last race's two recordings
  replayTimer: null, // set while a replay runs
};

// ---------------------------------------------------------------- the API

class RequestError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.key) h.Authorization = `Bearer ${state.key}`;
  return h;
}

// fetch, with the server's error object turned into a RequestError (a 401 asks for the key)
async function call(path, body, signal) {
  const init = body === undefined ? { headers: headers(), signal }
    : { method: "POST", headers: headers(), body: JSON.stringify(body), signal };
  const res = await fetch(path, init);
  if (res.ok) return res;
  let message = `${res.status} ${res.statusText}`;
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) message = j.error.message;
  } catch (_) { /* not JSON: keep the status line */ }
  if (res.status === 401) askForKey(message);
  throw new RequestError(res.status, message);
}

// the JSON payloads of a server-sent-events body, until [DONE] (a body that ends before it is an error)
async function* events(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new RequestError(0, "the stream ended before the reply was complete");
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue; // a comment (keep-alive ping)
      if (data === "[DONE]") return;
      const obj = JSON.parse(data);
      if (obj.error) throw new RequestError(obj.error.code || 500, obj.error.message);
      yield obj;
    }
  }
}

// One streamed chat completion. onPass(origins, text) is called for each
// target pass; returns {text, finish, usage, timings, speculative}.
async function complete(body, signal, onPass) {
  const res = await call(CHAT, body, signal);
  const out = { text: "", finish: null, usage: null, timings: null, speculative: null };
  for await (const chunk of events(res)) {
    if (chunk.usage) out.usage = chunk.usage;
    if (chunk.timings) out.timings = chunk.timings;
    if (chunk.speculative) out.speculative = chunk.speculative;
    const choice = chunk.choices && chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) out.finish = choice.finish_reason;
    const text = (choice.delta && choice.delta.content) || "";
    const origins = chunk.origins
      || (text ? { pieces: [[text, "target"]], n_tokens: 0, n_drafted: 0, n_accepted: 0 } : null);
    out.text += text;
    if (origins) onPass(origins, text);
  }
  return out;
}

function numberField(id) {
  const raw = $(id).value.trim();
  return raw === "" ? null : Number(raw);
}

// The request body from the settings (an empty field: the server's default).
// The server checks every value and answers a bad one with a message naming it.
function requestBody(messages, { seed, draftMax } = {}) {
  const body = { messages, stream: true, stream_options: { include_usage: true }, origins: true };
  const temperature = numberField("temperature");
  if (temperature !== null) body.temperature = temperature;
  const maxTokens = numberField("max-tokens");
  if (maxTokens !== null) body.max_tokens = maxTokens;
  const s = seed !== undefined ? seed : numberField("seed");
  if (s !== null) body.seed = s;
  const n = draftMax !== undefined ? draftMax : numberField("draft-max");
  if (n !== null) body["speculative.n_max"] = n;
  return body;
}

function withSystem(messages) {
  const system = $("system-prompt").value;
  return system.trim() ? [{ role: "system", content: system }, ...messages] : messages;
}

// ---------------------------------------------------------------- rendering

function describePass(o, index) {
  const fromTarget = Math.max(o.n_tokens - o.n_accepted, 0);
  if (!o.n_drafted) return `Pass ${index}: no draft; ${fromTarget} token${fromTarget === 1 ? "" : "s"} from the target`;
  return `Pass ${index}: drafted ${o.n_drafted}, accepted ${o.n_accepted}; `
    + `${fromTarget} token${fromTarget === 1 ? "" : "s"} from the target`;
}

// a target pass as a span of token spans, each coloured by origin
function passElement(o, index) {
  const pass = document.createElement("span");
  pass.className = "pass";
  pass.dataset.pass = index;
  pass.dataset.drafted = o.n_drafted;
  pass.dataset.accepted = o.n_accepted;
  pass.dataset.tokens = o.n_tokens;
  pass.title = describePass(o, index);
  for (const [text, origin] of o.pieces) {
    const tok = document.createElement("span");
    tok.className = `tok ${origin === "draft" ? "draft" : "target"}`;
    tok.textContent = text;
    pass.append(tok);
  }
  return pass;
}

// Counts of one reply as it streams; the final figures are the server's own.
class Tally {
  constructor() {
    this.start = performance.now();
    this.tokens = 0;
    this.drafted = 0;
    this.accepted = 0;
    this.passes = 0;
  }

  add(o) {
    this.passes += 1;
    this.tokens += o.n_tokens;
    this.drafted += o.n_drafted;
    this.accepted += o.n_accepted;
  }

  // tokens/s, acceptance rate and tokens per pass, live or from the server's final record
  show(el, result) {
    let tps = this.tokens / Math.max((performance.now() - this.start) / 1000, 1e-3);
    let acceptance = this.drafted ? this.accepted / this.drafted : null;
    let perPass = this.passes ? this.tokens / this.passes : 0;
    let tokens = this.tokens;
    if (result && result.timings && result.speculative) {
      tps = result.timings.predicted_per_second;
      tokens = result.timings.predicted_n;
      acceptance = result.speculative.n_drafted ? result.speculative.acceptance_rate : null;
      perPass = result.speculative.tokens_per_pass;
      el.dataset.final = "1";
    }
    el.dataset.tokens = tokens;
    el.dataset.tokensPerSecond = tps;
    el.dataset.acceptance = acceptance === null ? "" : acceptance;
    el.dataset.tokensPerPass = perPass;
    el.textContent = `${tokens} tokens · ${tps.toFixed(1)} tok/s · `
      + (acceptance === null ? "no drafts" : `acceptance ${(100 * acceptance).toFixed(1)}%`)
      + ` · ${perPass.toFixed(2)} tokens/pass`;
  }
}

// follow the reply only if the reader has not scrolled up to read something else: following keeps the page at
// its foot, where the reply's last line sits just above the composer (which stays in view: style.css)
function nearBottom() {
  const root = document.scrollingElement;
  return root.scrollHeight - root.scrollTop - root.clientHeight < 80;
}

function toFoot() {
  const root = document.scrollingElement;
  root.scrollTop = root.scrollHeight;
}

function bubble(role, text) {
  const el = document.createElement("div");
  el.className = `message ${role}`;
  if (text !== undefined) el.textContent = text;
  const follow = role === "user" || nearBottom(); // a message sent takes the page to its foot, to follow its reply
  $("messages").append(el);
  if (follow) toFoot();
  return el;
}

// focus goes back to a text box only if it was nowhere useful (on a disabled button, or on the page)
function refocus(id) {
  const a = document.activeElement;
  if (!a || a === document.body || a.disabled) $(id).focus();
}

function note(el, text, isError) {
  const p = document.createElement("p");
  p.className = isError ? "note error" : "note";
  p.textContent = text;
  el.append(p);
}

// ---------------------------------------------------------------- the chat

function setBusy(controller) {
  state.controller = controller;
  const busy = controller !== null;
  $("send").disabled = busy;
  $("race-run").disabled = busy;
  $("stop").disabled = !busy;
  $("race-stop").disabled = !busy;
  $("race-replay").disabled = busy || state.race === null || state.replayTimer !== null;
}

function stop() {
  if (state.controller) state.controller.abort();
}

async function send() {
  const text = $("prompt").value;
  if (state.controller || !text.trim()) return;
  $("prompt").value = "";
  const convo = state.messages; // "New chat" during the reply starts another one: this reply stays out of it
  const user = bubble("user", text);
  convo.push({ role: "user", content: text });
  const reply = bubble("assistant");
  reply.dataset.state = "streaming";
  reply.setAttribute("aria-busy", "true");
  const body = document.createElement("div");
  body.className = "reply";
  readablePasses(body);
  const stats = document.createElement("p");
  stats.className = "stats";
  reply.append(body, stats);
  const tally = new Tally();
  const controller = new AbortController();
  setBusy(controller);
  let answer = "";
  try {
    const result = await complete(requestBody(withSystem(convo)), controller.signal, (o, piece) => {
      const follow = nearBottom();
      tally.add(o);
      body.append(passElement(o, tally.passes));
      answer += piece;
      tally.show(stats);
      if (follow) toFoot();
    });
    tally.show(stats, result);
    reply.dataset.state = "done";
    if (result.finish === "length") note(reply, "(stopped at max tokens)");
  } catch (e) {
    if (e.name === "AbortError") {
      reply.dataset.state = "stopped";
      tally.show(stats);
      note(reply, "(stopped)");
    } else {
      reply.dataset.state = "error";
      note(reply, e.message, true);
    }
  } finally {
    setBusy(null);
    reply.removeAttribute("aria-busy");
    if (answer) {
      convo.push({ role: "assistant", content: answer });
    } else {
      // nothing came back: the message leaves the conversation and returns to the box, to send again
      convo.pop();
      user.classList.add("unsent");
      user.title = "not sent: the message is back in the box";
      if (convo === state.messages && !$("prompt").value) $("prompt").value = text;
    }
    refocus("prompt");
  }
}

function newChat() {
  stop();
  state.messages = [];
  $("messages").replaceChildren();
  document.querySelectorAll(".pass-info").forEach((p) => { p.textContent = ""; });
  $("prompt").focus();
}

// hovering a pass shows its counts (each pass's title says the same to a screen reader)
function highlight(pass) {
  document.querySelectorAll(".pass.hover").forEach((p) => p.classList.remove("hover"));
  if (!pass) return;
  pass.classList.add("hover");
  pass.closest("section").querySelector(".pass-info").textContent = pass.title;
}

function showPass(event) {
  const pass = event.target.closest && event.target.closest(".pass");
  if (pass) highlight(pass);
}

// from the keyboard: Tab to a reply, then the arrow keys step through its passes
function readablePasses(el) {
  el.tabIndex = 0;
  el.setAttribute("aria-label", "reply; arrow keys step through its target passes");
  el.addEventListener("keydown", (e) => {
    if (!["ArrowLeft", "ArrowRight", "Home", "End"].includes(e.key)) return;
    const passes = Array.from(el.querySelectorAll(".pass"));
    if (!passes.length) return;
    e.preventDefault();
    const at = passes.findIndex((p) => p.classList.contains("hover"));
    const last = passes.length - 1;
    const next = { ArrowLeft: at < 0 ? last : Math.max(at - 1, 0), ArrowRight: at < 0 ? 0 : Math.min(at + 1, last),
      Home: 0, End: last }[e.key];
    highlight(passes[next]);
  });
}

// ---------------------------------------------------------------- the race

function lane(id) {
  const el = $(id);
  const text = el.querySelector(".lane-text");
  if (text.tabIndex !== 0) readablePasses(text);
  return {
    el,
    text,
    elapsed: el.querySelector(".elapsed"),
    rate: el.querySelector(".rate"),
    clear() {
      this.text.replaceChildren();
      this.elapsed.textContent = "0.00 s";
      this.rate.textContent = "–";
      delete el.dataset.done;
    },
    show(ms, tokens) {
      this.elapsed.textContent = `${(ms / 1000).toFixed(2)} s`;
      this.rate.textContent = ms > 0 ? `${(tokens / (ms / 1000)).toFixed(1)} tok/s` : "–";
    },
  };
}

// one run, recorded: when (ms since the request went out) each pass arrived
async function record(body, where, signal) {
  where.clear();
  const start = performance.now();
  const passes = [];
  let tokens = 0;
  const result = await complete(body, signal, (o) => {
    const t = performance.now() - start;
    passes.push({ t, o });
    tokens += o.n_tokens;
    where.text.append(passElement(o, passes.length));
    where.show(t, tokens);
  });
  // The clock starts when decoding does: the lane's own prompt time is taken off (the second run
  // finds the prompt in the server's KV cache, the first one evaluates it).
  const promptMs = result.timings ? result.timings.prompt_ms : 0;
  for (const p of passes) p.t = Math.max(p.t - promptMs, 0);
  result.ms = Math.max(performance.now() - start - promptMs, 0);
  result.promptMs = promptMs;
  result.passes = passes;
  return result;
}

async function race() {
  const prompt = $("race-prompt").value.trim();
  if (state.controller || !prompt) return;
  clearTimeout(state.replayTimer);
  const seedField = numberField("seed");
  const seed = seedField !== null ? seedField : Math.floor(Math.random() * 2 ** 31);
  const draftMax = numberField("draft-max"); // Draft max 0 would race the target against itself
  const specDraft = draftMax ? draftMax : null; // null: the server's
  const messages = withSystem([{ role: "user", content: prompt }]);
  const spec = lane("lane-spec");
  const plain = lane("lane-plain");
  $("race-verdict").textContent = "";
  delete $("race-verdict").dataset.same;
  const controller = new AbortController();
  setBusy(controller);
  try {
    $("race-status").textContent = `1 of 2: with speculation (seed ${seed})…`;
    const a = await record(requestBody(messages, { seed, draftMax: specDraft }), spec, controller.signal);
    $("race-status").textContent = `2 of 2: target only (seed ${seed})…`;
    const b = await record(requestBody(messages, { seed, draftMax: 0 }), plain, controller.signal);
    state.race = { spec: a, plain: b, seed };
    $("race-status").textContent = "Replaying both at the pace they were measured…";
  } catch (e) {
    $("race-status").textContent = e.name === "AbortError" ? "Stopped." : e.message;
    state.race = null;
    return;
  } finally {
    setBusy(null);
    refocus("race-prompt");
  }
  replay();
}

function laneData(where, run) {
  const d = where.el.dataset;
  d.text = run.text;
  d.ms = run.ms;
  d.tokens = run.usage ? run.usage.completion_tokens : run.passes.reduce((n, p) => n + p.o.n_tokens, 0);
  d.drafted = run.speculative ? run.speculative.n_drafted : 0;
  d.done = "1";
}

// both runs again from zero, each pass appearing when it arrived
function replay() {
  const r = state.race;
  if (!r || state.controller) return;
  clearTimeout(state.replayTimer);
  const runs = [[lane("lane-spec"), r.spec], [lane("lane-plain"), r.plain]];
  const shown = runs.map(() => ({ next: 0, tokens: 0 }));
  for (const [where] of runs) where.clear();
  $("race-replay").disabled = true;
  $("race-verdict").textContent = "";
  delete $("race-verdict").dataset.same;
  const start = performance.now();
  const frame = () => {
    const now = performance.now() - start;
    let running = false;
    runs.forEach(([where, run], i) => {
      const s = shown[i];
      while (s.next < run.passes.length && run.passes[s.next].t <= now) {
        const { o } = run.passes[s.next];
        s.next += 1;
        s.tokens += o.n_tokens;
        where.text.append(passElement(o, s.next));
      }
      if (now < run.ms) {
        running = true;
        where.show(now, s.tokens);
      } else if (!where.el.dataset.done) {
        where.show(run.ms, s.tokens);
        laneData(where, run);
      }
    });
    if (running) {
      state.replayTimer = setTimeout(frame, 30);
    } else {
      state.replayTimer = null;
      verdict(r);
    }
  };
  frame();
}

function verdict(r) {
  const same = r.spec.text === r.plain.text;
  const v = $("race-verdict");
  v.dataset.same = same;
  const ratio = r.plain.ms / r.spec.ms;
  const faster = ratio >= 1 ? `${ratio.toFixed(2)}x sooner with speculation`
    : `${(1 / ratio).toFixed(2)}x later with speculation`;
  const decode = (run) => (run.timings ? `${run.timings.predicted_per_second.toFixed(1)} tok/s decoding` : "");
  v.textContent = `${(r.spec.ms / 1000).toFixed(2)} s against ${(r.plain.ms / 1000).toFixed(2)} s: ${faster} `
    + `(${decode(r.spec)} against ${decode(r.plain)}; prompt time not counted). `
    + (same ? "The two texts are the same."
      : "The two texts differ: above temperature 0 each is one draw from the target's distribution "
        + "(at temperature 0 they are the same).");
  $("race-status").textContent = "";
  $("race-replay").disabled = state.controller !== null;
}

// ---------------------------------------------------------------- key, theme, tabs

function askForKey(message) {
  const dialog = $("key-dialog");
  $("key-error").textContent = state.key ? message : "";
  if (!dialog.open) dialog.showModal();
  $("api-key").focus();
}

async function loadModel() {
  try {
    const res = await call(MODELS);
    const m = (await res.json()).data[0];
    const base = (p) => (p ? String(p).split(/[\\/]/).pop() : "none");
    const info = $("model-info");
    const name = m.id === base(m.meta.target) ? "" : `${m.id}: `;
    info.textContent = `${name}target ${base(m.meta.target)} · draft ${base(m.meta.draft)} · `
      + `draft max ${m.meta.draft_max}${m.meta.adaptive ? ", adaptive" : ", fixed"}`;
    info.dataset.ready = "1";
    $("key-dialog").close();
  } catch (e) {
    if (e.status !== 401) {
      $("model-info").textContent = `cannot reach the server: ${e.message}`;
      return;
    }
    // the dialog asks for it; a browser may still let Esc close it, so the header can open it again
    const again = document.createElement("button");
    again.type = "button";
    again.id = "enter-key";
    again.className = "quiet";
    again.textContent = "Enter the key";
    again.addEventListener("click", () => askForKey(""));
    $("model-info").replaceChildren("an API key is needed ", again);
  }
}

function applyTheme(theme) {
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  $("theme").textContent = `Theme: ${theme}`;
  localStorage.setItem("specllama-theme", theme);
}

function selectTab(name) {
  for (const tab of ["chat", "race"]) {
    const on = tab === name;
    $(`tab-${tab}`).setAttribute("aria-selected", on);
    $(`tab-${tab}`).tabIndex = on ? 0 : -1;
    $(`view-${tab}`).hidden = !on;
  }
}

// Enter sends where there is a Shift key for new lines; a touch screen's Enter makes a new line
const ENTER_SENDS = !window.matchMedia("(pointer: coarse)").matches;

function enterSends(textarea, action) {
  textarea.addEventListener("keydown", (e) => {
    if (ENTER_SENDS && e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      action();
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("race-form").addEventListener("submit", (e) => { e.preventDefault(); race(); });
  enterSends($("prompt"), send);
  enterSends($("race-prompt"), race);
  if (!ENTER_SENDS) { // a touch screen: Enter makes a new line, the buttons send
    $("prompt").placeholder = "Message (Send sends; Enter: new line)";
    $("race-prompt").placeholder = "A prompt to race (Race starts it)";
  }
  $("stop").addEventListener("click", stop);
  $("race-stop").addEventListener("click", stop);
  $("race-replay").addEventListener("click", replay);
  $("new-chat").addEventListener("click", newChat);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.controller && !$("key-dialog").open) stop();
  });
  for (const where of [$("messages"), $("lane-spec"), $("lane-plain")]) {
    where.addEventListener("mouseover", showPass);
  }
  lane("lane-spec");
  lane("lane-plain"); // their texts take the keyboard too
  $("tab-chat").addEventListener("click", () => selectTab("chat"));
  $("tab-race").addEventListener("click", () => selectTab("race"));
  document.querySelector(".tabs").addEventListener("keydown", (e) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    const next = $("tab-chat").getAttribute("aria-selected") === "true" ? "race" : "chat";
    selectTab(next);
    $(`tab-${next}`).focus();
  });
  $("theme").addEventListener("click", () => {
    const now = localStorage.getItem("specllama-theme") || "auto";
    applyTheme(THEMES[(THEMES.indexOf(now) + 1) % THEMES.length]);
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.key = $("api-key").value.trim();
    sessionStorage.setItem(KEY_STORE, state.key);
    loadModel();
  });
  $("key-dialog").addEventListener("cancel", (e) => e.preventDefault()); // nothing works without it
  applyTheme(localStorage.getItem("specllama-theme") || "auto");
  loadModel();
  $("prompt").focus();
});
