// The simulator's HTML report: draws the data blocks of the page with the GPU Quotas page's own code.
// Each run's timeline block holds the REST API's job queue timeline, drawn by QuotaTimeline.draw (the page's
// quota-timeline.js); the "report-data" block holds the capacity held per share over time and the waits per
// share, drawn here with the same Apache ECharts and the same share colours.
"use strict";

(function () {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const colorOf = QuotaTimeline.palette(data.quotaShareNames);
  const clockStart = Date.parse(data.clockStart);
  const RUN_COLORS = ["#57606a", "#afb8c1", "#8250df"];

  // The run's elapsed time at a point of a time axis: 00:01:30, or 2d 04:00 past the first day.
  function elapsed(at) {
    const seconds = Math.round((at - clockStart) / 1000);
    const days = Math.floor(seconds / 86400);
    const [h, m, s] = [Math.floor(seconds / 3600) % 24, Math.floor(seconds / 60) % 60, seconds % 60]
      .map((n) => String(n).padStart(2, "0"));
    return days ? `${days}d ${h}:${m}` : `${h}:${m}:${s}`;
  }

  // A moment of a run in tooltips and details: its elapsed time to the second, 00:01:30, with its days as
  // on the time axis when the run lasts more than a day (0d 23:00:00, 1d 04:00:00).
  function momentOf(untilMs) {
    const long = untilMs - clockStart > 86400e3;
    return (at) => {
      const seconds = Math.round((at - clockStart) / 1000);
      const [h, m, s] = [Math.floor(seconds / 3600) % 24, Math.floor(seconds / 60) % 60, seconds % 60]
        .map((n) => String(n).padStart(2, "0"));
      return long ? `${Math.floor(seconds / 86400)}d ${h}:${m}:${s}` : `${h}:${m}:${s}`;
    };
  }

  function legend(host) {
    for (const share of data.quotaShareNames) {
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorOf(share);
      const item = document.createElement("span");
      item.className = "legend-item";
      item.append(swatch, share);
      host.append(item);
    }
  }

  // A timeline with more waiting jobs than maxWaitLanes is drawn without wait lanes (one lane per job would
  // bury the rows of capacity); the waits chart below has them all.
  function drawTimelines() {
    for (const node of document.querySelectorAll("script.timeline-data")) {
      const timeline = JSON.parse(node.textContent);
      const waiting = timeline.jobs.filter((job) => job.waits.length).length;
      const host = document.getElementById(node.dataset.host);
      let drawn = timeline;
      if (waiting > data.maxWaitLanes) {
        drawn = { ...timeline, jobs: timeline.jobs.map((job) => ({ ...job, waits: [] })) };
        const note = document.createElement("p");
        note.className = "muted";
        note.textContent = `${waiting} jobs waited: too many to draw a lane each (more than ${data.maxWaitLanes}); ` +
          "their waits are in the wait-time chart below.";
        host.before(note);
      }
      QuotaTimeline.draw(host, drawn, { colorOf, dark: false, timeText: momentOf(Date.parse(timeline.until)) });
      for (const entry of (host._charts || new Map()).values()) {
        entry.chart.setOption({ xAxis: { axisLabel: { formatter: elapsed } } });
      }
    }
  }

  function chart(parent, title, height) {
    const heading = document.createElement("div");
    heading.className = "timeline-title";
    heading.textContent = title;
    const node = document.createElement("div");
    node.className = "report-chart";
    node.style.height = `${height}px`;
    parent.append(heading, node);
    return echarts.init(node, null, { renderer: "svg" });
  }

  function drawCapacity() {
    const host = document.getElementById("capacity");
    for (const run of data.runs) {
      for (const unit of run.capacity) {
        const shares = data.quotaShareNames.filter((share) => share in unit.held);
        chart(host, `${unit.capacityUnit} held per share, ${run.description} (capacity ${unit.capacity})`, 240).setOption({
          animation: false,
          grid: { left: 60, right: 24, top: 30, bottom: 30 },
          legend: { data: shares, top: 0 },
          tooltip: { trigger: "axis", valueFormatter: (value) => `${value.toFixed(1)}%` },
          dataZoom: [{ type: "inside", filterMode: "none" }],
          xAxis: { type: "time", min: clockStart, max: clockStart + run.until * 1000, axisLabel: { formatter: elapsed, hideOverlap: true } },
          yAxis: { type: "value", min: 0, max: 100, name: "% of capacity" },
          series: shares.map((share) => ({
            name: share, type: "line", step: "end", stack: "held", showSymbol: false, color: colorOf(share),
            lineStyle: { width: 1 }, areaStyle: { opacity: 0.75 },
            data: unit.times.map((at, index) => [clockStart + at * 1000, (100 * unit.held[share][index]) / unit.capacity]),
          })),
        });
      }
    }
  }

  function drawWaits() {
    const shares = data.quotaShareNames;
    const series = data.runs.map((run, index) => ({
      name: run.description, type: "boxplot", itemStyle: { color: "transparent", borderColor: RUN_COLORS[index % RUN_COLORS.length], borderWidth: 1.5 },
      data: shares.map((share) => {
        const wait = run.waits.find((each) => each.quotaShareName === share);
        return wait ? wait.box : [];
      }),
    }));
    const means = data.runs.map((run, index) => ({
      name: `${run.description}: mean`, type: "scatter", symbol: "diamond", symbolSize: 9,
      color: RUN_COLORS[index % RUN_COLORS.length],
      data: shares.map((share) => {
        const wait = run.waits.find((each) => each.quotaShareName === share);
        return wait ? wait.mean : null;
      }),
    }));
    const waits = Object.fromEntries(data.runs.map((run) => [run.description, run.waits]));
    chart(document.getElementById("waits"), "Seconds RUNNABLE per job, by quota share: the box is the middle half, " +
      "the line the median, the whiskers the least and the most, the diamond the mean", 380).setOption({
      animation: false,
      grid: { left: 70, right: 24, top: 40, bottom: 40 },
      legend: { top: 0 },
      tooltip: {
        trigger: "item",
        formatter: (p) => {
          const wait = (waits[p.seriesName.replace(/: mean$/, "")] || []).find((each) => each.quotaShareName === p.name);
          if (!wait) return "";
          const [low, q1, median, q3, high] = wait.box;
          return `<b>${p.name}</b>, ${p.seriesName.replace(/: mean$/, "")}<br>${wait.jobs} jobs; waited ` +
            `least ${low} s, q1 ${q1} s, median ${median} s, q3 ${q3} s, p95 ${wait.p95} s, most ${high} s, mean ${wait.mean} s`;
        },
      },
      xAxis: { type: "category", data: shares, name: "quota share" },
      yAxis: { type: "value", min: 0, name: "seconds waiting" },
      series: [...series, ...means],
    });
  }

  legend(document.getElementById("legend"));
  drawTimelines();
  drawCapacity();
  drawWaits();
  document.body.dataset.drawn = "true";
})();
