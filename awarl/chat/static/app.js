// awarl chat web UI: plain DOM, no build step. Every string from the server goes in as text, never HTML.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const shown = new Map();   // thread id -> message element
const open = new Set();    // thread ids whose debug panel is open
const proofOpen = new Set(); // thread ids whose proof is open (independent of the debug panel)
const CITE_RE = /\[([A-Za-z0-9][A-Za-z0-9_\-.:#]{0,63})\]/g;  // a cited passage id, as awarl.protocol reads it
let config = null;
const TOKEN_KEY = "awarl-chat-token";         // the admin's or a reviewer's token, asked once per browser
const THREADS_KEY = "awarl-chat-thread-tokens"; // thread id -> the capability token POST /api/chat returned
const threadTokens = new Map(Object.entries(JSON.parse(localStorage.getItem(THREADS_KEY) || "{}")));

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(method, path, body) {
  const headers = body ? {"Content-Type": "application/json"} : {};
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const thread = path.match(/^\/api\/thread\/([^/?]+)/);
  if (thread && threadTokens.has(thread[1])) headers["X-Thread-Token"] = threadTokens.get(thread[1]);
  const res = await fetch(path, {method, headers, body: body ? JSON.stringify(body) : undefined});
  const data = await res.json().catch(() => ({error: {message: res.statusText}}));
  if (res.status === 401 || res.status === 403) showToken(data.error && data.error.message);
  if (!res.ok) throw new Error((data.error && data.error.message) || res.statusText);
  return data;
}

// -- the token ----------------------------------------------------------------------------------
function showToken(message) {
  const has = !!localStorage.getItem(TOKEN_KEY);
  $("#token-status").textContent = message || (has ? "Token saved in this browser." : "Config changes and reviews need a token.");
  $("#token-forget").classList.toggle("hidden", !has);
}

$("#token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const value = $("#admin-token").value.trim();
  if (!value) return;
  localStorage.setItem(TOKEN_KEY, value);
  $("#admin-token").value = "";
  showToken("Token saved in this browser.");
  await loadConfig().then(refreshThreads).catch(() => {});
});

$("#token-forget").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); showToken(); });

// -- config -------------------------------------------------------------------------------------
async function loadConfig() {
  config = await api("GET", "/api/config");
  const mode = $("#mode");
  mode.textContent = config.mode === "agent" ? `Agent: ${config.generator} — ${config.mode_note || ""}`
                                             : (config.mode_note || "Validate-only mode: no agent loaded.");
  mode.className = "mode " + (config.mode === "agent" ? "agent" : "validate-only");
  $("#cfg-generator").replaceChildren(el("option", {value: ""}, "none (validate-only)"),
    ...config.generators.map(g => el("option", {value: g, selected: g === config.generator}, g)));
  $("#cfg-max").value = config.max_iterations;
  const policies = (await api("GET", "/api/config/policies")).policies;
  const sel = $("#cfg-policy");
  sel.replaceChildren(...policies.map(p => el("option", {value: p.name, selected: p.name === config.policy},
                                                `${p.name} (v${p.version}, ${p.rules.length} rules)`)));
  const active = policies.find(p => p.name === config.policy);
  $("#rules-list").replaceChildren(...(active ? active.rules : []).map(r => el("li", {}, r.description || r.id)));
  if (config.mode !== "agent") $("#answer-box").open = true;
}

// Save sends only the fields the user changed: one left alone keeps following the server's config file.
function changedConfig() {
  const body = {};
  const generator = $("#cfg-generator").value.trim() || null;
  if (generator !== (config.generator || null)) body.generator = generator;
  if ($("#cfg-policy").value !== config.policy) body.policy = $("#cfg-policy").value;
  if (Number($("#cfg-max").value) !== config.max_iterations) body.max_iterations = Number($("#cfg-max").value);
  return body;
}

