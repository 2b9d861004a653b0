// Small health charts (uPlot, vendored): one per [data-series] element, from #health-series.
document.addEventListener("DOMContentLoaded", () => {
  const source = document.getElementById("health-series");
  if (!source || typeof uPlot === "undefined") return;
  const data = JSON.parse(source.textContent);
  document.querySelectorAll(".chart[data-series]").forEach((el) => {
    const key = el.dataset.series;
    const opts = {
      width: Math.max(240, el.clientWidth || 320),
      height: 140,
      legend: { show: false },
      // Axis times in the portal's time zone (named below the charts), whatever the browser's.
      tzDate: (ts) => (data.tz ? uPlot.tzDate(new Date(ts * 1e3), data.tz) : new Date(ts * 1e3)),
      series: [{}, { stroke: "#0172ad", width: 2, spanGaps: false }],
      axes: [{ size: 30 }, { size: 44 }],
      // One sample spans no time: show the last five minutes around it, not years.
      scales: { x: { time: true, range: (u, min, max) => (min === max ? [min - 300, max + 60] : [min, max]) } },
    };
    new uPlot(opts, [data.t, data[key]], el);
  });
});
