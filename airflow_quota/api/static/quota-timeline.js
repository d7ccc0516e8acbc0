// The GPU timeline: one Apache ECharts chart per capacity unit of a job queue, drawn from the REST API's
// timeline (GET /quota/api/jobQueues/{q}/timeline). One row per unit of capacity, time left to right, each bar
// a job's hold of that unit in its share's colour (borrowed units lighter with a dashed edge), the stop
// phase of a preemption drawn distinctly and linked to its preemptor, each job's waits on lanes below.
// Hover shows a job's details; a click pins them under the chart, with a link that shows the preemptor.
// A local unit's rows are the host's GPUs (row i is device index i), each grant on the GPUs it got.
// Used by the GPU Quotas page, the task instance's "Quota" view and the simulator's HTML report.
"use strict";

(function () {
  const ROW_PX = 22;
  const STOP_COLOR = "#cf222e";

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      node.setAttribute(name, value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function escapeHtml(text) {
    return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function dateAndClock(ms) {
    return new Date(ms).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function sameDay(a, b) {
    return new Date(a).toDateString() === new Date(b).toDateString();
  }

  // How tooltips and details write a moment of the window [since, until]: its clock time, with the date
  // when the window spans more than a day or crosses midnight, or the moment is on another day than the
  // window's end (a bar that began before the window).
  function timeTextFor(since, until) {
    const overDays = until - since >= 86400e3 || !sameDay(since, until);
    return (ms) => (overDays || !sameDay(ms, until) ? dateAndClock(ms) : clock(ms));
  }

  function duration(ms) {
    const seconds = Math.round(ms / 1000);
    if (seconds < 120) return `${seconds} s`;
    const minutes = Math.round(seconds / 60);
    return minutes < 120 ? `${minutes} min` : `${(minutes / 60).toFixed(1)} h`;
  }

  // A short name for a job: its task (and map index), with its DAG when two DAGs share a task id.
  function jobLabels(jobs) {
    const byTask = new Map();
    for (const job of jobs) {
      const ti = job.taskInstance;
      const task = ti.taskId + (ti.mapIndex >= 0 ? `[${ti.mapIndex}]` : "");
      byTask.set(task, (byTask.get(task) || new Set()).add(ti.dagId));
    }
    const labels = new Map();
    for (const job of jobs) {
      const ti = job.taskInstance;
      const task = ti.taskId + (ti.mapIndex >= 0 ? `[${ti.mapIndex}]` : "");
      const label = byTask.get(task).size > 1 ? `${ti.dagId}.${task}` : task;
      labels.set(job.jobId, ti.tryNumber > 1 ? `${label} try ${ti.tryNumber}` : label);
    }
    return labels;
  }

  // The window drawn: [since, until] in ms; "since the first job" starts at the queue's first submission.
  function windowOf(timeline) {
    const until = Date.parse(timeline.until);
    const first = timeline.firstSubmittedAt ? Date.parse(timeline.firstSubmittedAt) : until - 3600e3;
    const since = timeline.since ? Date.parse(timeline.since) : Math.min(first, until - 60e3);
    return [since, until];
  }

  // Everything one unit's chart draws: its lanes (rows, then one per waiting job) and its items.
  function itemsOf(timeline, unit, labels, options) {
    const [since, until] = windowOf(timeline);
    const jobs = new Map(timeline.jobs.map((job) => [job.jobId, job]));
    const lanes = Array.from({ length: unit.rows }, (_, row) => (unit.devices ? `GPU ${row}` : `#${row + 1}`));
    const items = [];
    const clip = (iso, fallback) => Math.min(Math.max(iso ? Date.parse(iso) : fallback, since), until);
    for (const bar of unit.bars) {
      const job = jobs.get(bar.jobId);
      items.push({
        kind: "bar", lane: bar.row, start: clip(bar.startedAt, since), end: clip(bar.endedAt, until),
        bar, job, label: labels.get(bar.jobId) || bar.jobId,
        dim: options.focusShare && bar.quotaShareName !== options.focusShare,
      });
    }
    const waiting = timeline.jobs.filter((job) => job.capacityUnit === unit.capacityUnit && job.waits.length &&
      (!options.focusShare || job.quotaShareName === options.focusShare));
    waiting.forEach((job, index) => {
      lanes.push(`${labels.get(job.jobId)} · waits`);
      for (const wait of job.waits) {
        items.push({ kind: "wait", lane: unit.rows + index, start: clip(wait.startedAt, since),
          end: clip(wait.endedAt, until), wait, job, label: labels.get(job.jobId) });
      }
    });
    return { lanes, items, since, until };
  }

  // A bar's or a wait's own start and end (not clipped to the window; an open one ends at the window's end).
  function period(startedAt, endedAt, item) {
    const start = startedAt ? Date.parse(startedAt) : item.start;
    return [start, endedAt ? Date.parse(endedAt) : Math.max(item.end, start)];
  }

  function describe(item, timeText) {
    const job = item.job || {};
    const lines = [];
    if (item.kind === "wait") {
      const [start, end] = period(item.wait.startedAt, item.wait.endedAt, item);
      lines.push(["Waiting", `${timeText(start)} – ${item.wait.endedAt ? timeText(end) : "now"} (${duration(end - start)})`]);
      lines.push(["Why", item.wait.reason]);
    } else {
      const bar = item.bar;
      const phase = bar.phase === "STOPPING"
        ? (bar.preemptedBy ? "stopping after its preemption" : "stopping (terminated)")
        : "holding it (granted)";
      lines.push(["Phase", `${phase}${bar.borrowed ? ", borrowed unit" : ""}`]);
      if (bar.device !== null && bar.device !== undefined) lines.push(["GPU", `device ${bar.device}`]);
      const [start, end] = period(bar.startedAt, bar.endedAt, item);
      lines.push(["When", `${timeText(start)} – ${bar.endedAt ? timeText(end) : "now"} (${duration(end - start)})` +
        (bar.endedBy ? `, ended by ${bar.endedBy}` : "")]);
      lines.push(["Why", bar.reason]);
    }
    return {
      title: item.label,
      facts: [["Job", job.jobId], ["Share", job.quotaShareName], ["Priority", item.bar ? item.bar.schedulingPriority : job.schedulingPriority], ...lines],
    };
  }

  function tooltipHtml(item, timeText) {
    const { title, facts } = describe(item, timeText);
    const rows = facts.map(([name, value]) => `<tr><th>${escapeHtml(name)}</th><td>${escapeHtml(value)}</td></tr>`).join("");
    const preemptor = item.bar && item.bar.preemptedBy ? `<div class="tl-stop">Stopping for ${escapeHtml(item.bar.preemptedBy)}</div>` : "";
    return `<div class="tl-tip"><b>${escapeHtml(title)}</b>${preemptor}<table>${rows}</table></div>`;
  }

  function renderItem(state) {
    return function (params, api) {
      const item = state.items[params.dataIndex];
      if (!item) return null;
      const startPoint = api.coord([item.start, item.lane]);
      const endPoint = api.coord([item.end, item.lane]);
      const laneHeight = api.size([0, 1])[1];
      const height = laneHeight * (item.kind === "wait" ? 0.36 : 0.72);
      const shape = echarts.graphic.clipRectByRect(
        { x: startPoint[0], y: startPoint[1] - height / 2, width: Math.max(endPoint[0] - startPoint[0], 2), height },
        { x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height });
      if (!shape) return null;
      const selected = state.selected && item.job && item.job.jobId === state.selected;
      const color = item.kind === "wait" ? state.muted : state.colorOf(item.bar.quotaShareName);
      const style = { fill: color, stroke: selected ? state.fg : null, lineWidth: selected ? 2 : 0, opacity: item.dim ? 0.25 : 1 };
      let text = "";
      if (item.kind === "wait") {
        style.opacity = 0.55;
      } else if (item.bar.phase === "STOPPING") {
        style.fill = `${color}55`;
        style.stroke = STOP_COLOR;
        style.lineWidth = selected ? 3 : 2;
        text = item.bar.preemptedBy ? "stopping" : "terminating";
      } else {
        text = item.label + (item.bar.borrowed ? " (borrowed)" : "");
        if (item.bar.borrowed) {
          style.fill = `${color}99`;
          style.stroke = selected ? state.fg : color;
          style.lineWidth = selected ? 2 : 1.5;
          style.lineDash = [4, 3];
        }
      }
      const children = [{ type: "rect", shape, style }];
      if (text && shape.width > 40) {
        children.push({
          type: "text", silent: true,
          style: { x: shape.x + 4, y: shape.y + shape.height / 2, text, fill: item.bar.phase === "STOPPING" ? state.fg : "#fff",
            fontSize: 11, verticalAlign: "middle", width: shape.width - 8, overflow: "truncate" },
        });
      }
      return { type: "group", children };
    };
  }

  // Draws (or redraws) one job queue's timeline into `host`; keeps the chart and the pinned details.
  function draw(host, timeline, options) {
    const labels = jobLabels(timeline.jobs);
    host.classList.add("timeline");
    host.dataset.queue = timeline.jobQueueName;
    const charts = host._charts || (host._charts = new Map());
    const seen = new Set();
    const style = getComputedStyle(document.documentElement);
    const fg = style.getPropertyValue("--fg").trim() || "#1f2328";
    const muted = style.getPropertyValue("--muted").trim() || "#656d76";
    const theme = options.dark ? "dark" : "light";
    if (!host._details) {
      host._details = el("div", { class: "timeline-details muted" }, "Hover over a bar for its job; click it to keep its details here.");
    }
    const units = timeline.units.filter((unit) => unit.rows > 0);
    for (const unit of units) {
      seen.add(unit.capacityUnit);
      let entry = charts.get(unit.capacityUnit);
      if (entry && entry.theme !== theme) {
        entry.chart.dispose();
        entry.node.remove();
        entry = null;
      }
      if (!entry) {
        const node = el("div", { class: "timeline-unit", "data-unit": unit.capacityUnit },
          el("div", { class: "timeline-title" }, unit.devices
            ? `${unit.capacityUnit}: one row per GPU of the host (${unit.capacity}), by device index`
            : `${unit.capacityUnit}: one row per unit of capacity (${unit.capacity})`),
          el("div", { class: "timeline-chart" }));
        const state = { selected: null, items: [], colorOf: options.colorOf, fg, muted };
        entry = { node, state, theme, chart: null };
        charts.set(unit.capacityUnit, entry);
      }
      const { lanes, items, since, until } = itemsOf(timeline, unit, labels, options);
      const timeText = options.timeText || timeTextFor(since, until);
      host._timeText = timeText;
      Object.assign(entry.state, { items, colorOf: options.colorOf, fg, muted, timeText });
      entry.unit = unit;
      entry.lanes = lanes;
      const chartNode = entry.node.querySelector(".timeline-chart");
      chartNode.style.height = `${lanes.length * ROW_PX + 46}px`;
      host.append(entry.node);
      if (!entry.chart) {
        entry.chart = echarts.init(chartNode, options.dark ? "dark" : null, { renderer: "svg" });
        entry.chart.on("click", (event) => pin(host, charts, entry.state.items[event.dataIndex], options));
        entry.chart.on("datazoom", () => {
          const zoom = entry.chart.getOption().dataZoom[0];
          entry.zoom = { start: zoom.start, end: zoom.end };
        });
      }
      const zoomed = entry.zoom || { start: 0, end: 100 };
      entry.chart.setOption({
        backgroundColor: "transparent",
        // Zoom with the mouse wheel and drag to pan (kept across the page's refreshes).
        dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none", start: zoomed.start, end: zoomed.end }],
        animation: false,
        grid: { left: 150, right: 24, top: 8, bottom: 30 },
        tooltip: { trigger: "item", confine: true, formatter: (p) => tooltipHtml(entry.state.items[p.dataIndex], entry.state.timeText) },
        xAxis: { type: "time", min: since, max: until, axisLabel: { color: muted, hideOverlap: true },
          splitLine: { show: true, lineStyle: { opacity: 0.25 } } },
        yAxis: { type: "category", data: lanes, inverse: true, axisTick: { show: false },
          axisLabel: { color: fg, width: 140, overflow: "truncate", fontSize: 11 },
          splitLine: { show: true, lineStyle: { opacity: 0.2 } } },
        series: [{
          id: "bars", type: "custom", renderItem: renderItem(entry.state), encode: { x: [1, 2], y: 0 },
          data: items.map((item, index) => [item.lane, item.start, item.end, index]),
        }],
      }, { notMerge: true });
      entry.chart.resize();
    }
    for (const [name, entry] of charts) {
      if (!seen.has(name)) {
        entry.chart.dispose();
        entry.node.remove();
        charts.delete(name);
      }
    }
    if (!units.length) host.append(el("p", { class: "muted timeline-empty" }, "No capacity units."));
    else host.querySelector(".timeline-empty")?.remove();
    host.append(host._details);
    if (host._pinned) pinJob(host, charts, host._pinned, options, false);
  }

  function allItems(charts) {
    return [...charts.values()].flatMap((entry) => entry.state.items);
  }

  function select(charts, jobId) {
    for (const entry of charts.values()) {
      entry.state.selected = jobId;
      entry.chart.setOption({ series: [{ id: "bars", renderItem: renderItem(entry.state) }] });
    }
  }

  // Shows an item's details under the chart and outlines its job's bars.
  function pin(host, charts, item, options) {
    if (!item) return;
    host._pinned = { jobId: item.job.jobId, item };
    select(charts, item.job.jobId);
    const { title, facts } = describe(item, host._timeText || clock);
    const details = el("div", { class: "timeline-details", "data-job": item.job.jobId, "data-kind": item.kind,
      "data-phase": item.bar ? item.bar.phase : "WAITING" },
      el("b", {}, title), " ",
      item.bar && item.bar.preemptedBy
        ? el("span", { class: "tl-stop" }, "Stopping for ",
          el("a", { href: "#", class: "preemptor", "data-job": item.bar.preemptedBy }, labelOf(charts, item.bar.preemptedBy)),
          ` (${item.bar.rule || "preemption"}) — its capacity goes to that job once this one has stopped`)
        : null,
      el("dl", {}, facts.map(([name, value]) => [el("dt", {}, name), el("dd", {}, String(value ?? ""))])),
      options.airflowBase && item.job.taskInstance
        ? el("a", { href: options.airflowBase + item.job.taskInstance.path, target: "_top" }, "Open its task instance")
        : null);
    const link = details.querySelector("a.preemptor");
    if (link) {
      link.addEventListener("click", (event) => {
        event.preventDefault();
        pinJob(host, charts, { jobId: link.dataset.job }, options, true);
      });
    }
    host._details.replaceWith(details);
    host._details = details;
  }

  function labelOf(charts, jobId) {
    const item = allItems(charts).find((candidate) => candidate.job && candidate.job.jobId === jobId);
    return item ? item.label : jobId;
  }

  // Pins a job's first bar in the window (or its first wait); after a refresh, the same job again.
  function pinJob(host, charts, pinned, options, fresh) {
    const items = allItems(charts).filter((item) => item.job && item.job.jobId === pinned.jobId);
    const again = !fresh && pinned.item && items.find((item) => item.kind === pinned.item.kind &&
      item.start === pinned.item.start && (item.bar ? item.bar.phase : "") === (pinned.item.bar ? pinned.item.bar.phase : ""));
    const item = again || items.find((candidate) => candidate.kind === "bar") || items[0];
    if (item) pin(host, charts, item, options);
    else {
      host._details.replaceChildren(`${pinned.jobId} has no bar or wait in this window.`);
    }
  }

  // What each chart draws and where, for the browser tests (and for anyone scripting the page).
  function drawn(host) {
    const charts = host._charts || new Map();
    return [...charts.entries()].flatMap(([unit, entry]) => entry.state.items.map((item) => {
      const [x, y] = entry.chart.convertToPixel({ gridIndex: 0 }, [(item.start + item.end) / 2, item.lane]);
      const box = entry.node.querySelector(".timeline-chart").getBoundingClientRect();
      return {
        unit, kind: item.kind, jobId: item.job && item.job.jobId, label: item.label, lane: item.lane,
        phase: item.bar ? item.bar.phase : "WAITING", borrowed: item.bar ? item.bar.borrowed : false,
        device: item.bar && item.bar.device !== undefined ? item.bar.device : null, laneName: entry.lanes[item.lane],
        preemptedBy: item.bar ? item.bar.preemptedBy : null, share: item.bar ? item.bar.quotaShareName : item.job.quotaShareName,
        start: item.start, end: item.end, dim: Boolean(item.dim),
        x: box.left + x, y: box.top + y,
      };
    }));
  }

  // The share colours, in quota-file order (the page's capacity bars use the same).
  const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7b83", "#9a6700", "#cf222e"];

  function palette(shareNames) {
    const colors = new Map(shareNames.map((name, i) => [name, COLORS[i % COLORS.length]]));
    return (name) => colors.get(name) || "#6e7781";
  }

  // Airflow 3's colour mode: its UI marks <html> "dark" or "light" (next-themes, remembered as "theme" in
  // localStorage); inside Airflow's frame we follow the frame's parent as it changes, alone the stored choice.
  function isDark() {
    try {
      const parent = window.parent !== window ? window.parent.document.documentElement : null;
      if (parent && (parent.classList.contains("dark") || parent.classList.contains("light"))) {
        return parent.classList.contains("dark");
      }
    } catch (notSameOrigin) { /* fall through */ }
    const stored = window.localStorage.getItem("theme");
    if (stored === "dark" || stored === "light") return stored === "dark";
    return window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  function applyTheme() {
    const dark = isDark();
    if (document.documentElement.classList.contains("dark") === dark) return false;
    document.documentElement.classList.toggle("dark", dark);
    return true;
  }

  // Applies Airflow's colour mode now, and again (calling `redraw`) whenever it changes.
  function followTheme(redraw) {
    applyTheme();
    try {
      if (window.parent !== window) {
        new MutationObserver(() => applyTheme() && redraw())
          .observe(window.parent.document.documentElement, { attributes: true, attributeFilter: ["class"] });
      }
    } catch (notSameOrigin) { /* no parent to follow */ }
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme() && redraw());
  }

  // Inside Airflow's frame (sandboxed: no top-level navigation), a link to an Airflow page (target _top) is
  // opened by Airflow's own router in the same window: pushed onto its history, then announced (popstate).
  // A link to another site (target _blank: the AWS console) would be a popup the frame may not open: it is
  // opened from Airflow's own document instead, in a new tab.
  function keepLinksInAirflow() {
    document.addEventListener("click", (event) => {
      const link = event.target instanceof Element ? event.target.closest("a[target=_top], a[target=_blank]") : null;
      if (!link || window.top === window || event.defaultPrevented) return;
      try {
        const url = new URL(link.href, window.location.href);
        const top = window.top;
        if (link.target === "_blank") {
          event.preventDefault();
          const opener = top.document.createElement("a");
          Object.assign(opener, { href: url.href, target: "_blank", rel: "noopener noreferrer" });
          top.document.body.append(opener);
          opener.click();
          opener.remove();
        } else if ("fullLoad" in link.dataset) {
          // A page Airflow's own router does not draw (its login page): loaded in Airflow's window, through a
          // link of that window's document (the frame's sandbox may not navigate its top window itself).
          event.preventDefault();
          const loader = top.document.createElement("a");
          loader.href = url.href;
          top.document.body.append(loader);
          loader.click();
          loader.remove();
        } else if (url.origin === top.location.origin) {
          event.preventDefault();
          top.history.pushState(null, "", url.pathname + url.search + url.hash);
          top.dispatchEvent(new PopStateEvent("popstate", { state: null }));
        }
      } catch (notSameOrigin) { /* leave it to the browser */ }
    });
  }

  // Puts a page's new content (a list of elements) in place of #content, then fits each chart drawn into
  // `hosts` (the elements `draw` drew into) to its new width.
  function showContent(content, hosts) {
    document.getElementById("content").replaceChildren(...content);
    for (const host of hosts) {
      for (const entry of (host._charts || new Map()).values()) entry.chart.resize();
    }
  }

  // The auth manager's login page (the page's data-login) with next= the address to come back to: Airflow's
  // own (its window's, when the page is in Airflow's frame), so that the user lands on the page again.
  function loginLink(label) {
    let next = window.location.href;
    try {
      if (window.top !== window) next = window.top.location.href;
    } catch (notSameOrigin) { /* the page's own address */ }
    const login = new URL(document.body.dataset.login || "/auth/login", window.location.href);
    login.searchParams.set("next", next);
    const link = document.createElement("a");
    Object.assign(link, { href: login.href, target: "_top", textContent: label });
    link.dataset.fullLoad = "";
    return link;
  }

  // Keeps a page fresh: calls `load` now, every `everyMs` and whenever Airflow's colour mode changes; after
  // a load #status reads `statusLine()`, a failed one shows in #error: "Could not refresh (...); retrying.",
  // or, when the session ended (a 401: `load` throws an error carrying the HTTP status), a link to log in
  // again. Links open in Airflow's own window. Returns the refresh function, for a control that wants the
  // page reloaded at once.
  function keepFresh(load, everyMs, statusLine) {
    async function refresh() {
      const status = document.getElementById("status");
      const error = document.getElementById("error");
      try {
        await load();
        error.hidden = true;
        status.textContent = statusLine();
      } catch (problem) {
        error.hidden = false;
        if (problem.status === 401) {
          error.replaceChildren("Your session has ended: ", loginLink("log in again"), ".");
        } else {
          error.textContent = `Could not refresh (${problem.message}); retrying.`;
        }
      }
    }
    followTheme(refresh);
    keepLinksInAirflow();
    refresh();
    setInterval(refresh, everyMs);
    return refresh;
  }

  window.QuotaTimeline = {
    draw, drawn, palette, isDark, followTheme, keepLinksInAirflow, showContent, keepFresh,
  };
})();