$("#cfg-save").addEventListener("click", async () => {
  const body = changedConfig();
  if (!Object.keys(body).length) { $("#cfg-status").textContent = "Nothing changed."; return; }
  try {
    await api("POST", "/api/config", body);
    $("#cfg-status").textContent = `Saved ${Object.keys(body).join(", ")}; new questions use it.`;
    await loadConfig();
  } catch (e) { $("#cfg-status").textContent = e.message; }
});

// -- asking -------------------------------------------------------------------------------------
$("#ask-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const prompt = $("#prompt").value.trim();
  const answer = $("#answer").value.trim();
  if (!prompt) return;
  const msg = addMessage(null, prompt);
  try {
    const r = await api("POST", "/api/chat", answer ? {prompt, answer} : {prompt});
    threadTokens.set(r.thread_id, r.token);
    localStorage.setItem(THREADS_KEY, JSON.stringify(Object.fromEntries(threadTokens)));
    $("#prompt").value = ""; $("#answer").value = "";
    track(r.thread_id, msg);
  } catch (e) {
    msg.bot.replaceChildren(el("div", {class: "error", "data-testid": "error"}, e.message));
  }
});

// Enter sends, Shift+Enter adds a line (in both boxes of the form).
for (const box of ["#prompt", "#answer"]) {
  $(box).addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("#ask-form").requestSubmit(); }
  });
}

function addMessage(threadId, prompt) {
  const user = el("div", {class: "msg user"}, el("div", {class: "who"}, "You"), prompt);
  const bot = el("div", {class: "msg bot", "data-thread": threadId || ""},
                 el("div", {class: "status"}, "Sending…"));
  $("#messages").append(user, bot);
  return {user, bot};
}

function track(threadId, msg) {
  msg.bot.dataset.thread = threadId;
  shown.set(threadId, msg.bot);
  poll(threadId);
}

async function poll(threadId) {
  let t;
  try { t = (await api("GET", `/api/thread/${threadId}`)).thread; }
  catch (e) { setTimeout(() => poll(threadId), 1000); return; }
  render(t);
  if (t.status === "PROCESSING") setTimeout(() => poll(threadId), 400);
  else refreshThreads();
}

// -- one thread ---------------------------------------------------------------------------------
function render(t) {
  const box = shown.get(t.id);
  if (!box) return;
  const user = box.previousElementSibling;  // a thread opened by its id shows its own question
  if (user && user.dataset.placeholder) { user.replaceChildren(el("div", {class: "who"}, "You"), t.prompt); delete user.dataset.placeholder; }
  const parts = [el("div", {class: "who"}, `Assistant · thread ${t.id}`)];
  if (t.status === "PROCESSING") {
    parts.push(el("div", {class: "status", "data-testid": "status"}, `Working: ${t.state} (iteration ${t.iterations.length}, rewrites ${t.rewrites})`));
  } else if (t.status === "AWAITING_INPUT") {
    parts.push(el("div", {class: "status", "data-testid": "status"}, "Waiting for your answers"));
    parts.push(questionForm(t));
  } else if (t.status === "ERROR") {
    parts.push(el("div", {}, el("span", {class: "badge ERROR", "data-testid": "badge"}, "ERROR")),
               el("div", {class: "error"}, t.error || "failed"));
  } else {
    parts.push(el("div", {}, el("span", {class: `badge ${t.badge_style || t.badge}`, "data-testid": "badge"}, badgeText(t)),
                  el("span", {class: "small"}, `${t.exit} · ${t.rewrites} rewrite(s) · policy ${t.policy}`)));
    parts.push(...answerWithFootnotes(t));
    if (t.warning) parts.push(el("div", {class: "warning", "data-testid": "warning"}, t.warning));
    if (t.clarifications.length) {
      parts.push(el("div", {class: "small", "data-testid": "clarifications"}, "Your clarifications: ",
        t.clarifications.map(c => `${c.question} → ${c.skipped ? "(" + c.reason + ")" : c.answer}`).join("; ")));
    }
  }
  const actions = el("div", {class: "actions"},
    el("button", {class: "secondary debug-toggle", "data-testid": "debug-toggle",
                  onclick: () => { open.has(t.id) ? open.delete(t.id) : open.add(t.id); render(t); }},
       open.has(t.id) ? "Hide debug" : "Debug"));
  const proved = t.status === "COMPLETED" && served(t).findings.some(f => f.result === "VALID");
  if (proved) {
    actions.append(el("button", {class: "secondary proof-toggle", "data-testid": "proof-toggle",
                                 onclick: () => { proofOpen.has(t.id) ? proofOpen.delete(t.id) : proofOpen.add(t.id); render(t); }},
                      proofOpen.has(t.id) ? "Hide proof" : "Proof"));
  }
  parts.push(actions);
  if (proved && proofOpen.has(t.id)) parts.push(proof(t));
  if (open.has(t.id)) parts.push(debugPanel(t));
  box.replaceChildren(...parts);
}

