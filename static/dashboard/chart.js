/* A small line chart on <canvas>: several named series over shared x labels, with a legend.
   Served by the project (no CDN); enough for the dashboard's three charts. */
(function () {
  "use strict";
  const COLORS = ["#417690", "#e07a1f", "#2f9e44", "#c2255c", "#7048e8", "#1098ad", "#868e96"];

  function niceMax(value) {
    if (value <= 0) return 1;
    const magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) {
      if (step * magnitude >= value) return step * magnitude;
    }
    return 10 * magnitude;
  }

  function formatNumber(value) {
    if (value >= 1e6) return (value / 1e6).toFixed(1) + "M";
    if (value >= 1e3) return (value / 1e3).toFixed(1) + "k";
    return String(Math.round(value * 10) / 10);
  }

  // series: {name: [numbers]} aligned with labels; labels: strings (first and last are drawn).
  function drawLineChart(canvas, labels, series) {
    const ctx = canvas.getContext("2d");
    const width = canvas.width, height = canvas.height;
    const pad = { left: 48, right: 8, top: 8, bottom: 36 };
    const plotW = width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#666";
    ctx.strokeStyle = "#ddd";

    const names = Object.keys(series);
    let max = 0;
    for (const name of names) for (const v of series[name]) max = Math.max(max, v || 0);
    max = niceMax(max);

    for (let i = 0; i <= 4; i++) {
      const y = pad.top + plotH - (plotH * i) / 4;
      ctx.beginPath();
      ctx.moveTo(pad.left, y);
      ctx.lineTo(pad.left + plotW, y);
      ctx.stroke();
      ctx.fillText(formatNumber((max * i) / 4), 4, y + 4);
    }
    if (labels.length) {
      ctx.fillText(labels[0], pad.left, height - 20);
      const last = labels[labels.length - 1];
      ctx.fillText(last, pad.left + plotW - ctx.measureText(last).width, height - 20);
    }
    if (!names.length) {
      ctx.fillText("no data yet", pad.left + plotW / 2 - 30, pad.top + plotH / 2);
      return;
    }
    const n = Math.max(labels.length, 2);
    names.forEach(function (name, index) {
      const color = COLORS[index % COLORS.length];
      ctx.strokeStyle = color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      series[name].forEach(function (v, i) {
        const x = pad.left + (plotW * i) / (n - 1);
        const y = pad.top + plotH - (plotH * (v || 0)) / max;
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
      ctx.fillStyle = color;
      const lx = pad.left + index * 110;
      ctx.fillRect(lx, height - 10, 10, 4);
      ctx.fillText(name.slice(0, 14), lx + 14, height - 5);
    });
    ctx.lineWidth = 1;
  }

  window.PlatformCharts = { drawLineChart: drawLineChart };
})();
