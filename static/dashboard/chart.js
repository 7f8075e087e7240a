/* A small line chart on <canvas>: several named series over shared x labels, an HTML legend
   (full names, wrapping) and a tooltip with every series' value at the hovered point. Served
   by the project (no CDN). A series keeps one colour on every chart of the page and across
   reloads: the colour comes from its name. */
(function () {
  "use strict";
  // Ten hues told apart at a glance (Tableau 10).
  const PALETTE = [
    "#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1",
    "#9c755f", "#17becf", "#edc948", "#ff9da7", "#76b7b2",
  ];
  const assigned = new Map(); // name -> colour, for this page
  const taken = new Map(); // colour -> name

  // The name's own slot in the palette (a string hash), or the next free one if another name
  // on this page already holds it: stable for a name, distinct on a page (up to 10 names).
  function colorFor(name) {
    if (assigned.has(name)) return assigned.get(name);
    let hash = 0;
    for (const ch of name) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
    let slot = hash % PALETTE.length;
    for (let i = 0; i < PALETTE.length && taken.has(PALETTE[slot]); i++) {
      slot = (slot + 1) % PALETTE.length;
    }
    const color = PALETTE[slot];
    assigned.set(name, color);
    if (!taken.has(color)) taken.set(color, name);
    return color;
  }

  // Round ticks: a step of 1, 2 or 5 times a power of ten, about ``count`` of them.
  function ticks(max, count) {
    if (!(max > 0)) return { step: 0.25, top: 1, decimals: 2 };
    const rough = max / count;
    const magnitude = Math.pow(10, Math.floor(Math.log10(rough)));
    const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= rough);
    const decimals = Math.max(0, -Math.floor(Math.log10(step)));
    return { step, top: Math.ceil(max / step - 1e-9) * step, decimals };
  }

  function formatNumber(value, decimals) {
    if (value >= 1e6) return (value / 1e6).toFixed(value % 1e6 ? 1 : 0) + "M";
    if (value >= 1e4) return (value / 1e3).toFixed(value % 1e3 ? 1 : 0) + "k";
    return value.toFixed(decimals);
  }

  // The canvas drawn at its box's width (and the screen's pixel density).
  function fit(canvas) {
    const width = Math.max(240, canvas.parentElement.clientWidth - 2);
    const height = Number(canvas.dataset.height || canvas.getAttribute("height") || 220);
    canvas.dataset.height = height;
    const scale = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * scale);
    canvas.height = Math.round(height * scale);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(scale, 0, 0, scale, 0, 0);
    return { ctx, width, height };
  }

  function legend(canvas, names) {
    let list = canvas.parentElement.querySelector("ul.legend");
    if (!list) {
      list = document.createElement("ul");
      list.className = "legend";
      canvas.after(list);
    }
    list.replaceChildren(...names.map((name) => {
      const item = document.createElement("li");
      item.title = name;
      item.dataset.series = name;
      item.dataset.color = colorFor(name);
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorFor(name);
      item.append(swatch, name);
      return item;
    }));
  }

  const drawn = {}; // canvas id -> what it shows, for the tooltip and for tests

  // series: {name: [numbers]} aligned with labels (strings).
  function drawLineChart(canvas, labels, series) {
    const { ctx, width, height } = fit(canvas);
    const pad = { left: 52, right: 12, top: 10, bottom: 24 };
    const plotW = width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#666";
    ctx.strokeStyle = "#ddd";
    ctx.lineWidth = 1;

    const names = Object.keys(series).sort();
    let max = 0;
    for (const name of names) for (const v of series[name]) max = Math.max(max, v || 0);
    const axis = ticks(max, 4);
    for (let value = 0; value <= axis.top + axis.step / 2; value += axis.step) {
      const y = pad.top + plotH - (plotH * value) / axis.top;
      ctx.beginPath();
      ctx.moveTo(pad.left, y);
      ctx.lineTo(pad.left + plotW, y);
      ctx.stroke();
      const text = formatNumber(value, axis.decimals);
      ctx.fillText(text, pad.left - 6 - ctx.measureText(text).width, y + 4);
    }
    const n = Math.max(labels.length, 2);
    const xOf = (i) => pad.left + (plotW * i) / (n - 1);
    // As many x labels as fit without overlapping, evenly spaced.
    if (labels.length) {
      const widest = Math.max(...labels.map((l) => ctx.measureText(l).width)) + 16;
      const every = Math.max(1, Math.ceil(labels.length / Math.max(1, Math.floor(plotW / widest))));
      for (let i = 0; i < labels.length; i += every) {
        const w = ctx.measureText(labels[i]).width;
        const x = Math.min(Math.max(xOf(i) - w / 2, pad.left), pad.left + plotW - w);
        ctx.fillText(labels[i], x, height - 6);
      }
    }
    drawn[canvas.id] = {
      labels,
      names,
      colors: Object.fromEntries(names.map((name) => [name, colorFor(name)])),
      series,
      xOf,
    };
    legend(canvas, names);
    if (!names.length) {
      ctx.fillText("no data yet", pad.left + plotW / 2 - 30, pad.top + plotH / 2);
      return;
    }
    for (const name of names) {
      ctx.strokeStyle = colorFor(name);
      ctx.lineWidth = 2;
      ctx.beginPath();
      series[name].forEach(function (v, i) {
        const y = pad.top + plotH - (plotH * (v || 0)) / axis.top;
        if (i === 0) ctx.moveTo(xOf(i), y); else ctx.lineTo(xOf(i), y);
      });
      ctx.stroke();
    }
    ctx.lineWidth = 1;
    if (!canvas.dataset.tooltip) attachTooltip(canvas);
  }

  function attachTooltip(canvas) {
    canvas.dataset.tooltip = "on";
    const tip = document.createElement("div");
    tip.className = "chart-tooltip";
    tip.hidden = true;
    canvas.parentElement.style.position = "relative";
    canvas.parentElement.append(tip);
    canvas.addEventListener("mousemove", (event) => {
      const chart = drawn[canvas.id];
      if (!chart || !chart.labels.length) return;
      const x = event.offsetX;
      let nearest = 0;
      chart.labels.forEach((_, i) => {
        if (Math.abs(chart.xOf(i) - x) < Math.abs(chart.xOf(nearest) - x)) nearest = i;
      });
      const rows = chart.names.map((name) => `${name}: ${chart.series[name][nearest] || 0}`);
      tip.textContent = [chart.labels[nearest], ...rows].join("\n");
      tip.style.left = Math.min(x + 12, canvas.clientWidth - 160) + "px";
      tip.style.top = event.offsetY + 12 + "px";
      tip.hidden = false;
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  window.PlatformCharts = { drawLineChart, colorFor, ticks, drawn };
})();