// The badge is the thread's own string (a label when the thread carries one), never a list kept here.
function badgeText(t) {
  return t.badge_label || String(t.badge || t.status).replaceAll("_", " ");
}

// The iteration whose answer is served: the thread's ``served`` index, else the latest with its answer.
function served(t) {
  const its = t.iterations || [];
  if (Number.isInteger(t.served) && its[t.served]) return its[t.served];
  return [...its].reverse().find(it => it.answer === t.answer) || its[its.length - 1] || {findings: []};
}

// What the checks said of each cited id in the served answer: fabricated (not in the corpus) or unsupported.
function citationProblems(t) {
  const problems = new Map();
  for (const f of served(t).findings || []) {
    const c = f.citation;
    if (!c || !["fabricated", "unsupported"].includes(c.kind)) continue;
    for (const id of String(c.passage_id || "").split(",").filter(Boolean)) {
      problems.set(id, c.kind === "fabricated" ? "not in the corpus (fabricated)" : `does not support “${c.sentence}”`);
    }
  }
  return problems;
}

// The served answer with each [id] as a numbered footnote: the passage's title and text, or a warning mark.
function answerWithFootnotes(t) {
  const text = t.final_response || "(no answer)";
  const it = served(t);
  const passages = new Map([...(t.cited || []), ...(it.cited || [])].map(p => [p.id, p]));
  const problems = citationProblems(t);
  const numbers = new Map();
  const nodes = [];
  let at = 0;
  for (const m of text.matchAll(CITE_RE)) {
    nodes.push(text.slice(at, m.index).replace(/\s+$/, ""));
    if (!numbers.has(m[1])) numbers.set(m[1], numbers.size + 1);
    const n = numbers.get(m[1]);
    const bad = problems.has(m[1]) || !passages.has(m[1]);
    nodes.push(el("sup", {class: bad ? "cite bad" : "cite"}, el("a", {href: `#fn-${t.id}-${n}`, title: m[1]}, `${bad ? "⚠" : ""}${n}`)));
    at = m.index + m[0].length;
  }
  nodes.push(text.slice(at));
  const out = [el("div", {class: "final", "data-testid": "final"}, ...nodes)];
  if (numbers.size) {
    out.push(el("ol", {class: "footnotes", "data-testid": "footnotes"}, ...[...numbers].map(([id, n]) => {
      const p = passages.get(id);
      const problem = problems.get(id) || (p ? null : "not in the corpus");
      return el("li", {id: `fn-${t.id}-${n}`, class: problem ? "bad" : "", "data-testid": "footnote"},
                problem ? el("span", {class: "warn-mark", "data-testid": "citation-warning", title: problem}, "⚠ ") : "",
                p ? el("strong", {}, p.title) : el("strong", {}, id), p ? ` — ${p.text}` : "",
                problem ? el("span", {class: "small"}, ` (${problem}; id ${id})`) : el("span", {class: "small"}, ` [${id}]`));
    })));
  }
  return out;
}

