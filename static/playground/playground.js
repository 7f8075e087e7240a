// Playground: chat with a served model; tokens stream over the multiplexing WebSocket (/v1/ws).
// Protocol: docs/websocket.md. No framework and no CDN: everything is served by the project.
//
// The conversation is a list of turns, each a user message and one reply per lane ("a": the
// model, "b": the model it is compared with, when one is chosen). A lane's history is the
// turns whose replies finished; a failed reply, and its user message, are never sent to the
// model again. Turns and settings live in localStorage, so a reload keeps them and reconnects.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = "playground-v2";
  const SETTINGS = ["model", "compare", "system", "temperature", "top_p", "top_k", "max_tokens", "seed", "stop"];
  const AUTH_TIMEOUT_MS = 10000; // a refused key is answered at once; this is for no answer
  const state = {
    socket: null,
    apiKey: "",
    authed: false,
    turns: [], // {user, failed, replies: {lane: {model, text, finish, error, stats}}}
    running: new Map(), // generation id -> {turn, lane, reply, node, started, firstAt}
    nextId: 1,
    retryDelay: 1000,
    retryTimer: null,
    authTimer: null,
  };

  // --- status, errors, persistence ---------------------------------------------------------

  function setStatus(text, kind) {
    $("status").textContent = text;
    $("status").dataset.state = kind;
  }

  function showError(message) {
    $("error").textContent = message || "";
  }

  function save() {
    const settings = Object.fromEntries(SETTINGS.map((id) => [id, $(id).value]));
    const turns = state.turns.map((turn) => ({
      ...turn,
      replies: Object.fromEntries(
        Object.entries(turn.replies).map(([lane, reply]) => [
          lane,
          reply.finish ? reply : { ...reply, finish: "interrupted", error: "the page was reloaded" },
        ]),
      ),
    }));
    try {
      localStorage.setItem(STORE, JSON.stringify({ settings, turns }));
    } catch (error) {
      /* storage full or disabled: the conversation just is not kept */
    }
  }

  function load() {
    let saved = null;
    try {
      saved = JSON.parse(localStorage.getItem(STORE) || "null");
    } catch (error) {
      saved = null;
    }
    if (!saved) return;
    for (const id of SETTINGS) {
      if (saved.settings && saved.settings[id] !== undefined && id !== "model" && id !== "compare") {
        $(id).value = saved.settings[id];
      }
    }
    state.savedModels = saved.settings || {};
    state.turns = (saved.turns || []).map((turn) => {
      for (const reply of Object.values(turn.replies)) {
        if (reply.finish === "interrupted") turn.failed = true;
      }
      return turn;
    });
  }

  // --- models -----------------------------------------------------------------------------

  function modelOption(model) {
    const option = document.createElement("option");
    option.value = model.id;
    option.textContent = model.parent ? `${model.id} (LoRA on ${model.parent})` : model.id;
    if (model.parent) option.dataset.parent = model.parent;
    return option;
  }

  // Each LoRA adapter right after its base model; one whose base this key may not use
  // (a grant can name the adapter alone) at the end.
  function modelOptions(models) {
    const chat = models.filter((m) => m.kind !== "embedding");
    const bases = chat.filter((m) => !m.parent);
    const baseIds = new Set(bases.map((m) => m.id));
    const ordered = [];
    for (const base of bases) ordered.push(base, ...chat.filter((m) => m.parent === base.id));
    ordered.push(...chat.filter((m) => m.parent && !baseIds.has(m.parent)));
    return ordered;
  }

  function showModels(models) {
    const ordered = modelOptions(models);
    const ids = new Set(ordered.map((m) => m.id));
    const remembered = state.savedModels || {};
    for (const [id, withNone] of [["model", false], ["compare", true]]) {
      const select = $(id);
      const wanted = select.value || remembered[id] || "";
      const options = ordered.map(modelOption);
      if (withNone) {
        const none = document.createElement("option");
        none.value = "";
        none.textContent = "nothing (one model)";
        options.unshift(none);
      }
      select.replaceChildren(...options);
      if (ids.has(wanted)) select.value = wanted;
    }
    state.savedModels = null;
  }

  // --- connection ---------------------------------------------------------------------------

  function connect(event) {
    if (event) event.preventDefault();
    state.apiKey = $("api-key").value.trim();
    sessionStorage.setItem("playground-api-key", state.apiKey);
    clearTimeout(state.retryTimer);
    open();
  }

  function open() {
    if (state.socket) {
      const old = state.socket;
      state.socket = null;
      old.close();
    }
    state.authed = false;
    showError("");
    setStatus("connecting", "disconnected");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/v1/ws`);
    state.socket = socket;
    socket.onopen = () => {
      // With a key, authenticate; without one, a staff session cookie may have signed the
      // handshake in already, and asking for the models either lists them or says why not.
      if (state.apiKey) socket.send(JSON.stringify({ type: "auth", api_key: state.apiKey }));
      else socket.send(JSON.stringify({ type: "models" }));
      clearTimeout(state.authTimer);
      state.authTimer = setTimeout(() => {
        if (state.socket === socket && !state.authed) {
          refused("The platform did not answer the sign-in in time; check the key and Connect again.");
        }
      }, AUTH_TIMEOUT_MS);
    };
    socket.onmessage = (message) => onMessage(JSON.parse(message.data));
    socket.onclose = (event) => {
      if (state.socket !== socket) return;
      state.socket = null;
      $("send").disabled = true;
      for (const id of [...state.running.keys()]) finish(id, "error", "the connection was lost");
      // A refused credential stays refused; anything else (a restart, a network drop) is
      // retried with a growing pause.
      if (event.code === 4401 || $("status").dataset.state === "error") return;
      const delay = state.retryDelay;
      state.retryDelay = Math.min(state.retryDelay * 2, 15000);
      setStatus(`disconnected: reconnecting in ${Math.round(delay / 1000)} s`, "disconnected");
      state.retryTimer = setTimeout(open, delay);
    };
  }

  function refused(message) {
    clearTimeout(state.authTimer);
    setStatus("not authenticated", "error");
    showError(message);
    $("send").disabled = true;
  }

  function onMessage(message) {
    if (message.type === "auth.ok") {
      clearTimeout(state.authTimer);
      state.authed = true;
      state.retryDelay = 1000;
      setStatus(`connected (${message.tenant})`, "connected");
      showError("");
      $("send").disabled = state.running.size > 0;
      state.socket.send(JSON.stringify({ type: "models" }));
      return;
    }
    if (message.type === "models") {
      showModels(message.data);
      return;
    }
    if (message.type === "error") {
      if (message.id === null || message.id === undefined) {
        if (!state.authed) {
          refused(
            state.apiKey
              ? `The API key was refused: ${message.error.message}`
              : "No API key: paste one above and Connect, or sign in to the admin and reload.",
          );
        } else showError(message.error.message);
        return;
      }
      if (state.running.has(message.id)) finish(message.id, "error", message.error.message);
      return;
    }
    const run = state.running.get(message.id);
    if (!run) return;
    if (message.type === "chunk") onChunk(run, message.data);
    else if (message.type === "done") {
      finish(message.id, message.cancelled ? "cancelled" : run.reply.finishReason || "stop");
    }
  }

  // --- generations --------------------------------------------------------------------------

  function onChunk(run, chunk) {
    if (chunk.usage) run.reply.usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta && choice.delta.content) {
        if (run.firstAt === undefined) run.firstAt = performance.now();
        run.reply.text += choice.delta.content;
        run.reply.deltas = (run.reply.deltas || 0) + 1;
        run.node.dataset.deltas = String(run.reply.deltas);
        run.container.dataset.deltas = String(deltasOf(run.turn));
        paintText(run.node, run.reply.text);
      }
      if (choice.finish_reason) run.reply.finishReason = choice.finish_reason;
    }
    if (run.reply.usage) showUsage(run.reply.usage, "");
  }

  // Content chunks received, over the turn's replies (the tests watch tokens arrive by it).
  function deltasOf(turn) {
    return Object.values(turn.replies).reduce((sum, reply) => sum + (reply.deltas || 0), 0);
  }

  function showUsage(usage, note) {
    $("usage").textContent =
      `${note}prompt ${usage.prompt_tokens} · completion ${usage.completion_tokens} tokens`;
  }

  function finish(id, finishReason, error) {
    const run = state.running.get(id);
    if (!run) return;
    state.running.delete(id);
    const reply = run.reply;
    const ended = performance.now();
    reply.finish = finishReason;
    if (error) reply.error = error;
    const tokens = reply.usage ? reply.usage.completion_tokens : 0;
    const generating = run.firstAt === undefined ? 0 : (ended - run.firstAt) / 1000;
    reply.stats = {
      tokens,
      ttftMs: run.firstAt === undefined ? null : Math.round(run.firstAt - run.started),
      tokensPerSecond: tokens > 1 && generating > 0 ? (tokens - 1) / generating : null,
      seconds: (ended - run.started) / 1000,
    };
    delete reply.finishReason;
    if (finishReason === "error") {
      run.turn.failed = true; // neither this turn's message nor its replies are sent again
      showError(`${reply.model}: ${error}`);
      $("usage").textContent = reply.usage
        ? `failed after prompt ${reply.usage.prompt_tokens} · completion ${reply.usage.completion_tokens} tokens`
        : "failed: no usage reported";
    } else if (reply.usage) {
      showUsage(reply.usage, finishReason === "cancelled" ? "cancelled: " : "");
    } else {
      $("usage").textContent = finishReason === "cancelled" ? "cancelled before any token" : "";
    }
    renderConversation();
    save();
    if (state.running.size === 0) {
      $("stop-button").disabled = true;
      $("send").disabled = !state.authed;
    }
  }

  function numberField(id) {
    const raw = $(id).value.trim();
    return raw === "" ? undefined : Number(raw);
  }

  // The request body for one lane: the system prompt, then the lane's finished turns.
  function requestBody(model, lane, turnIndex) {
    const messages = [];
    const system = $("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    state.turns.slice(0, turnIndex).forEach((turn) => {
      const reply = turn.replies[lane] || turn.replies.a;
      if (turn.failed || !reply || reply.finish === "error") return;
      messages.push({ role: "user", content: turn.user }, { role: "assistant", content: reply.text });
    });
    messages.push({ role: "user", content: state.turns[turnIndex].user });
    const stop = $("stop").value.split(",").map((s) => s.trim()).filter(Boolean);
    const body = {
      model,
      messages,
      temperature: numberField("temperature"),
      top_p: numberField("top_p"),
      top_k: numberField("top_k"),
      max_tokens: numberField("max_tokens"),
      seed: numberField("seed"),
    };
    if (stop.length) body.stop = stop;
    return body;
  }

  function lanes() {
    const compare = $("compare").value;
    const result = [["a", $("model").value]];
    if (compare) result.push(["b", compare]);
    return result;
  }

  // Start the replies of turn ``index`` (a new turn, a regenerated one, an edited one).
  function generate(index) {
    const turn = state.turns[index];
    turn.failed = false;
    turn.replies = {};
    for (const [lane, model] of lanes()) turn.replies[lane] = { model, text: "", finish: null };
    renderConversation();
    for (const [lane, model] of lanes()) {
      const id = `gen-${state.nextId++}`;
      const body = {
        ...requestBody(model, lane, index),
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      };
      const container = $("messages").querySelector(`li.assistant[data-turn="${index}"]`);
      const node = container.querySelector(`.reply[data-lane="${lane}"]`);
      state.running.set(id, {
        turn,
        lane,
        reply: turn.replies[lane],
        node,
        container,
        started: performance.now(),
      });
      state.socket.send(JSON.stringify({ type: "chat.completions", id, body }));
    }
    $("usage").textContent = "";
    $("send").disabled = true;
    $("stop-button").disabled = false;
    save();
  }

  function canSend() {
    return state.authed && state.socket && state.socket.readyState === WebSocket.OPEN && state.running.size === 0;
  }

  function send(event) {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || !canSend()) return;
    showError("");
    $("prompt").value = "";
    state.turns.push({ user: text, failed: false, replies: {} });
    generate(state.turns.length - 1);
  }

  function stop() {
    if (!state.socket) return;
    for (const id of state.running.keys()) state.socket.send(JSON.stringify({ type: "cancel", id }));
  }

  // --- rendering ----------------------------------------------------------------------------

  function paintText(node, text) {
    const content = node.querySelector(".content");
    content.replaceChildren(window.renderMarkdown(text));
    node.scrollIntoView({ block: "end" });
  }

  function button(label, className, onClick) {
    const node = document.createElement("button");
    node.type = "button";
    node.className = className;
    node.textContent = label;
    node.addEventListener("click", onClick);
    return node;
  }

  function replyMeta(reply) {
    const parts = [];
    const stats = reply.stats || {};
    if (stats.tokens) parts.push(`${stats.tokens} tokens`);
    if (stats.ttftMs !== null && stats.ttftMs !== undefined) parts.push(`TTFT ${stats.ttftMs} ms`);
    if (stats.tokensPerSecond) parts.push(`${stats.tokensPerSecond.toFixed(1)} tok/s`);
    if (stats.seconds) parts.push(`${stats.seconds.toFixed(2)} s`);
    parts.push(reply.finish === "error" ? `error: ${reply.error}` : reply.finish);
    return parts.join(" · ");
  }

  function userItem(turn, index) {
    const item = document.createElement("li");
    item.className = "user";
    item.dataset.role = "user";
    item.dataset.turn = String(index);
    if (turn.failed) item.classList.add("failed");
    const content = document.createElement("span");
    content.className = "content";
    content.textContent = turn.user;
    item.append(content);
    const actions = document.createElement("span");
    actions.className = "actions";
    actions.append(button("Edit", "edit", () => startEdit(item, index)));
    item.append(actions);
    if (turn.failed) {
      const note = document.createElement("span");
      note.className = "meta";
      note.textContent = "not sent to the model again";
      item.append(note);
    }
    return item;
  }

  function replyNode(turn, index, lane, reply, last) {
    const node = document.createElement("div");
    node.className = "reply";
    node.dataset.lane = lane;
    node.dataset.deltas = String(reply.deltas || 0);
    if (Object.keys(turn.replies).length > 1) {
      const label = document.createElement("span");
      label.className = "lane-model";
      label.textContent = reply.model;
      node.append(label);
    }
    const content = document.createElement("div");
    content.className = "content";
    content.append(window.renderMarkdown(reply.text));
    node.append(content);
    if (reply.finish) {
      node.dataset.finish = reply.finish;
      const stats = reply.stats || {};
      node.dataset.tokens = String(stats.tokens || 0);
      if (stats.ttftMs !== null && stats.ttftMs !== undefined) node.dataset.ttftMs = String(stats.ttftMs);
      if (stats.tokensPerSecond) node.dataset.tokensPerSecond = stats.tokensPerSecond.toFixed(1);
      const meta = document.createElement("span");
      meta.className = "meta";
      meta.textContent = replyMeta(reply);
      node.append(meta);
      const actions = document.createElement("span");
      actions.className = "actions";
      actions.append(button("Copy", "copy", (event) => copyText(event.target, reply.text)));
      if (last) actions.append(button("Regenerate", "regenerate", () => canSend() && generate(index)));
      node.append(actions);
    }
    return node;
  }

  function assistantItem(turn, index) {
    const item = document.createElement("li");
    item.className = "assistant";
    item.dataset.role = "assistant";
    item.dataset.turn = String(index);
    item.dataset.deltas = String(deltasOf(turn));
    const entries = Object.entries(turn.replies);
    if (entries.length > 1) item.classList.add("compare");
    const last = index === state.turns.length - 1;
    for (const [lane, reply] of entries) item.append(replyNode(turn, index, lane, reply, last));
    const finishes = entries.map(([, reply]) => reply.finish);
    if (finishes.every(Boolean)) item.dataset.finish = finishes.join(" ");
    else item.classList.add("streaming");
    return item;
  }

  function renderConversation() {
    const items = [];
    state.turns.forEach((turn, index) => {
      items.push(userItem(turn, index));
      if (Object.keys(turn.replies).length) items.push(assistantItem(turn, index));
    });
    // Replies still streaming keep their live nodes (the generation writes into them).
    $("messages").replaceChildren(...items);
    for (const run of state.running.values()) {
      const index = state.turns.indexOf(run.turn);
      run.container = $("messages").querySelector(`li.assistant[data-turn="${index}"]`);
      run.node = run.container.querySelector(`.reply[data-lane="${run.lane}"]`);
    }
    const lastItem = items[items.length - 1];
    if (lastItem) lastItem.scrollIntoView({ block: "end" });
  }

  // Edit a user message in place; sending it drops the turns after it and asks again.
  function startEdit(item, index) {
    if (!canSend()) return;
    const editor = document.createElement("textarea");
    editor.className = "editor";
    editor.value = state.turns[index].user;
    editor.rows = 3;
    const actions = document.createElement("span");
    actions.className = "actions";
    actions.append(
      button("Send", "edit-send", () => {
        const text = editor.value.trim();
        if (!text || !canSend()) return;
        state.turns = state.turns.slice(0, index + 1);
        state.turns[index].user = text;
        generate(index);
      }),
      button("Cancel", "edit-cancel", renderConversation),
    );
    item.replaceChildren(editor, actions);
    editor.focus();
  }

  async function copyText(target, text) {
    const label = target.textContent;
    try {
      await navigator.clipboard.writeText(text);
      target.textContent = "Copied";
    } catch (error) {
      // No clipboard (plain HTTP, or permission refused): a dialog holding the text selected.
      window.prompt("Copy the text:", text);
    }
    setTimeout(() => {
      target.textContent = label;
    }, 1500);
  }

  // --- "View code": the SDK call for the current settings and conversation --------------------

  function pythonLiteral(value) {
    // JSON of strings, numbers and lists of them reads as Python, but for these three.
    return JSON.stringify(value, null, 4).replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None");
  }

  function codeSnippet() {
    const draft = $("prompt").value.trim() || "Hello!";
    state.turns.push({ user: draft, failed: false, replies: {} });
    const body = requestBody($("model").value, "a", state.turns.length - 1);
    state.turns.pop();
    const args = Object.entries(body)
      .filter(([, value]) => value !== undefined)
      .map(([key, value]) => `    ${key}=${pythonLiteral(value).replace(/\n/g, "\n    ")},`);
    return [
      "import os",
      "",
      "from openai import OpenAI",
      "",
      `client = OpenAI(base_url="${location.origin}/v1", api_key=os.environ["PLATFORM_API_KEY"])`,
      "stream = client.chat.completions.create(",
      ...args,
      "    stream=True,",
      ")",
      "for chunk in stream:",
      "    if chunk.choices and chunk.choices[0].delta.content:",
      '        print(chunk.choices[0].delta.content, end="", flush=True)',
      "print()",
    ].join("\n");
  }

  function viewCode() {
    $("code-snippet").textContent = codeSnippet();
    $("code-dialog").showModal();
  }

  // --- wiring -------------------------------------------------------------------------------

  $("auth-form").addEventListener("submit", connect);
  $("composer").addEventListener("submit", send);
  $("stop-button").addEventListener("click", stop);
  $("view-code").addEventListener("click", viewCode);
  $("copy-code-snippet").addEventListener("click", (event) => copyText(event.target, $("code-snippet").textContent));
  $("close-code").addEventListener("click", () => $("code-dialog").close());
  $("clear").addEventListener("click", () => {
    if (state.running.size) return;
    state.turns = [];
    renderConversation();
    $("usage").textContent = "";
    showError("");
    save();
  });
  $("messages").addEventListener("click", (event) => {
    const copy = event.target.closest("button.copy-code");
    if (copy) copyText(copy, copy.dataset.copyText);
  });
  for (const id of SETTINGS) $(id).addEventListener("change", save);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  // On a phone the conversation comes first: the settings start folded.
  if (window.matchMedia("(max-width: 720px)").matches) $("more-settings").open = false;

  $("api-key").value = sessionStorage.getItem("playground-api-key") || "";
  load();
  renderConversation();
  connect(); // with the remembered key, or the admin session's cookie
})();
