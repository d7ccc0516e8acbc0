// The GPU Quotas page: reads the quota REST API every few seconds and draws queues, shares, jobs, events.
"use strict";

(function () {
  const body = document.body.dataset;
  const api = body.api;
  const airflowBase = body.airflowBase;
  const focusQueue = body.jobQueue || null;
  const focusShare = body.quotaShare || null;
  const refreshMs = 1000 * Number(body.refreshSeconds || 5);
  // Unfinished jobs shown (the API's largest page); finished ones are paged, the page shows the last 10.
  const OPEN_JOBS = 1000;
  const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7b83", "#9a6700", "#cf222e"];
  const WINDOWS = [["15m", "15 min"], ["1h", "1 hour"], ["1d", "1 day"], ["all", "Since the first job"]];
  // The window the user picked last (kept in this browser), else the last 15 minutes.
  let timelineWindow = window.localStorage.getItem("quota-timeline-window") || "15m";
  if (!WINDOWS.some(([value]) => value === timelineWindow)) timelineWindow = "15m";
  // Kept across refreshes: each queue's timeline (its charts and pinned details) and the decision filters.
  const timelineHosts = new Map();
  const decisionFilters = { share: "", job: "", run: "", kind: "" };
  let decisionFilterBar = null;
  const NEVER = {
    "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE":
      "Can never start: it needs more of its capacity unit than the job queue has",
    "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED":
      "Can never start: it needs more than its quota share can ever hold",
  };

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "style") node.style.cssText = value;
      else node.setAttribute(name, value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  async function get(path) {
    const response = await fetch(api + path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      const error = new Error(`${response.status} ${response.statusText} for ${path}`);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  function query(parameters) {
    const entries = Object.entries(parameters).filter(([, value]) => value !== null && value !== undefined);
    return entries.length ? "?" + new URLSearchParams(entries).toString() : "";
  }

  function time(iso) {
    if (!iso) return "";
    const at = new Date(iso);
    return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  function dateTime(iso) {
    if (!iso) return "";
    const at = new Date(iso);
    return at.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + time(iso);
  }

  function badge(text, extra) {
    return el("span", { class: `badge ${text} ${extra || ""}` }, text);
  }

  function shareLink(queue, share) {
    const href = `${api.replace(/\/api$/, "")}/shares/${encodeURIComponent(queue)}/${encodeURIComponent(share)}`;
    return el("a", { href }, share);
  }

  function plural(count, noun) {
    return `${count} ${noun}${count === 1 ? "" : "s"}`;
  }

  function lendingText(entries, direction) {
    return entries.map((entry) => `${entry.units} ${direction} ${entry.quotaShareName ?? "unowned capacity"}`).join(", ");
  }

  // --- capacity bars -------------------------------------------------------------------------------

  function segment(units, total, color, label, title, classes) {
    const width = total ? (100 * units) / total : 0;
    return el(
      "div",
      { class: `seg ${classes || ""}`, style: `width:${width}%;background-color:${color}`, title },
      label,
    );
  }

  function unitBar(queueName, unit, colorOf) {
    const inUse = unit.quotaShares.reduce((sum, share) => sum + share.used, 0);
    const idle = unit.quotaShares.reduce((sum, share) => sum + share.idle, 0) + unit.unownedIdle;
    const total = Math.max(
      unit.capacity,
      unit.quotaShares.reduce((sum, share) => sum + share.limit, 0) + unit.unowned + unit.overdraft,
    );
    const segments = [];
    for (const share of unit.quotaShares) {
      const name = share.quotaShareName;
      const focus = name === focusShare && queueName === (focusQueue || queueName) ? "focus" : "";
      if (share.own) {
        segments.push(segment(share.own, total, colorOf(name), `${name} ${share.own}`,
          `${name}: ${share.own} in use within its own limit of ${share.limit}`, focus));
      }
      for (const lent of share.lentTo) {
        segments.push(segment(lent.units, total, colorOf(lent.quotaShareName),
          `${lent.quotaShareName} ${lent.units} borrowed`,
          `${lent.quotaShareName} borrows ${lent.units} of ${name}'s idle capacity`, `hatch ${focus}`));
      }
      if (share.idle) {
        segments.push(segment(share.idle, total, `${colorOf(name)}22`, `${name} idle ${share.idle}`,
          `${name}: ${share.idle} of its own ${share.limit} idle`, `idle ${focus}`));
      }
    }
    for (const lent of unit.unownedLentTo) {
      segments.push(segment(lent.units, total, colorOf(lent.quotaShareName), `${lent.quotaShareName} ${lent.units} borrowed`,
        `${lent.quotaShareName} borrows ${lent.units} of the capacity no share owns`, "hatch"));
    }
    if (unit.unownedIdle) {
      segments.push(segment(unit.unownedIdle, total, "transparent", `unowned idle ${unit.unownedIdle}`,
        `${unit.unownedIdle} of the queue's capacity no share owns, idle`, "idle"));
    }
    if (unit.overdraft) {
      segments.push(segment(unit.overdraft, total, "#cf222e", `over ${unit.overdraft}`,
        `${unit.overdraft} borrowed beyond what can be lent (a limit was lowered); they drain or are reclaimed`));
    }
    const legend = unit.quotaShares.map((share) => {
      const parts = [`${share.own} own of ${share.limit}`];
      if (share.borrowed) parts.push(`${share.borrowed} borrowed (${lendingText(share.borrowedFrom, "from")})`);
      if (share.lent) parts.push(`${share.lent} lent (${lendingText(share.lentTo, "to")})`);
      parts.push(`${share.idle} idle`);
      if (share.stopping) parts.push(`${share.stopping} stopping`);
      return el("span", { "data-share": share.quotaShareName },
        el("span", { class: "swatch", style: `background:${colorOf(share.quotaShareName)}` }),
        el("b", {}, share.quotaShareName), ": ", parts.join(", "));
    });
    return el("div", { class: "unit", "data-unit": unit.capacityUnit },
      el("div", { class: "unit-title" },
        el("span", {}, unit.capacityUnit),
        el("span", { class: "queue-total" },
          `${unit.capacity} total: ${inUse} in use, ${idle} idle` +
          (unit.stopping ? ` · ${unit.stopping} held by jobs being stopped, ${unit.free} free now` : ""))),
      el("div", { class: "bar" }, segments),
      el("div", { class: "legend" }, legend));
  }

  // --- shares --------------------------------------------------------------------------------------

  // A share's configuration, in AWS Batch's DescribeQuotaShare nesting (borrowLimit only for LEND_AND_BORROW).
  function strategyOf(share) {
    return share.resourceSharingConfiguration.strategy;
  }

  function borrowLimitText(share) {
    const limit = share.resourceSharingConfiguration.borrowLimit;
    if (limit === null || limit === undefined) return "-";
    return limit === -1 ? "no limit" : `${limit}%`;
  }

  function inSharePreemptionOf(share) {
    return share.preemptionConfiguration.inSharePreemption;
  }

  function sharesTable(shares, colorOf) {
    const rows = [];
    for (const share of shares) {
      const units = share.usage.length ? share.usage : [null];
      units.forEach((usage, index) => {
        const first = index === 0;
        const cells = first
          ? [
              el("td", { rowspan: units.length },
                el("span", { class: "swatch", style: `background:${colorOf(share.quotaShareName)}` }),
                shareLink(share.jobQueueName, share.quotaShareName)),
              el("td", { rowspan: units.length }, strategyOf(share)),
              el("td", { rowspan: units.length, class: "num" }, borrowLimitText(share)),
              el("td", { rowspan: units.length }, inSharePreemptionOf(share)),
              el("td", { rowspan: units.length }, share.state),
            ]
          : [];
        const numbers = usage
          ? [
              usage.capacityUnit,
              usage.limit,
              usage.ceiling,
              usage.own,
              usage.borrowed,
              usage.lent,
              usage.idle,
              usage.running,
              usage.runnable,
            ]
          : ["-", "", "", "", "", "", "", "", ""];
        rows.push(el("tr", { class: share.quotaShareName === focusShare ? "focus" : null, "data-share": share.quotaShareName },
          cells, numbers.map((value, i) => el("td", { class: i ? "num" : null }, value))));
      });
    }
    const headers = ["Quota share", "Strategy", "Borrow limit", "In-share preemption", "State", "Capacity unit",
      "Limit", "Ceiling", "Own", "Borrowed", "Lent", "Idle", "RUNNING", "RUNNABLE"];
    return el("table", { class: "shares" },
      el("thead", {}, el("tr", {}, headers.map((header, i) => el("th", { class: i > 5 || i === 2 ? "num" : null }, header)))),
      el("tbody", {}, rows));
  }

  function shareCard(share) {
    const facts = [
      ["Job queue", share.jobQueueName],
      ["Strategy", strategyOf(share)],
      ["Borrow limit", borrowLimitText(share)],
      ["In-share preemption", inSharePreemptionOf(share)],
      ["State", share.state],
    ];
    if (share.scheduler === "AWS_BATCH") {
      facts.push(["Scheduled by", "AWS Batch (read from AWS Batch)"]);
      for (const used of share.capacityUsage) facts.push([used.capacityUnit, `${used.quantity} in use`]);
      if (share.error) facts.push(["Error", share.error]);
    }
    for (const usage of share.usage) {
      facts.push([usage.capacityUnit,
        `limit ${usage.limit}, ceiling ${usage.ceiling}: ${usage.used} in use (${usage.own} own, ${usage.borrowed} borrowed), ` +
        `${usage.lent} lent, ${usage.idle} idle; ${usage.running} RUNNING, ${usage.runnable} RUNNABLE`]);
    }
    return el("dl", { class: "share-card" }, facts.map(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
  }

  // --- jobs ----------------------------------------------------------------------------------------

  function plainReason(job) {
    const reason = job.statusReason || "";
    for (const [code, words] of Object.entries(NEVER)) {
      if (reason.startsWith(code)) return `${words} (${code})`;
    }
    return reason;
  }

  // Who holds a capacity unit now, and which idle units cannot be lent (RESERVE): what a waiting job waits on.
  // From the queue's snapshot (its units laid out by owner) and its shares' strategies.
  let holdersOf = () => null;

  function holdersIndex(queues, snapshots, shareLists) {
    const index = new Map();
    queues.forEach((queue, i) => {
      const strategies = new Map(shareLists[i].quotaShares.map((share) => [share.quotaShareName, strategyOf(share)]));
      for (const unit of snapshots[i].capacity) index.set(`${queue.jobQueueName} ${unit.capacityUnit}`, { unit, strategies });
    });
    return (job) => {
      const found = index.get(`${job.jobQueueName} ${job.capacityUnit}`);
      return found ? holdersText(found.unit, found.strategies) : null;
    };
  }

  function holdersText(unit, strategies) {
    const held = unit.quotaShares.filter((share) => share.used).map((share) =>
      `${share.quotaShareName} ${share.own}` + (share.borrowed
        ? ` + ${share.borrowed} borrowed (from ${share.borrowedFrom.map((from) => from.quotaShareName ?? "unowned capacity").join(", ")})`
        : ""));
    const idle = unit.quotaShares.filter((share) => share.idle).map((share) =>
      `${share.idle} of ${share.quotaShareName}` + (strategies.get(share.quotaShareName) === "RESERVE" ? " (RESERVE: never lent)" : ""));
    if (unit.unownedIdle) idle.push(`${unit.unownedIdle} no share owns`);
    const parts = [`${unit.capacityUnit} in use: ${held.length ? held.join(", ") : "none"}`];
    if (unit.stopping) parts.push(`${unit.stopping} still held by jobs being stopped`);
    parts.push(idle.length ? `idle: ${idle.join(", ")}` : "the queue is full");
    return parts.join("; ");
  }

  function whyCell(job) {
    const lines = [];
    const summary = job.preemptionSummary;
    if (summary.beingPreemptedBy) {
      lines.push(el("div", { class: "preempted" },
        `Being preempted by ${summary.beingPreemptedBy}` +
        (summary.lastPreemptedAt ? ` (decided ${time(summary.lastPreemptedAt)}, ${summary.lastPreemptionRule || ""})` : "")));
    }
    const reason = plainReason(job);
    if (reason) lines.push(el("div", {}, reason));
    const holders = job.status === "RUNNABLE" ? holdersOf(job) : null;
    if (holders) lines.push(el("div", { class: "muted holders" }, holders));
    if (summary.preemptedAttemptCount) {
      const last = summary.recentPreemptedAttempts[summary.recentPreemptedAttempts.length - 1];
      lines.push(el("div", { class: "preempted" },
        `Preempted ${plural(summary.preemptedAttemptCount, "time")}` +
        (last ? `, last by ${last.preemptedBy || "?"} at ${time(last.stoppedAt)}` : "")));
    }
    return el("td", { class: "reason" }, lines);
  }

  function leaseText(job) {
    const lease = job.lease;
    if (!lease.instanceCount) return "";
    return `holds ${lease.instanceCount}` + (lease.borrowed ? ` (${lease.borrowed} borrowed)` : "") +
      (lease.devices && lease.devices.length ? `, GPUs ${lease.devices.join(",")}` : "");
  }

  function jobsTable(jobs) {
    const rows = jobs.map((job) => {
      const ti = job.taskInstance;
      const taskLink = el("a", { href: airflowBase + ti.path, target: "_top", title: job.jobId },
        `${ti.dagId} / ${ti.taskId}` + (ti.mapIndex >= 0 ? ` [${ti.mapIndex}]` : ""));
      const training = job.trainingJob
        ? job.trainingJob.consoleUrl
          ? el("a", { href: job.trainingJob.consoleUrl, target: "_blank", rel: "noopener" }, job.trainingJob.name)
          : job.trainingJob.name
        : "";
      const stopping = job.preemptionSummary.beingPreemptedBy ? badge("stopping", "stopping") : null;
      return el("tr", { "data-job": job.jobId, class: job.quotaShareName === focusShare ? "focus" : null },
        el("td", {}, job.quotaShareName),
        el("td", { class: "num" }, job.position ?? ""),
        el("td", {}, taskLink, el("div", { class: "muted" }, `run ${ti.runId}, try ${ti.tryNumber}`)),
        el("td", { class: "num" }, job.schedulingPriority),
        el("td", {}, badge(job.status), " ", stopping),
        el("td", {}, `${job.instanceCount} × ${job.capacityUnit}`, el("div", { class: "muted" }, leaseText(job))),
        whyCell(job),
        el("td", {}, training));
    });
    const headers = ["Quota share", "Position", "Task instance", "Priority", "Status", "Capacity", "Why it waits / what happened", "Training job"];
    return el("table", { class: "jobs" },
      el("thead", {}, el("tr", {}, headers.map((header, i) => el("th", { class: i === 1 || i === 3 ? "num" : null }, header)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "No jobs."))));
  }

  // A job id is dag_id/run_id/task_id/map_index/try_number (a run id may hold slashes: read from both ends).
  function jobParts(jobId) {
    const parts = (jobId || "").split("/");
    if (parts.length < 5) return null;
    const [mapIndex, tryNumber] = parts.slice(-2).map(Number);
    return { dagId: parts[0], runId: parts.slice(1, -3).join("/"), taskId: parts[parts.length - 3], mapIndex, tryNumber };
  }

  function jobLabel(jobId) {
    const job = jobParts(jobId);
    if (!job) return jobId || "";
    return `${job.dagId} / ${job.taskId}` + (job.mapIndex >= 0 ? ` [${job.mapIndex}]` : "") +
      (job.tryNumber > 1 ? ` try ${job.tryNumber}` : "");
  }

  function jobCell(jobId) {
    const job = jobParts(jobId);
    if (!job) return el("td", {}, jobId || "");
    return el("td", { class: "job", title: jobId }, jobLabel(jobId), el("div", { class: "muted" }, `run ${job.runId}`));
  }

  // The decision kinds (the audit log's, as the page's body names them), the Decision filter's choices.
  const DECISION_KINDS = body.decisionKinds.split(" ");

  function filtering() {
    return Object.values(decisionFilters).some(Boolean);
  }

  // The /events query of the filters set: the server picks from the whole audit log (a DAG run's choice is
  // "dag / run": a DAG id has no spaces).
  function decisionQuery(shareFilter) {
    const run = decisionFilters.run ? decisionFilters.run.split(" / ") : [];
    return query({
      ...shareFilter,
      quotaShareName: decisionFilters.share || shareFilter.quotaShareName,
      jobId: decisionFilters.job || null,
      dagId: run.length ? run[0] : null,
      runId: run.length ? run.slice(1).join(" / ") : null,
      kind: decisionFilters.kind || null,
      limit: DECISIONS_READ,
    });
  }

  // Filters over the decisions: share, job, DAG run, decision kind. Their choices: the shares shown, the jobs
  // (and their DAG runs) of the last decisions and of the jobs listed, every decision kind.
  function filterBar(events, shareNames, jobIds) {
    const jobs = [...events.flatMap((event) => [event.jobId, event.relatedJobId]), ...jobIds].filter(Boolean);
    const choices = {
      share: new Set(shareNames),
      job: new Set(jobs),
      run: new Set(jobs.map(jobParts).filter(Boolean).map((job) => `${job.dagId} / ${job.runId}`)),
      kind: new Set(DECISION_KINDS),
    };
    const names = { share: "Quota share", job: "Job", run: "DAG run", kind: "Decision" };
    const bar = decisionFilterBar || (decisionFilterBar = el("div", { class: "filters", id: "decision-filters" }));
    bar.replaceChildren(...Object.entries(names).map(([key, name]) => {
      const values = key === "kind" ? [...choices[key]] : [...choices[key]].sort();
      if (decisionFilters[key] && !choices[key].has(decisionFilters[key])) values.unshift(decisionFilters[key]);
      const select = el("select", { name: key, "aria-label": name },
        el("option", { value: "" }, `${name}: all`),
        values.map((value) => el("option", { value, selected: value === decisionFilters[key] ? "selected" : null },
          key === "job" ? jobLabel(value) : value)));
      select.addEventListener("change", () => {
        decisionFilters[key] = select.value;
        refresh();
      });
      return el("label", {}, select);
    }));
    return bar;
  }

  // Decisions read (the newest that match the filters, from the whole audit log), and drawn at most.
  const DECISIONS_READ = 200;
  const DECISIONS_SHOWN = 50;

  function eventsTable(matching) {
    const shown = matching.slice(0, DECISIONS_SHOWN);
    const rows = shown.map((event) =>
      el("tr", { "data-kind": event.kind, "data-job": event.jobId || "" },
        el("td", {}, dateTime(event.at)),
        el("td", {}, badge(event.kind)),
        el("td", {}, event.quotaShareName || ""),
        jobCell(event.jobId),
        el("td", {}, event.message)));
    const empty = filtering() ? "No decision matches these filters." : "No events yet.";
    const table = el("table", { class: "events" },
      el("thead", {}, el("tr", {}, ["At", "Decision", "Quota share", "Job", "What happened"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 5, class: "muted" }, empty))));
    const more = matching.length > shown.length
      ? el("p", { class: "muted" }, `The newest ${shown.length} of the last ${matching.length} ` +
        `${filtering() ? "matching " : ""}decisions; the filters search the whole audit log, the REST API's ` +
        "/events pages through all.")
      : null;
    return el("div", {}, table, more);
  }

  // --- job queues AWS Batch schedules: read from AWS Batch ------------------------------------------

  const SCHEDULED_BY_AWS = "scheduled by AWS Batch";

  // One unit of the queue's capacity: what each share's jobs use now (GetJobQueueSnapshot), the rest idle.
  function awsUnitBar(limit, usage, colorOf) {
    const used = usage.filter((entry) => entry.capacityUnit === limit.capacityUnit && entry.quantity);
    const inUse = used.reduce((sum, entry) => sum + entry.quantity, 0);
    const total = Math.max(limit.maxCapacity, inUse);
    const idle = Math.max(0, limit.maxCapacity - inUse);
    const segments = used.map((entry) => segment(entry.quantity, total, colorOf(entry.quotaShareName),
      `${entry.quotaShareName} ${entry.quantity}`, `${entry.quotaShareName}: ${entry.quantity} in use`));
    if (idle) segments.push(segment(idle, total, "transparent", `idle ${idle}`, `${idle} idle`, "idle"));
    return el("div", { class: "unit", "data-unit": limit.capacityUnit },
      el("div", { class: "unit-title" },
        el("span", {}, limit.capacityUnit),
        el("span", { class: "queue-total" }, `${limit.maxCapacity} total: ${inUse} in use, ${idle} idle`)),
      el("div", { class: "bar" }, segments));
  }

  function awsSharesTable(shares, colorOf) {
    const rows = shares.map((share) => {
      const limits = share.capacityLimits.map((limit) => `${limit.capacityUnit} × ${limit.maxCapacity}`).join(", ");
      const used = share.capacityUsage.map((entry) => `${entry.capacityUnit} × ${entry.quantity}`).join(", ");
      return el("tr", { class: share.quotaShareName === focusShare ? "focus" : null, "data-share": share.quotaShareName },
        el("td", {},
          el("span", { class: "swatch", style: `background:${colorOf(share.quotaShareName)}` }),
          shareLink(share.jobQueueName, share.quotaShareName)),
        el("td", {}, strategyOf(share)),
        el("td", { class: "num" }, borrowLimitText(share)),
        el("td", {}, inSharePreemptionOf(share)),
        el("td", {}, share.state),
        el("td", {}, limits),
        el("td", {}, used || "none"));
    });
    const headers = ["Quota share", "Strategy", "Borrow limit", "In-share preemption", "State", "Capacity limits", "In use"];
    return el("table", { class: "shares", "data-scheduler": "AWS_BATCH" },
      el("thead", {}, el("tr", {}, headers.map((header, i) => el("th", { class: i === 2 ? "num" : null }, header)))),
      el("tbody", {}, rows));
  }

  function serviceJobsTable(jobs, positions) {
    const rows = jobs.map((job) => {
      const training = job.trainingJob
        ? el("a", { href: job.trainingJob.consoleUrl, target: "_blank", rel: "noopener" }, job.trainingJob.name)
        : "";
      const used = job.capacityUsage.map((entry) => `${entry.quantity} × ${entry.capacityUnit}`).join(", ");
      return el("tr", { "data-job": job.jobId, class: job.quotaShareName === focusShare ? "focus" : null },
        el("td", {}, job.quotaShareName || ""),
        el("td", { class: "num" }, positions.get(job.jobArn) ?? ""),
        el("td", { title: job.jobArn }, job.jobName || job.jobId, el("div", { class: "muted" }, job.jobId)),
        el("td", {}, badge(job.status)),
        el("td", {}, used),
        el("td", { class: "reason" }, plainReason(job)),
        el("td", {}, dateTime(job.createdAt)),
        el("td", {}, training));
    });
    const headers = ["Quota share", "Position", "Service job", "Status", "Capacity", "Why it waits / what happened", "Created", "Training job"];
    return el("table", { class: "jobs service-jobs" },
      el("thead", {}, el("tr", {}, headers.map((header, i) => el("th", { class: i === 1 ? "num" : null }, header)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "No service jobs."))));
  }

  function awsQueueSection(queue, snapshot, shares, jobs, colorOf) {
    const usage = snapshot.queueUtilization.quotaShareUtilization.topCapacityUtilization.flatMap((share) =>
      share.capacityUsage.map((entry) => ({ ...entry, quotaShareName: share.quotaShareName })));
    const positions = new Map();
    for (const front of Object.values(snapshot.frontOfQuotaShares.quotaShares)) {
      for (const job of front) positions.set(job.jobArn, job.position);
    }
    const errors = [...new Set([snapshot.error, jobs.open.error, jobs.finished.error, ...shares.map((s) => s.error)].filter(Boolean))];
    return el("section", { class: "queue", "data-queue": queue.jobQueueName, "data-scheduler": "AWS_BATCH" },
      el("h2", {}, `Job queue ${queue.jobQueueName} `, el("span", { class: "badge aws-batch" }, SCHEDULED_BY_AWS),
        el("span", { class: "muted", style: "font-weight:400;font-size:13px" }, `  revision ${queue.revision}`)),
      el("p", { class: "muted" }, "AWS Batch admits, preempts and re-queues this queue's jobs: its shares, the capacity " +
        "in use and its service jobs are read from AWS Batch. The GPU timeline and the decisions below are our allocator's."),
      errors.map((message) => el("div", { class: "error" }, message)),
      snapshot.error ? null : queue.capacityLimits.map((limit) => awsUnitBar(limit, usage, colorOf)),
      el("h3", {}, "Quota shares"),
      awsSharesTable(shares, colorOf),
      el("h3", {}, "Service jobs"),
      serviceJobsTable(jobs.open.jobs, positions),
      jobs.finished.jobs.length ? [el("h3", {}, "Recently finished"), serviceJobsTable(jobs.finished.jobs, positions)] : null);
  }

  // --- the GPU timeline ----------------------------------------------------------------------------

  function windowPicker() {
    return el("div", { class: "window-picker", role: "group", "aria-label": "Timeline window" },
      WINDOWS.map(([value, label]) => {
        const button = el("button", { type: "button", "data-window": value, "aria-pressed": String(value === timelineWindow) }, label);
        button.addEventListener("click", () => {
          timelineWindow = value;
          window.localStorage.setItem("quota-timeline-window", value);
          refresh();
        });
        return button;
      }));
  }

  // More jobs touched the window than the timeline replays: it draws the newest, and says so.
  function truncatedNotice(queueName, timeline) {
    if (!timeline.truncated) return null;
    const shorter = WINDOWS.slice(0, WINDOWS.findIndex(([value]) => value === timelineWindow))
      .map(([, label]) => label.toLowerCase());
    return el("p", { class: "notice timeline-truncated", "data-queue": queueName, role: "status" },
      `Only the newest ${plural(timeline.jobLimit, "job")} of this window are drawn: older jobs that ran or ` +
      "waited in it are left out. " +
      (shorter.length ? `A shorter window (${shorter.join(", ")}) may draw all of its jobs; for` : "For") +
      " older ones, ask the REST API's ",
      el("code", {}, `GET ${api}/jobQueues/${queueName}/timeline?since=...&until=...`), ".");
  }

  function timelineSection(queueName, timeline, colorOf) {
    let host = timelineHosts.get(queueName);
    if (!host) {
      host = el("div", {});
      timelineHosts.set(queueName, host);
    }
    QuotaTimeline.draw(host, timeline, { colorOf, dark: isDark(), focusShare, airflowBase });
    return host;
  }

  // --- the page ------------------------------------------------------------------------------------

  async function load() {
    const filtersAsked = JSON.stringify(decisionFilters);
    const queues = (await get("/jobQueues")).jobQueues.filter((q) => !focusQueue || q.jobQueueName === focusQueue);
    const shareFilter = { jobQueueName: focusQueue, quotaShareName: focusShare };
    const [snapshots, shareLists, unfinished, finished, events] = await Promise.all([
      Promise.all(queues.map((q) => get(`/jobQueues/${encodeURIComponent(q.jobQueueName)}/snapshot`))),
      Promise.all(queues.map((q) => get("/quotaShares" + query({ jobQueueName: q.jobQueueName })))),
      get("/jobs" + query({ ...shareFilter, finished: "false", limit: OPEN_JOBS })),
      get("/jobs" + query({ ...shareFilter, finished: "true", limit: 10 })),
      get("/events" + query({ ...shareFilter, limit: DECISIONS_READ })),
    ]);
    const filtered = filtering() ? await get("/events" + decisionQuery(shareFilter)) : events;
    const byAws = (q) => q.scheduler === "AWS_BATCH";
    const timelines = await Promise.all(queues.map((q) => byAws(q) ? null :
      get(`/jobQueues/${encodeURIComponent(q.jobQueueName)}/timeline` + query({ window: timelineWindow }))));
    const serviceJobs = await Promise.all(queues.map(async (q) => {
      if (!byAws(q)) return null;
      const path = `/jobQueues/${encodeURIComponent(q.jobQueueName)}/serviceJobs`;
      const [open, done] = await Promise.all([
        get(path + query({ quotaShareName: focusShare, limit: OPEN_JOBS })),
        get(path + query({ quotaShareName: focusShare, finished: "true", limit: 10 })),
      ]);
      return { open, finished: done };
    }));
    // The filters changed while this load read the server: the load the change started draws the page.
    if (JSON.stringify(decisionFilters) !== filtersAsked) return;
    holdersOf = holdersIndex(queues, snapshots, shareLists);
    const content = [];
    if (focusShare) {
      const share = shareLists.flatMap((list) => list.quotaShares).find((s) => s.quotaShareName === focusShare);
      content.push(el("p", {}, el("a", { href: api.replace(/\/api$/, "") + "/" }, "← All job queues")));
      content.push(share ? shareCard(share) : el("div", { class: "error" }, `No quota share ${focusShare} in ${focusQueue}.`));
    }
    if (!queues.length) {
      content.push(el("p", {}, "No job queues are applied: apply a quota file with ", el("code", {}, "airflow quota apply -f FILE"), "."));
    }
    queues.forEach((queue, index) => {
      const shares = shareLists[index].quotaShares;
      const palette = new Map(queue.quotaShareNames.map((name, i) => [name, COLORS[i % COLORS.length]]));
      const colorOf = (name) => palette.get(name) || "#6e7781";
      if (byAws(queue)) {
        content.push(awsQueueSection(queue, snapshots[index], shares, serviceJobs[index], colorOf));
        return;
      }
      content.push(el("section", { class: "queue", "data-queue": queue.jobQueueName },
        el("h2", {}, `Job queue ${queue.jobQueueName}`,
          el("span", { class: "muted", style: "font-weight:400;font-size:13px" }, `  revision ${queue.revision}`)),
        snapshots[index].capacity.map((unit) => unitBar(queue.jobQueueName, unit, colorOf)),
        el("h3", {}, "GPU timeline"),
        windowPicker(),
        truncatedNotice(queue.jobQueueName, timelines[index]),
        timelineSection(queue.jobQueueName, timelines[index], colorOf),
        el("h3", {}, "Quota shares"),
        sharesTable(shares, colorOf)));
    });
    content.push(el("h2", {}, focusShare ? `Jobs of ${focusShare}` : "Jobs"), jobsTable(unfinished.jobs));
    if (unfinished.total !== unfinished.jobs.length) {
      const total = unfinished.total === null ? "more than 10,000" : unfinished.total;
      content.push(el("p", { class: "muted", id: "jobs-cut" },
        `The newest ${unfinished.jobs.length} of ${total} unfinished jobs; the REST API pages through all of them.`));
    }
    if (finished.jobs.length) {
      content.push(el("h3", {}, "Recently finished"), jobsTable(finished.jobs.slice().reverse()));
    }
    const shareNames = shareLists.flatMap((list) => list.quotaShares.map((share) => share.quotaShareName));
    const listed = [...unfinished.jobs, ...finished.jobs].map((job) => job.jobId);
    const bar = filterBar(events.events, shareNames, listed);
    const decisions = el("div", { id: "decisions" }, eventsTable(filtered.events.slice().reverse()));
    content.push(el("h2", {}, "Recent decisions"), bar, decisions);
    QuotaTimeline.showContent(content, timelineHosts.values());
  }

  const isDark = QuotaTimeline.isDark;
  const refresh = QuotaTimeline.keepFresh(load, refreshMs,
    () => `Updated ${time(new Date().toISOString())} · refreshes every ${refreshMs / 1000} s · ${body.user}`);
})();