function questionForm(t) {
  const inputs = t.pending_questions.map((q, i) => el("label", {}, q, el("input", {type: "text", "data-q": i})));
  const form = el("div", {class: "questions", "data-testid": "questions"}, ...inputs);
  const send = async (skipped) => {
    const answers = [...form.querySelectorAll("input")].map(x => x.value.trim() || null);
    try { await api("POST", `/api/thread/${t.id}/answer`, {answers, skipped}); poll(t.id); }
    catch (e) { form.append(el("div", {class: "error"}, e.message)); }
  };
  form.append(el("div", {class: "actions"},
    el("button", {"data-testid": "answer-submit", onclick: () => send(false)}, "Submit answers"),
    el("button", {class: "secondary", "data-testid": "answer-skip", onclick: () => send(true)}, "Skip")));
  return form;
}

function proof(t) {
  const valid = served(t).findings.filter(f => f.result === "VALID");
  const items = valid.map(f => el("div", {class: "iteration"},
    el("div", {}, "Given: ", statements(f.translation && f.translation.premises)),
    el("div", {}, "Claimed: ", statements(f.translation && f.translation.claims)),
    el("div", {}, "Because:"),
    el("ul", {}, ...f.supporting_rules.map(id => el("li", {}, (f.rules && f.rules[id]) || id)))));
  return el("div", {class: "proof", "data-testid": "proof"},
            el("strong", {}, "Why this answer holds"), ...items);
}

function statements(list) {
  return (list || []).map(s => s.natural_language ? `${s.natural_language} (${s.logic})` : s.logic).join("; ") || "—";
}

function scenario(s) {
  return s ? Object.entries(s).map(([k, v]) => `${k} = ${v}`).join(", ") : "—";
}

function findingsTable(findings) {
  if (!findings || !findings.length) return el("div", {class: "small"}, "no findings");
  const rows = findings.map(f => el("tr", {},
    el("td", {}, el("span", {class: `badge ${f.result}`}, f.result), f.citation ? ` citation: ${f.citation.kind}` : ""),
    el("td", {}, statements(f.translation && f.translation.premises)),
    el("td", {}, statements(f.translation && f.translation.claims),
       f.translation && f.translation.untranslated_claims.length ? el("div", {class: "small"}, "untranslated: " + f.translation.untranslated_claims.join(" | ")) : ""),
    el("td", {}, [...f.supporting_rules.map(id => `+ ${(f.rules && f.rules[id]) || id}`),
                  ...f.contradicting_rules.map(id => `− ${(f.rules && f.rules[id]) || id}`)].join("\n") || "—",
       f.citation ? el("div", {class: "small"}, `${f.citation.sentence} [${f.citation.passage_id}] ${f.citation.detail}`) : ""),
    el("td", {}, f.claims_true_scenario ? el("div", {}, "true: " + scenario(f.claims_true_scenario)) : "",
       f.claims_false_scenario ? el("div", {}, "false: " + scenario(f.claims_false_scenario)) : "",
       ...readings(f),
       f.detail ? el("div", {class: "small"}, f.detail) : "")));
  return el("table", {class: "findings"},
            el("tr", {}, ...["result", "premises", "claims", "rules", "scenarios"].map(h => el("th", {}, h))), ...rows);
}

// A TRANSLATION_AMBIGUOUS finding's competing readings (what each translation says), then the scenarios
// the checker found where one reading holds and the other does not.
function readings(f) {
  const options = (f.options || []).map((opt, i) => el("div", {class: "reading", "data-testid": "reading"},
    el("strong", {}, `reading ${i + 1}: `), opt.map(tr => `${statements(tr.premises)} ⇒ ${statements(tr.claims)}`).join(" / ")));
  const differ = (f.difference_scenarios || []).map(s => el("div", {class: "small"}, "the readings differ in: " + scenario(s)));
  return [...options, ...differ];
}

