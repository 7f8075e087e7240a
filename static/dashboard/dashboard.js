/* The dashboard page: polls data.json, renders live engines and the three charts. */
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  const source = root.dataset.source;
  const interval = Number(root.dataset.intervalMs) || 2000;
  const MAX_POINTS = 150; // five minutes of live throughput at 2 s per poll
  const throughput = { labels: [], series: {} };

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function renderEngines(engines, redisError) {
    const body = root.querySelector("#engines tbody");
    body.replaceChildren();
    if (redisError || !engines.length) {
      // Redis unreadable: the engines are unknown, which is not the same as none being live.
      const row = body.insertRow();
      row.className = redisError ? "empty unknown" : "empty";
      const td = cell(row, redisError ||
        "No live engine. Start one with: python manage.py run_engine --model NAME");
      td.colSpan = 11;
      return;
    }
    for (const e of engines) {
      const row = body.insertRow();
      row.className = "engine";
      row.dataset.engineId = e.engine_id;
      cell(row, e.model).title = e.model;
      // The names an operator knows: the deployment and the node (or host) and process; the
      // engine id stays in the tooltip for matching logs.
      const where = cell(row, [e.deployment, e.node || e.hostname].filter(Boolean).join(" on ") +
        (e.pid ? " (pid " + e.pid + ")" : ""));
      where.className = "engine-where";
      where.title = "engine " + e.engine_id;
      const kv = cell(row, "", "num");
      const pct = Math.round((e.kv_cache_usage || 0) * 1000) / 10;
      const bar = document.createElement("span");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = Math.min(100, pct) + "%";
      bar.appendChild(fill);
      kv.append(bar, " " + pct + "%");
      cell(row, String(e.num_running), "num");
      cell(row, String(e.num_waiting), "num");
      cell(row, (e.tokens_per_s || 0).toFixed(1), "num");
      cell(row, Math.round((e.prefix_cache_hit_rate || 0) * 100) + "%", "num");
      cell(row, String(e.num_preemptions), "num");
      cell(row, String(e.num_handed_over || 0), "num");
      cell(row, (e.adapters || []).join(", ") || "–");
      cell(row, e.draining ? "draining" : "serving", e.draining ? "draining" : "");
    }
  }

  function seconds(value) {
    return value === null || value === undefined ? "–" : (value * 1000).toFixed(0) + " ms";
  }

  function renderTenants(tenants) {
    const body = root.querySelector("#tenants tbody");
    body.replaceChildren();
    if (!tenants.length) {
      const row = body.insertRow();
      row.className = "empty";
      cell(row, "No requests yet.").colSpan = 9;
      return;
    }
    for (const t of tenants) {
      const row = body.insertRow();
      row.className = "tenant";
      row.dataset.tenant = t.tenant;
      const name = cell(row, "");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = window.PlatformCharts.colorFor(t.tenant);
      name.append(swatch, t.tenant);
      name.title = t.tenant;
      cell(row, String(t.num_requests), "num");
      const refused = cell(row, String(t.num_refused), "num");
      refused.title = "refused by the tenant's limits or budgets (429, 403)";
      cell(row, String(t.prompt_tokens), "num");
      const rate = t.prefix_cache_hit_rate;
      cell(row, rate === null ? "–" : (Math.round(rate * 1000) / 10) + "%", "num");
      cell(row, seconds(t.ttft_p50_s), "num");
      cell(row, seconds(t.ttft_p95_s), "num");
      cell(row, seconds(t.queue_p50_s), "num");
      cell(row, seconds(t.queue_p95_s), "num");
    }
  }

  function renderSpend(spend) {
    document.getElementById("spend-currency").textContent = "(" + spend.currency + ")";
    const body = root.querySelector("#spend tbody");
    body.replaceChildren();
    if (!spend.this_month.length) {
      const row = body.insertRow();
      row.className = "empty";
      cell(row, "No priced usage this month (set prices under Billing › Model prices).").colSpan = 4;
      return;
    }
    for (const t of spend.this_month) {
      const row = body.insertRow();
      row.className = "tenant-spend";
      row.dataset.tenant = t.tenant;
      cell(row, t.tenant);
      cell(row, t.spent, "num");
      cell(row, t.budget === null ? "–" : t.budget, "num");
      cell(row, t.used_percent === null ? "–" : t.used_percent + "%", "num");
    }
  }

  function amounts(series) {
    const numbers = {};
    for (const name of Object.keys(series)) numbers[name] = series[name].map(Number);
    return numbers;
  }

  function renderModels(models) {
    const body = root.querySelector("#models tbody");
    body.replaceChildren();
    for (const m of models) {
      const row = body.insertRow();
      row.className = "model";
      row.dataset.model = m.model;
      row.dataset.state = m.state;
      cell(row, m.model).title = m.model;
      cell(row, m.kind);
      cell(row, m.state, "state");
      cell(row, m.detail);
    }
    if (!models.length) cell(body.insertRow(), "No model registered yet.").colSpan = 4;
  }

  function recordThroughput(engines) {
    const perModel = {};
    for (const e of engines) perModel[e.model] = (perModel[e.model] || 0) + (e.tokens_per_s || 0);
    throughput.labels.push(new Date().toLocaleTimeString());
    const length = throughput.labels.length;
    for (const model of Object.keys(perModel)) {
      if (!throughput.series[model]) throughput.series[model] = new Array(length - 1).fill(0);
    }
    for (const model of Object.keys(throughput.series)) {
      throughput.series[model].push(perModel[model] || 0);
    }
    if (length > MAX_POINTS) {
      throughput.labels.shift();
      for (const model of Object.keys(throughput.series)) throughput.series[model].shift();
    }
  }

  function shortTime(iso) { return iso.slice(11, 16); }

  let lastData = null;

  function drawCharts(data) {
    const charts = window.PlatformCharts;
    charts.drawLineChart(document.getElementById("chart-throughput"),
      throughput.labels, throughput.series);
    charts.drawLineChart(document.getElementById("chart-tenant-minutes"),
      data.tokens_per_minute.minutes.map(shortTime), data.tokens_per_minute.series);
    charts.drawLineChart(document.getElementById("chart-tenant-days"),
      data.tokens_per_day.days, data.tokens_per_day.series);
    charts.drawLineChart(document.getElementById("chart-tenant-spend"),
      data.spend.per_day.days, amounts(data.spend.per_day.series));
  }

  // Charts take the page's width: drawn again when it changes.
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (lastData) drawCharts(lastData); }, 150);
  });

  async function poll() {
    try {
      const response = await fetch(source, { credentials: "same-origin" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      const data = await response.json();
      lastData = data;
      renderModels(data.models || []);
      renderEngines(data.engines, data.redis_error);
      renderTenants(data.tenants || []);
      renderSpend(data.spend);
      recordThroughput(data.engines);
      document.getElementById("engines-updated").textContent =
        "updated " + new Date(data.now * 1000).toLocaleTimeString();
      drawCharts(data);
      root.dataset.loaded = "true";
    } catch (error) {
      document.getElementById("engines-updated").textContent = "update failed: " + error.message;
    } finally {
      setTimeout(poll, interval);
    }
  }

  poll();
})();
