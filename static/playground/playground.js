// Playground: chat with a served model; tokens stream over the multiplexing WebSocket (/v1/ws).
// Protocol: docs/websocket.md. No framework and no CDN: everything is served by the project.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const state = { socket: null, apiKey: "", history: [], current: null, nextId: 1 };

  function setStatus(text, kind) {
    $("status").textContent = text;
    $("status").dataset.state = kind;
  }

  function showError(message) {
    $("error").textContent = message || "";
  }

  function addMessage(role, text) {
    const item = document.createElement("li");
    item.className = role;
    item.dataset.role = role;
    const body = document.createElement("span");
    body.className = "content";
    body.textContent = text;
    item.appendChild(body);
    $("messages").appendChild(item);
    item.scrollIntoView({ block: "end" });
    return item;
  }

  function modelOption(model) {
    const option = document.createElement("option");
    option.value = model.id;
    option.textContent = model.parent ? `${model.id} (LoRA on ${model.parent})` : model.id;
    if (model.parent) option.dataset.parent = model.parent;
    return option;
  }

  // Each LoRA adapter right after its base model; one whose base this key may not use
  // (a grant can name the adapter alone) at the end.
  function showModels(models) {
    const chat = models.filter((m) => m.kind !== "embedding");
    const bases = chat.filter((m) => !m.parent);
    const baseIds = new Set(bases.map((m) => m.id));
    const options = [];
    for (const base of bases) {
      options.push(modelOption(base));
      for (const adapter of chat.filter((m) => m.parent === base.id)) {
        options.push(modelOption(adapter));
      }
    }
    for (const adapter of chat.filter((m) => m.parent && !baseIds.has(m.parent))) {
      options.push(modelOption(adapter));
    }
    const select = $("model");
    const selected = select.value;
    select.replaceChildren(...options);
    if (chat.some((m) => m.id === selected)) select.value = selected;
  }

  function connect(event) {
    event.preventDefault();
    state.apiKey = $("api-key").value.trim();
    sessionStorage.setItem("playground-api-key", state.apiKey);
    if (state.socket) state.socket.close();
    showError("");
    setStatus("connecting", "disconnected");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/v1/ws`);
    state.socket = socket;
    // Without a key, a staff session cookie may authenticate the handshake itself.
    socket.onopen = () => {
      if (state.apiKey) socket.send(JSON.stringify({ type: "auth", api_key: state.apiKey }));
    };
    socket.onmessage = (message) => onMessage(JSON.parse(message.data));
    socket.onclose = () => {
      if (state.socket === socket) {
        setStatus("disconnected", "disconnected");
        $("send").disabled = true;
        finishGeneration();
      }
    };
  }

  function onMessage(message) {
    if (message.type === "auth.ok") {
      setStatus(`connected (${message.tenant})`, "connected");
      $("send").disabled = !!state.current;
      state.socket.send(JSON.stringify({ type: "models" }));
      return;
    }
    if (message.type === "models") {
      showModels(message.data);
      return;
    }
    const current = state.current;
    if (message.type === "error") {
      showError(message.error.message);
      if (message.id === null && !current) setStatus("not authenticated", "error");
      if (current && message.id === current.id) finishGeneration();
      return;
    }
    if (!current || message.id !== current.id) return;
    if (message.type === "chunk") {
      const chunk = message.data;
      if (chunk.usage) {
        $("usage").textContent =
          `prompt ${chunk.usage.prompt_tokens} · completion ${chunk.usage.completion_tokens} tokens`;
      }
      for (const choice of chunk.choices) {
        if (choice.delta && choice.delta.content) {
          current.text += choice.delta.content;
          current.deltas += 1;
          current.body.textContent = current.text;
          current.item.dataset.deltas = String(current.deltas);
          current.item.scrollIntoView({ block: "end" });
        }
        if (choice.finish_reason) current.finishReason = choice.finish_reason;
      }
    } else if (message.type === "done") {
      current.finishReason = message.cancelled ? "cancelled" : current.finishReason;
      finishGeneration();
    }
  }

  function finishGeneration() {
    const current = state.current;
    if (!current) return;
    current.item.classList.remove("streaming");
    current.item.dataset.finish = current.finishReason || "error";
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = `${current.deltas} chunks · ${current.finishReason || "error"}`;
    current.item.appendChild(meta);
    state.history.push({ role: "assistant", content: current.text });
    state.current = null;
    $("stop-button").disabled = true;
    $("send").disabled = !state.socket || state.socket.readyState !== WebSocket.OPEN;
  }

  function numberField(id) {
    const raw = $(id).value.trim();
    return raw === "" ? undefined : Number(raw);
  }

  function send(event) {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || state.current || !state.socket) return;
    showError("");
    $("prompt").value = "";
    addMessage("user", text);
    state.history.push({ role: "user", content: text });
    const messages = [];
    const system = $("system").value.trim();
    if (system) messages.push({ role: "system", content: system });
    messages.push(...state.history);
    const stop = $("stop").value.split(",").map((s) => s.trim()).filter(Boolean);
    const body = {
      model: $("model").value,
      messages,
      temperature: numberField("temperature"),
      top_p: numberField("top_p"),
      top_k: numberField("top_k"),
      max_tokens: numberField("max_tokens"),
      seed: numberField("seed"),
      stream_options: { include_usage: true },
    };
    if (stop.length) body.stop = stop;
    const id = `gen-${state.nextId++}`;
    const item = addMessage("assistant", "");
    item.classList.add("streaming");
    item.dataset.deltas = "0";
    state.current = { id, item, body: item.querySelector(".content"), text: "", deltas: 0 };
    state.socket.send(JSON.stringify({ type: "chat.completions", id, body }));
    $("send").disabled = true;
    $("stop-button").disabled = false;
  }

  function stop() {
    if (state.current && state.socket) {
      state.socket.send(JSON.stringify({ type: "cancel", id: state.current.id }));
    }
  }

  $("auth-form").addEventListener("submit", connect);
  $("composer").addEventListener("submit", send);
  $("stop-button").addEventListener("click", stop);
  $("clear").addEventListener("click", () => {
    state.history = [];
    $("messages").replaceChildren();
    $("usage").textContent = "";
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("api-key").value = sessionStorage.getItem("playground-api-key") || "";
  // On a phone the conversation comes first: the settings start folded.
  if (window.matchMedia("(max-width: 720px)").matches) $("more-settings").open = false;
})();