function debugPanel(t) {
  const its = t.iterations.map(it => el("div", {class: "iteration", "data-testid": "iteration"},
    el("h4", {}, `#${it.index} ${it.type}` + (it.template ? ` · ${it.template}` : "") + (it.result ? ` → ${it.result}` : "")
                + (it.decision ? ` · decision ${it.decision.kind}${it.decision.parsed ? "" : " (unparsed)"}` : "")),
    it.prompt ? el("details", {}, el("summary", {}, "prompt sent"), el("pre", {}, it.prompt)) : "",
    el("div", {}, "answer: ", el("code", {}, it.answer)),
    it.raw ? el("div", {}, "raw model reply:", el("pre", {class: "raw", "data-testid": "raw-reply"}, it.raw)) : "",
    it.search ? el("div", {class: "small"}, `searches: ${(it.search.queries || []).join(" | ") || "none"} · cited: ${(it.search.citations || []).join(", ") || "none"} · stop: ${it.search.stop_reason}`) : "",
    it.search && (it.search.returned || []).length ? el("details", {"data-testid": "returned"},
      el("summary", {}, `passages its search returned (${it.search.returned.length})`),
      el("ul", {}, ...it.search.returned.map(p => el("li", {class: "small"}, el("code", {}, `[${p.id}]`), ` ${p.title}: ${p.text}`)))) : "",
    (it.trace_premises || []).length ? el("div", {class: "small"}, "premises from the search trace: " + it.trace_premises.map(i => `[${i}]`).join(" ")) : "",
    (it.hedged || []).length ? el("div", {class: "small", "data-testid": "hedged"}, "not taken as facts (they qualify what they state): " + it.hedged.map(h => `“${h}”`).join(" ")) : "",
    it.premises_text ? el("details", {}, el("summary", {}, "premise text (question, clarifications, cited passages)"), el("pre", {}, it.premises_text)) : "",
    findingsTable(it.findings),
    el("div", {class: "small"}, `generate ${it.generate_s.toFixed(3)}s · validate ${it.validate_s.toFixed(3)}s`)));
  const clar = t.clarifications.map(c => el("li", {}, `${c.question} → ${c.skipped ? "(" + c.reason + ")" : c.answer}`));
  return el("div", {class: "debug", "data-testid": "debug"},
    el("strong", {}, `Debug · state ${t.state} · ${t.iterations.length} iteration(s)`),
    clar.length ? el("div", {}, "Clarifications:", el("ul", {}, ...clar)) : "", ...its,
    el("details", {}, el("summary", {}, "thread log"), el("pre", {}, t.events.map(e => `${new Date(e.time * 1000).toISOString()} ${e.state} ${e.event}`).join("\n"))));
}

// -- threads list -------------------------------------------------------------------------------
async function refreshThreads() {
  let list;
  try { list = (await api("GET", "/api/threads?limit=30")).threads; }
  catch (e) { $("#thread-list").replaceChildren(el("li", {class: "small"}, "The thread list needs a reviewer's or the admin token.")); return; }
  $("#thread-list").replaceChildren(...list.map(t => el("li", {
      onclick: () => openThread(t.id, t.prompt)},
    el("span", {class: `badge ${t.badge_style || t.badge || ""}`}, badgeText(t)), t.prompt.slice(0, 70))));
  refreshReviewCount();
}

// -- reviews ------------------------------------------------------------------------------------
async function refreshReviewCount() {
  let pending;
  try { pending = (await api("GET", "/api/reviews?status=pending")).reviews; } catch (e) { return; }
  $("#review-count").textContent = pending.length ? `(${pending.length})` : "";
}

