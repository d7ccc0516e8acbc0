// A task instance's "Quota" view (a tab of the task instance in Airflow's UI): the timeline of its jobs
// (every try) and their story in order: waits, grants, preemptions, stops, resumes. Reads
// GET /quota/api/taskInstances/timeline every few seconds; a task on a job queue AWS Batch schedules has
// no job in the ledger: its AWS Batch service job is read instead (GET /quota/api/taskInstances/serviceJobs).
"use strict";

(function () {
  const body = document.body.dataset;
  const api = body.api;
  const refreshMs = 1000 * Number(body.refreshSeconds || 5);
  const task = { dagId: body.dagId, runId: body.runId, taskId: body.taskId, mapIndex: body.mapIndex };
  const hosts = new Map();

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
    }
    for (const child of children.flat(Infinity)) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child instanceof Node ? child : document.createTextNode(String(child)));
      }
    }
    return node;
  }

  function dateTime(iso) {
    const at = new Date(iso);
    return at.toLocaleDateString([], { month: "short", day: "numeric" }) + " " +
      at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  // The story of the task instance's jobs: one line per wait, grant, preemption, stop and end.
  function storyOf(timeline) {
    const lines = [];
    const jobs = new Map(timeline.jobs.map((job) => [job.jobId, job]));
    for (const job of timeline.jobs) {
      for (const wait of job.waits) lines.push({ at: wait.startedAt, kind: "WAITING", job, text: wait.reason });
    }
    const phases = new Map();
    for (const unit of timeline.units) {
      for (const bar of unit.bars) {
        const key = `${bar.jobId} ${bar.phase} ${bar.startedAt}`;
        const phase = phases.get(key) || { ...bar, units: 0, borrowedUnits: 0 };
        phase.units += 1;
        phase.borrowedUnits += bar.borrowed ? 1 : 0;
        phases.set(key, phase);
      }
    }
    for (const phase of phases.values()) {
      const job = jobs.get(phase.jobId) || { jobId: phase.jobId };
      const held = `${phase.units} ${phase.capacityUnit}`;
      if (phase.phase === "RUNNING") {
        const borrowed = phase.borrowedUnits ? ` (${phase.borrowedUnits} borrowed)` : "";
        const resumed = phase.attempt > 1 ? `, attempt ${phase.attempt}: resumed from its checkpoint` : "";
        lines.push({ at: phase.startedAt, kind: "GRANTED", job, text: `Granted ${held}${borrowed}${resumed}` });
      } else {
        lines.push({ at: phase.startedAt, kind: phase.preemptedBy ? "PREEMPTED" : "TERMINATED", job,
          text: phase.preemptedBy
            ? `Preempted by ${phase.preemptedBy} (${phase.rule || "preemption"}): stopping its training job, ` +
              `still holding its ${held} until it has stopped`
            : `Terminated: stopping its training job, still holding its ${held}` });
      }
      if (phase.endedBy === "REQUEUED") {
        lines.push({ at: phase.endedAt, kind: "REQUEUED", job, text: "Stopped: back in the queue at its original position" });
      } else if (phase.endedBy === "SUCCEEDED" || phase.endedBy === "FAILED") {
        lines.push({ at: phase.endedAt, kind: phase.endedBy, job, text: `Released its ${held}` });
      }
    }
    const order = ["REQUEUED", "SUCCEEDED", "FAILED", "WAITING", "GRANTED", "PREEMPTED", "TERMINATED"];
    return lines.sort((a, b) => Date.parse(a.at) - Date.parse(b.at) || order.indexOf(a.kind) - order.indexOf(b.kind));
  }

  function storyTable(lines, tries) {
    const headers = ["At", "What", ...(tries > 1 ? ["Try"] : []), "Details"];
    return el("table", { class: "story" },
      el("thead", {}, el("tr", {}, headers.map((header) => el("th", {}, header)))),
      el("tbody", {}, lines.map((line) => el("tr", { "data-kind": line.kind },
        el("td", {}, dateTime(line.at)),
        el("td", {}, el("span", { class: `badge ${line.kind}` }, line.kind)),
        tries > 1 ? el("td", {}, line.job.taskInstance ? line.job.taskInstance.tryNumber : "") : null,
        el("td", {}, line.text)))));
  }

  // A service job of a queue AWS Batch schedules: its status, preemptions and training jobs, from AWS Batch.
  function serviceJobSection(job) {
    const summary = job.preemptionSummary || { preemptedAttemptCount: 0, recentPreemptedAttempts: [] };
    const training = (value) => value && value.split("/").pop();
    const rows = summary.recentPreemptedAttempts.map((attempt) => el("tr", { "data-kind": "PREEMPTED" },
      el("td", {}, attempt.stoppedAt ? dateTime(attempt.stoppedAt) : ""),
      el("td", {}, el("span", { class: "badge PREEMPTED" }, "PREEMPTED")),
      el("td", {}, `Training job ${training(attempt.serviceResourceId && attempt.serviceResourceId.value) || "?"}` +
        (attempt.startedAt ? ` (started ${dateTime(attempt.startedAt)})` : "") +
        (attempt.statusReason ? `: ${attempt.statusReason}` : ""))));
    const latest = job.trainingJob
      ? el("p", {}, "Latest training job: ",
        el("a", { href: job.trainingJob.consoleUrl, target: "_blank", rel: "noopener" }, job.trainingJob.name))
      : null;
    return el("section", { class: "queue", "data-queue": job.jobQueueName, "data-scheduler": "AWS_BATCH" },
      el("h2", {}, `Job queue ${job.jobQueueName} `, el("span", { class: "badge aws-batch" }, "scheduled by AWS Batch")),
      el("p", { "data-service-job": job.jobId }, `Service job ${job.jobName} (${job.jobId}) · quota share ${job.quotaShareName} · ` +
        `schedulingPriority ${job.schedulingPriority} · now ${job.status}` + (job.statusReason ? `: ${job.statusReason}` : "")),
      latest,
      el("h3", {}, `Preempted ${summary.preemptedAttemptCount} time${summary.preemptedAttemptCount === 1 ? "" : "s"}`),
      rows.length ? el("table", { class: "story" }, el("tbody", {}, rows)) : null);
  }

  // The API's answer about this task instance; a refusal other than `allowed` (404: no job in the ledger)
  // throws an error that carries its HTTP status (401: the session ended, and `keepFresh` offers a new log-in).
  async function ask(path, allowed) {
    const response = await fetch(`${api}${path}?` + new URLSearchParams(task).toString(), {
      credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok && response.status !== allowed) {
      const error = new Error(`${response.status} ${response.statusText}`);
      error.status = response.status;
      throw error;
    }
    return response;
  }

  async function serviceJobsContent() {
    const found = await (await ask("/taskInstances/serviceJobs")).json();
    return [...found.errors.map((message) => el("div", { class: "error" }, message)), ...found.jobs.map(serviceJobSection)];
  }

  async function load() {
    const response = await ask("/taskInstances/timeline", 404);
    const content = [];
    if (response.status === 404) {
      const aws = await serviceJobsContent();
      if (aws.length) content.push(...aws);
      else content.push(el("p", { class: "muted" }, "This task instance has no job in the quota ledger: it does not " +
        "use QuotaTrainingOperator, or has not asked for capacity yet."));
    } else {
      for (const timeline of (await response.json()).timelines) {
        let host = hosts.get(timeline.jobQueueName);
        if (!host) hosts.set(timeline.jobQueueName, (host = el("div", {})));
        const colorOf = QuotaTimeline.palette(timeline.quotaShareNames);
        QuotaTimeline.draw(host, timeline, { colorOf, dark: QuotaTimeline.isDark(), airflowBase: body.airflowBase });
        const job = timeline.jobs[timeline.jobs.length - 1];
        content.push(el("section", { class: "queue", "data-queue": timeline.jobQueueName },
          el("h2", {}, `Job queue ${timeline.jobQueueName}`),
          job ? el("p", {}, `Quota share ${job.quotaShareName} · schedulingPriority ${job.schedulingPriority} · ` +
            `${job.instanceCount} × ${job.capacityUnit} · now ${job.status}` +
            (job.statusReason ? `: ${job.statusReason}` : "")) : null,
          host,
          el("h3", {}, "What happened"),
          storyTable(storyOf(timeline), timeline.jobs.length)));
      }
    }
    QuotaTimeline.showContent(content, hosts.values());
  }

  // A session that ended says so, with the GPU Quotas page's link to Airflow's login page (QuotaTimeline's:
  // next= Airflow's own address of this view, opened in Airflow's window); other failures are retried.
  QuotaTimeline.keepFresh(load, refreshMs, () => `${task.dagId} · ${task.runId}` +
    (task.mapIndex !== "-1" ? ` · map index ${task.mapIndex}` : "") + ` · refreshes every ${refreshMs / 1000} s`);
})();