async function loadReviews() {
  let reviews;
  try { reviews = (await api("GET", "/api/reviews")).reviews; }
  catch (e) { $("#reviews").replaceChildren(el("p", {class: "error"}, e.message)); return; }
  if (!reviews.length) { $("#reviews").replaceChildren(el("p", {class: "small"}, "Nothing to review.")); return; }
  $("#reviews").replaceChildren(...reviews.reverse().map(r => {
    const verdict = el("select", {}, el("option", {value: "approve"}, "approve"), el("option", {value: "reject"}, "reject"));
    const correction = el("textarea", {rows: 2, placeholder: "A note for the corrections list (optional; quoted to the model as data)"});
    const override = el("input", {type: "checkbox", "data-testid": "review-override"});
    const reason = el("input", {type: "text", placeholder: "reason (needed with override)", "data-testid": "review-reason"});
    const problem = el("div", {class: "error", "data-testid": "review-error"});
    const th = r.thread || {};
    const body = [el("div", {}, el("span", {class: "badge SATISFIABLE"}, r.reason), ` #${r.id} · ${r.status} · `,
                     r.thread_id ? el("a", {href: `#thread/${r.thread_id}`, "data-testid": "review-thread",
                                            onclick: (ev) => { ev.preventDefault(); openThread(r.thread_id, r.data.question || ""); }},
                                      `open thread ${r.thread_id}`) : "no thread"),
                  el("div", {}, "Question: ", r.data.question || ""),
                  el("div", {"data-testid": "review-finding"}, "Finding: ", reviewFinding(r)),
                  el("div", {"data-testid": "review-answer"}, "Answer served: ",
                     th.badge ? el("span", {class: `badge ${th.badge_style || th.badge}`}, badgeText(th)) : "",
                     el("code", {}, th.final_response || r.data.answer || "(none)")),
                  r.data.sentence && r.data.sentence !== (th.final_response || r.data.answer)
                    ? el("div", {}, "Sentence: ", el("code", {}, r.data.sentence)) : "",
                  r.data.passage_ids ? el("div", {class: "small"}, "cites " + r.data.passage_ids.join(", ")) : ""];
    if (r.status === "pending") {
      body.push(el("div", {class: "actions"}, verdict, el("button", {"data-testid": "review-submit", onclick: async () => {
        try {
          await api("POST", `/api/reviews/${r.id}`, {verdict: verdict.value, correction: correction.value.trim() || null,
                                                     override: override.checked, reason: reason.value.trim() || null});
        } catch (e) { problem.textContent = e.message; return; }
        loadReviews(); refreshReviewCount(); }}, "Decide"),
        el("label", {class: "small"}, override, " override (the corpus supports it)"), reason), correction, problem);
    } else {
      body.push(el("div", {class: "small"}, `verdict ${r.verdict}` + (r.reviewer ? ` by ${r.reviewer}` : "")
                                            + (r.correction ? ` · correction: ${r.correction}` : "")));
    }
    return el("div", {class: "review"}, ...body);
  }));
}

// What the checker found that put the item in the queue.
function reviewFinding(r) {
  const d = r.data;
  if (r.reason === "max_iterations") return `${d.result || "not valid"} after ${d.rewrites ?? "?"} rewrite(s)`;
  return [`citation ${r.reason}`, d.second_judge ? `second judge: ${d.second_judge}` : "", d.detail || ""].filter(Boolean).join(" · ");
}

function showTab(name) {
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("active", t.dataset.tab === name));
  $("#chat-view").classList.toggle("hidden", name !== "chat");
  $("#reviews-view").classList.toggle("hidden", name !== "reviews");
  if (name === "reviews") loadReviews();
}

// Show one thread in the chat view (from the thread list, a review item or a #thread/<id> link).
function openThread(id, prompt) {
  showTab("chat");
  if (!shown.has(id)) {
    const msg = addMessage(id, prompt || `thread ${id}`);
    if (!prompt) msg.user.dataset.placeholder = "1";
    track(id, msg);
  }
  history.replaceState(null, "", `#thread/${id}`);
  shown.get(id).scrollIntoView({behavior: "smooth"});
}

for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
const linked = location.hash.match(/^#thread\/([A-Za-z0-9]+)$/);
if (linked) openThread(linked[1]);

showToken();
loadConfig().then(refreshThreads).catch(e => { $("#mode").textContent = e.message; });
