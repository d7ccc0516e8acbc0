// The GPU Quotas page: every job queue's capacity (who holds which unit, who borrows), its GPU timeline, its
// quota shares, the jobs and why they wait, the recently finished, and the latest decisions with filters.
// /plugin/gpu-quotas/shares/<queue>/<share> is the same page focused on one share.
import { Box, Button, Code, Flex, Link, NativeSelect, Table, Text } from "@chakra-ui/react";
import { useState } from "react";
import { useLocation, useNavigate } from "react-router-dom";

import { airflowBase, apiBase, must, query } from "./api";
import { clock, dateClock, gpuHours, lostText, namer, palette, plural, withNames } from "./format";
import { usePoll } from "./hooks";
import { GpuTimeline } from "./Timeline";
import type {
  AuditEvent, Job, JobList, JobQueue, Lending, LostWork, QuotaShare, ServiceJob, ServiceJobList, ShareLostWork, Snapshot, SnapshotUnit,
  Timeline,
} from "./types";
import { DataTable, ErrorBox, PageHeader, SectionHeading, StatusBadge, Swatch, UtcNote } from "./ui";

/** The audit log's decision kinds (ledger.models.AuditKind; tests/unit/test_page_bundle.py keeps them equal). */
export const DECISION_KINDS = ["SUBMITTED", "GRANTED", "PREEMPTED", "PROMISED", "REQUEUED", "SUCCEEDED", "FAILED",
  "TERMINATED", "CONFIG_CHANGED", "PRIORITY_CHANGED", "HANDED_OVER"];
const OPEN_JOBS = 1000;
const FINISHED_SHOWN = 10;
const DECISIONS_READ = 200;
const DECISIONS_SHOWN = 50;
const WINDOWS: [string, string][] = [["fit", "Fit to its jobs"], ["15m", "15 min"], ["1h", "1 hour"], ["1d", "1 day"],
  ["all", "Since the first job"]];
/** The window the REST API is asked for ("fit" draws at most the last hour), and how the page says it. */
const apiWindow = (picked: string) => (picked === "fit" ? "1h" : picked);
const WINDOW_WORDS: Record<string, string> = { "15m": "in the last 15 min", "1h": "in the last hour", "1d": "in the last day",
  all: "since the first job" };
const NEVER: Record<string, string> = {
  "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE": "Can never start: it needs more of its capacity unit than the job queue has",
  "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED": "Can never start: it needs more than its quota share can ever hold",
};

type Filters = { share: string; job: string; run: string; kind: string };
const NO_FILTERS: Filters = { share: "", job: "", run: "", kind: "" };

type QueueData = {
  queue: JobQueue;
  snapshot: Snapshot;
  shares: QuotaShare[];
  timeline: Timeline | null;
  serviceJobs: { open: ServiceJobList; finished: ServiceJobList } | null;
};

type PageData = {
  queues: QueueData[];
  unfinished: JobList;
  finished: Job[];
  events: AuditEvent[];
  matching: AuditEvent[];
};

const strategyOf = (share: QuotaShare) => share.resourceSharingConfiguration.strategy;

function borrowLimitText(share: QuotaShare): string {
  const limit = share.resourceSharingConfiguration.borrowLimit;
  if (limit === null || limit === undefined) return "-";
  return limit === -1 ? "no limit" : `${limit}%`;
}

const lendingText = (entries: Lending[], direction: string) =>
  entries.map((entry) => `${entry.units} ${direction} ${entry.quotaShareName ?? "unowned capacity"}`).join(", ");

function plainReason(reason: string | null | undefined): string {
  const text = reason ?? "";
  for (const [code, words] of Object.entries(NEVER)) if (text.startsWith(code)) return `${words} (${code})`;
  return text;
}

/** Who holds a capacity unit now, and which idle units cannot be lent (RESERVE): what a waiting job waits on. */
function holdersText(unit: SnapshotUnit, strategies: Map<string, string>): string {
  const held = unit.quotaShares.filter((share) => share.used).map((share) => `${share.quotaShareName} ${share.own}` +
    (share.borrowed ? ` + ${share.borrowed} borrowed (from ${share.borrowedFrom.map((from) => from.quotaShareName ?? "unowned capacity").join(", ")})` : ""));
  const idle = unit.quotaShares.filter((share) => share.idle).map((share) =>
    `${share.idle} of ${share.quotaShareName}` + (strategies.get(share.quotaShareName) === "RESERVE" ? " (RESERVE: never lent)" : ""));
  if (unit.unownedIdle) idle.push(`${unit.unownedIdle} no share owns`);
  const parts = [`${unit.capacityUnit} in use: ${held.length ? held.join(", ") : "none"}`];
  if (unit.stopping) parts.push(`${unit.stopping} still held by jobs being stopped`);
  parts.push(idle.length ? `idle: ${idle.join(", ")}` : "the queue is full");
  return parts.join("; ");
}

function Segment({ units, total, color, label, title, className }: {
  units: number; total: number; color: string; label: string; title: string; className?: string;
}) {
  const hatch = className?.includes("hatch");
  return (
    <Box className={`seg ${className ?? ""}`} title={title} height="100%" overflow="hidden" whiteSpace="nowrap"
      textOverflow="ellipsis" fontSize="xs" px={1} lineHeight="24px" borderRightWidth="1px" borderColor="bg"
      color={className?.includes("idle") ? "fg.muted" : "white"}
      style={{
        width: `${total ? (100 * units) / total : 0}%`,
        backgroundColor: color,
        backgroundImage: hatch ? "repeating-linear-gradient(45deg, rgba(255,255,255,.25) 0 4px, transparent 4px 8px)" : undefined,
      }}>
      {label}
    </Box>
  );
}

function UnitBar({ unit, colorOf, focus }: { unit: SnapshotUnit; colorOf: (s: string | null) => string; focus: string | null }) {
  const inUse = unit.quotaShares.reduce((sum, share) => sum + share.used, 0);
  const idle = unit.quotaShares.reduce((sum, share) => sum + share.idle, 0) + unit.unownedIdle;
  const total = Math.max(unit.capacity, unit.quotaShares.reduce((sum, share) => sum + share.limit, 0) + unit.unowned + unit.overdraft);
  const segments = [];
  for (const share of unit.quotaShares) {
    const name = share.quotaShareName;
    const f = name === focus ? "focus" : "";
    if (share.own) segments.push(<Segment key={`${name}-own`} units={share.own} total={total} color={colorOf(name)} label={`${name} ${share.own}`}
      title={`${name}: ${share.own} in use within its own limit of ${share.limit}`} className={f} />);
    for (const lent of share.lentTo) segments.push(<Segment key={`${name}-lent-${lent.quotaShareName}`} units={lent.units} total={total}
      color={colorOf(lent.quotaShareName)} label={`${lent.quotaShareName} ${lent.units} borrowed`}
      title={`${lent.quotaShareName} borrows ${lent.units} of ${name}'s idle capacity`} className={`hatch ${f}`} />);
    if (share.idle) segments.push(<Segment key={`${name}-idle`} units={share.idle} total={total} color={`${colorOf(name)}22`}
      label={`${name} idle ${share.idle}`} title={`${name}: ${share.idle} of its own ${share.limit} idle`} className={`idle ${f}`} />);
  }
  for (const lent of unit.unownedLentTo) segments.push(<Segment key={`unowned-${lent.quotaShareName}`} units={lent.units} total={total}
    color={colorOf(lent.quotaShareName)} label={`${lent.quotaShareName} ${lent.units} borrowed`}
    title={`${lent.quotaShareName} borrows ${lent.units} of the capacity no share owns`} className="hatch" />);
  if (unit.unownedIdle) segments.push(<Segment key="unowned-idle" units={unit.unownedIdle} total={total} color="transparent"
    label={`unowned idle ${unit.unownedIdle}`} title={`${unit.unownedIdle} of the queue's capacity no share owns, idle`} className="idle" />);
  if (unit.overdraft) segments.push(<Segment key="over" units={unit.overdraft} total={total} color="#cf222e" label={`over ${unit.overdraft}`}
    title={`${unit.overdraft} borrowed beyond what can be lent (a limit was lowered); they drain or are reclaimed`} />);
  return (
    <Box className="unit" data-unit={unit.capacityUnit} mb={3}>
      <Flex className="unit-title" justify="space-between" fontSize="sm" mb={1}>
        <Text as="span" fontWeight="semibold">{unit.capacityUnit}</Text>
        <Text as="span" className="queue-total" color="fg.muted">
          {`${unit.capacity} total: ${inUse} in use, ${idle} idle` +
            (unit.stopping ? ` · ${unit.stopping} held by jobs being stopped, ${unit.free} free now` : "")}
        </Text>
      </Flex>
      <Flex className="bar" height="24px" borderWidth="1px" borderColor="border" borderRadius="sm" overflow="hidden">{segments}</Flex>
      <Flex className="legend" gap={4} wrap="wrap" fontSize="xs" mt={1} color="fg.muted">
        {unit.quotaShares.map((share) => {
          const parts = [`${share.own} own of ${share.limit}`];
          if (share.borrowed) parts.push(`${share.borrowed} borrowed (${lendingText(share.borrowedFrom, "from")})`);
          if (share.lent) parts.push(`${share.lent} lent (${lendingText(share.lentTo, "to")})`);
          parts.push(`${share.idle} idle`);
          if (share.stopping) parts.push(`${share.stopping} stopping`);
          return (
            <Text as="span" key={share.quotaShareName} data-share={share.quotaShareName}>
              <Swatch color={colorOf(share.quotaShareName)} />
              <b>{share.quotaShareName}</b>: {parts.join(", ")}
            </Text>
          );
        })}
      </Flex>
    </Box>
  );
}

export function QueuesPage() {
  const navigate = useNavigate();
  const location = useLocation();
  const focusMatch = /\/plugin\/gpu-quotas\/shares\/([^/]+)\/([^/]+)/.exec(location.pathname);
  const focusQueue = focusMatch ? decodeURIComponent(focusMatch[1]) : null;
  const focusShare = focusMatch ? decodeURIComponent(focusMatch[2]) : null;
  const stored = globalThis.localStorage?.getItem("quota-timeline-window") ?? "fit";
  const [timelineWindow, setTimelineWindow] = useState(WINDOWS.some(([value]) => value === stored) ? stored : "fit");
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const filtering = Object.values(filters).some(Boolean);

  const poll = usePoll<PageData>(async () => {
    const queues = (await must<{ jobQueues: JobQueue[] }>("/jobQueues")).jobQueues
      .filter((q) => !focusQueue || q.jobQueueName === focusQueue);
    const shareFilter = { jobQueueName: focusQueue, quotaShareName: focusShare };
    const run = filters.run ? filters.run.split(" / ") : [];
    const [queueData, unfinished, finished, events, matching] = await Promise.all([
      Promise.all(queues.map(async (queue): Promise<QueueData> => {
        const q = encodeURIComponent(queue.jobQueueName);
        const aws = queue.scheduler === "AWS_BATCH";
        const [snapshot, shares, timeline, serviceJobs] = await Promise.all([
          must<Snapshot>(`/jobQueues/${q}/snapshot${query({ window: apiWindow(timelineWindow) })}`),
          must<{ quotaShares: QuotaShare[] }>(`/quotaShares${query({ jobQueueName: queue.jobQueueName })}`),
          aws ? null : must<Timeline>(`/jobQueues/${q}/timeline${query({ window: apiWindow(timelineWindow) })}`),
          aws ? Promise.all([
            must<ServiceJobList>(`/jobQueues/${q}/serviceJobs${query({ quotaShareName: focusShare, limit: OPEN_JOBS })}`),
            must<ServiceJobList>(`/jobQueues/${q}/serviceJobs${query({ quotaShareName: focusShare, finished: true, limit: 10 })}`),
          ]) : null,
        ]);
        return { queue, snapshot, shares: shares.quotaShares, timeline,
          serviceJobs: serviceJobs ? { open: serviceJobs[0], finished: serviceJobs[1] } : null };
      })),
      must<JobList>(`/jobs${query({ ...shareFilter, finished: false, limit: OPEN_JOBS })}`),
      // Recently finished: by finish time, the latest first (a job submitted long ago that finished last too).
      must<JobList>(`/jobs${query({ ...shareFilter, orderBy: "stoppedAt", limit: FINISHED_SHOWN })}`),
      must<{ events: AuditEvent[] }>(`/events${query({ ...shareFilter, limit: DECISIONS_READ })}`),
      filtering
        ? must<{ events: AuditEvent[] }>(`/events${query({
            ...shareFilter, quotaShareName: filters.share || focusShare, jobId: filters.job || null,
            dagId: run.length ? run[0] : null, runId: run.length ? run.slice(1).join(" / ") : null,
            kind: filters.kind || null, limit: DECISIONS_READ })}`)
        : null,
    ]);
    return {
      queues: queueData, unfinished, finished: finished.jobs, events: events.events,
      matching: (matching ?? events).events.slice().reverse(),
    };
  }, JSON.stringify([focusQueue, focusShare, timelineWindow, filters]));

  const data = poll.data;
  const title = focusShare ? `GPU Quotas: ${focusShare}` : "GPU Quotas";
  const openTask = (path: string) => navigate(`/${path}`);
  const openShare = (queue: string, share: string | null) =>
    navigate(share ? `/plugin/gpu-quotas/shares/${encodeURIComponent(queue)}/${encodeURIComponent(share)}` : "/plugin/gpu-quotas");
  if (!data) return <Box p={2} data-quota-page="queues"><PageHeader title={title} updatedAt={null} error={poll.error} /></Box>;

  const known = [...data.unfinished.jobs, ...data.finished, ...data.queues.flatMap((q) => q.timeline?.jobs ?? []),
    ...data.events.flatMap((event) => [event.jobId, event.relatedJobId]), ...data.matching.flatMap((event) => [event.jobId, event.relatedJobId])];
  const name = namer(known);
  const ids = known.map((job) => (typeof job === "string" ? job : job?.jobId));
  const named = (text: string) => withNames(text, ids, name);
  const holders = new Map<string, string>();
  for (const { queue, snapshot, shares } of data.queues) {
    const strategies = new Map(shares.map((share) => [share.quotaShareName, strategyOf(share)]));
    for (const unit of snapshot.capacity ?? []) holders.set(`${queue.jobQueueName} ${unit.capacityUnit}`, holdersText(unit, strategies));
  }
  const shareLink = (queue: string, share: string) => (
    <Link href={`${airflowBase()}plugin/gpu-quotas/shares/${encodeURIComponent(queue)}/${encodeURIComponent(share)}`} color="fg.info"
      onClick={(event) => { event.preventDefault(); openShare(queue, share); }}>{share}</Link>
  );
  const focusCard = focusShare ? data.queues.flatMap((q) => q.shares).find((s) => s.quotaShareName === focusShare) : undefined;

  const jobsTable = (jobs: Job[], finished: boolean) => {
    let times = false;
    const rows = jobs.map((job) => {
      const ti = job.taskInstance;
      const summary = job.preemptionSummary;
      const why = [];
      if (summary.beingPreemptedBy) {
        if (summary.lastPreemptedAt) times = true;
        why.push(<Text key="being" className="preempted" color="fg.error">{`Being preempted by ${name(summary.beingPreemptedBy)}` +
          (summary.lastPreemptedAt ? ` (decided ${clock(summary.lastPreemptedAt)}, ${summary.lastPreemptionRule ?? ""})` : "")}</Text>);
      }
      const reason = named(plainReason(job.statusReason));
      if (reason) why.push(<Text key="reason">{reason}</Text>);
      const held = job.status === "RUNNABLE" ? holders.get(`${job.jobQueueName} ${job.capacityUnit}`) : undefined;
      if (held) why.push(<Text key="holders" className="holders" color="fg.muted">{held}</Text>);
      if (summary.preemptedAttemptCount) {
        const last = summary.recentPreemptedAttempts[summary.recentPreemptedAttempts.length - 1];
        if (last) times = true;
        const lost = summary.recentPreemptedAttempts.reduce((sum, attempt) => sum + (attempt.lostUnitSeconds ?? 0), 0);
        const measured = summary.recentPreemptedAttempts.some((attempt) => typeof attempt.lostUnitSeconds === "number");
        why.push(<Text key="preempted" className="preempted" color="fg.error">{`Preempted ${plural(summary.preemptedAttemptCount, "time")}` +
          (last ? `, last by ${last.preemptedBy ? name(last.preemptedBy) : "?"} at ${clock(last.stoppedAt)}` : "") +
          (measured ? `; ${gpuHours(lost)} of work lost` : "")}</Text>);
      }
      const lease = job.lease;
      const leaseText = lease.instanceCount ? `holds ${lease.instanceCount}` + (lease.borrowed ? ` (${lease.borrowed} borrowed)` : "") +
        (lease.devices?.length ? `, GPUs ${lease.devices.join(",")}` : "") : "";
      return (
        <Table.Row key={job.jobId} data-job={job.jobId} className={job.quotaShareName === focusShare ? "focus" : undefined}>
          <Table.Cell>{job.quotaShareName}</Table.Cell>
          <Table.Cell textAlign="end">{job.position ?? ""}</Table.Cell>
          <Table.Cell>
            <Link href={airflowBase() + ti.path} title={job.jobId} color="fg.info" className="task-link"
              onClick={(event) => { event.preventDefault(); openTask(ti.path); }}>{name(job)}</Link>
            <Text color="fg.muted" fontSize="xs">{`run ${ti.runId}, try ${ti.tryNumber}`}</Text>
          </Table.Cell>
          <Table.Cell textAlign="end">{job.schedulingPriority}</Table.Cell>
          <Table.Cell><StatusBadge value={job.status} />{summary.beingPreemptedBy ? <> <StatusBadge value="stopping" className="stopping" /></> : null}</Table.Cell>
          <Table.Cell>{`${job.instanceCount} × ${job.capacityUnit}`}<Text color="fg.muted" fontSize="xs">{leaseText}</Text></Table.Cell>
          <Table.Cell className="reason" maxWidth="560px">{why}</Table.Cell>
          {finished ? <Table.Cell className="finished-at" whiteSpace="nowrap">{dateClock(job.stoppedAt)}</Table.Cell> : null}
          <Table.Cell>
            {job.trainingJob ? (job.trainingJob.consoleUrl
              ? <Link href={job.trainingJob.consoleUrl} target="_blank" rel="noopener noreferrer" color="fg.info" className="training-link">{job.trainingJob.name}</Link>
              : job.trainingJob.name) : ""}
          </Table.Cell>
        </Table.Row>
      );
    });
    const columns = [{ header: "Quota share" }, { header: "Position", numeric: true }, { header: "Job" }, { header: "Priority", numeric: true },
      { header: "Status" }, { header: "Capacity" }, { header: "Why it waits / what happened" }, ...(finished ? [{ header: "Finished" }] : []),
      { header: "Training job" }];
    return (
      <>
        <DataTable className={finished ? "jobs finished" : "jobs"} columns={columns} empty="No jobs.">{rows}</DataTable>
        <UtcNote show={finished ? rows.length > 0 : times} />
      </>
    );
  };

  // Filters over the decisions: their choices are the shares shown, the jobs (and DAG runs) of the last
  // decisions and of the jobs listed, every decision kind.
  const filterJobs = [...data.events.flatMap((event) => [event.jobId, event.relatedJobId]),
    ...data.unfinished.jobs.map((job) => job.jobId), ...data.finished.map((job) => job.jobId)].filter(Boolean) as string[];
  const runsOf = filterJobs.map((id) => id.split("/")).filter((p) => p.length >= 5).map((p) => `${p[0]} / ${p.slice(1, -3).join("/")}`);
  const choices: Record<keyof Filters, string[]> = {
    share: [...new Set(data.queues.flatMap((q) => q.shares.map((s) => s.quotaShareName)))].sort(),
    job: [...new Set(filterJobs)].sort(),
    run: [...new Set(runsOf)].sort(),
    kind: DECISION_KINDS,
  };
  const filterNames: Record<keyof Filters, string> = { share: "Quota share", job: "Job", run: "DAG run", kind: "Decision" };
  const shownEvents = data.matching.slice(0, DECISIONS_SHOWN);

  return (
    <Box p={2} data-quota-page="queues">
      <PageHeader title={title} updatedAt={poll.updatedAt} error={poll.error} />
      {focusShare ? (
        <>
          <Link href={`${airflowBase()}plugin/gpu-quotas`} color="fg.info" className="all-queues"
            onClick={(event) => { event.preventDefault(); openShare("", null); }}>← All job queues</Link>
          {focusCard ? (
            <Box as="dl" className="share-card" display="grid" gridTemplateColumns="max-content 1fr" columnGap={4} rowGap={1}
              borderWidth="1px" borderColor="border" borderRadius="md" p={3} my={3} fontSize="sm">
              {shareFacts(focusCard).map(([term, value]) => [
                <Box as="dt" key={`t-${term}`} color="fg.muted">{term}</Box>, <Box as="dd" key={`d-${term}`}>{value}</Box>])}
            </Box>
          ) : <ErrorBox>{`No quota share ${focusShare} in ${focusQueue}.`}</ErrorBox>}
        </>
      ) : null}
      {data.queues.length === 0 ? (
        <Text>No job queues are applied: apply a quota file with <Code>airflow quota apply -f FILE</Code>.</Text>
      ) : null}
      {data.queues.map(({ queue, snapshot, shares, timeline, serviceJobs }) => {
        const colorOf = palette(queue.quotaShareNames);
        if (queue.scheduler === "AWS_BATCH" && serviceJobs) {
          return <AwsQueueSection key={queue.jobQueueName} queue={queue} snapshot={snapshot} shares={shares} jobs={serviceJobs}
            colorOf={colorOf} focusShare={focusShare} shareLink={shareLink} />;
        }
        return (
          <Box as="section" key={queue.jobQueueName} className="queue" data-queue={queue.jobQueueName}>
            <SectionHeading>
              {`Job queue ${queue.jobQueueName}`}
              <Text as="span" fontWeight="normal" fontSize="sm" color="fg.muted">{`  revision ${queue.revision}`}</Text>
              {snapshot.lostWork ? (
                <Text as="span" className="queue-lost" fontWeight="normal" fontSize="sm" color="fg.muted">
                  {` · ${queueLostText(snapshot.lostWork, timelineWindow)}`}
                </Text>
              ) : null}
            </SectionHeading>
            {(snapshot.capacity ?? []).map((unit) => <UnitBar key={unit.capacityUnit} unit={unit} colorOf={colorOf} focus={focusShare} />)}
            <SectionHeading level={3}>GPU timeline</SectionHeading>
            <Flex className="window-picker" role="group" aria-label="Timeline window" gap={1} mb={2} wrap="wrap">
              {WINDOWS.map(([value, label]) => (
                <Button key={value} size="xs" data-window={value} aria-pressed={value === timelineWindow}
                  variant={value === timelineWindow ? "solid" : "outline"}
                  onClick={() => { setTimelineWindow(value); globalThis.localStorage?.setItem("quota-timeline-window", value); }}>
                  {label}
                </Button>
              ))}
            </Flex>
            {timeline?.truncated ? (
              <Text className="notice timeline-truncated" data-queue={queue.jobQueueName} role="status" fontSize="sm" mb={2}>
                {`Only the newest ${plural(timeline.jobLimit, "job")} of this window are drawn: older jobs that ran or waited in it are left out. `}
                {(() => {
                  const shorter = WINDOWS.slice(1, Math.max(1, WINDOWS.findIndex(([value]) => value === timelineWindow))).map(([, label]) => label.toLowerCase());
                  return shorter.length ? `A shorter window (${shorter.join(", ")}) may draw all of its jobs; for` : "For";
                })()}
                {" older ones, ask the REST API's "}
                <Code>{`GET ${apiBase()}/jobQueues/${queue.jobQueueName}/timeline?since=...&until=...`}</Code>.
              </Text>
            ) : null}
            {timeline ? <GpuTimeline timeline={timeline} colorOf={colorOf} name={(id) => name(id)} fit={timelineWindow === "fit"}
              focusShare={focusShare} openTask={openTask} /> : null}
            <SectionHeading level={3}>Quota shares</SectionHeading>
            <DataTable className="shares" columns={["Quota share", "Strategy", "Borrow limit", "In-share preemption", "State", "Capacity unit",
              "Limit", "Ceiling", "Own", "Borrowed", "Lent", "Idle", "RUNNING", "RUNNABLE", "Preemptions", "Lost GPU-h"]
              .map((header, i) => ({ header, numeric: i > 5 || i === 2 }))}>
              {shares.flatMap((share) => (share.usage.length ? share.usage : [null]).map((usage, index, all) => (
                <Table.Row key={`${share.quotaShareName}-${index}`} data-share={share.quotaShareName}
                  className={share.quotaShareName === focusShare ? "focus" : undefined}>
                  {index === 0 ? (
                    <>
                      <Table.Cell rowSpan={all.length}><Swatch color={colorOf(share.quotaShareName)} />{shareLink(share.jobQueueName, share.quotaShareName)}</Table.Cell>
                      <Table.Cell rowSpan={all.length}>{strategyOf(share)}</Table.Cell>
                      <Table.Cell rowSpan={all.length} textAlign="end">{borrowLimitText(share)}</Table.Cell>
                      <Table.Cell rowSpan={all.length}>{share.preemptionConfiguration.inSharePreemption}</Table.Cell>
                      <Table.Cell rowSpan={all.length}>{share.state}</Table.Cell>
                    </>
                  ) : null}
                  {(usage ? [usage.capacityUnit, usage.limit, usage.ceiling, usage.own, usage.borrowed, usage.lent, usage.idle, usage.running, usage.runnable]
                    : ["-", "", "", "", "", "", "", "", ""]).map((value, i) => (
                    <Table.Cell key={i} textAlign={i ? "end" : "start"}>{value}</Table.Cell>
                  ))}
                  {(() => {
                    // What preemptions of this share's jobs on the unit lost in the timeline's window.
                    const lost = usage ? shareLost(snapshot.lostWork, usage.capacityUnit, share.quotaShareName) : undefined;
                    const title = lost ? `${Math.round(lost.lostUnitSeconds).toLocaleString("en-US")} GPU-seconds lost ${WINDOW_WORDS[apiWindow(timelineWindow)]}` +
                      (lost.unmeasured ? ` (${lost.unmeasured} preemption(s) recorded before lost work was measured: not counted)` : "") : undefined;
                    return (
                      <>
                        <Table.Cell className="preemptions" textAlign="end">{lost ? lost.preemptions : ""}</Table.Cell>
                        <Table.Cell className="lost-work" textAlign="end" title={title}>{lost ? (lost.lostUnitSeconds / 3600).toFixed(2) : ""}</Table.Cell>
                      </>
                    );
                  })()}
                </Table.Row>
              )))}
            </DataTable>
          </Box>
        );
      })}
      <SectionHeading>{focusShare ? `Jobs of ${focusShare}` : "Jobs"}</SectionHeading>
      {jobsTable(data.unfinished.jobs, false)}
      {data.unfinished.total !== data.unfinished.jobs.length ? (
        <Text id="jobs-cut" color="fg.muted" fontSize="sm">
          {`The newest ${data.unfinished.jobs.length} of ${data.unfinished.total === null ? "more than 10,000" : data.unfinished.total} unfinished jobs; the REST API pages through all of them.`}
        </Text>
      ) : null}
      {data.finished.length ? (
        <>
          <SectionHeading level={3}>Recently finished</SectionHeading>
          {jobsTable(data.finished, true)}
        </>
      ) : null}
      <SectionHeading>Recent decisions</SectionHeading>
      <Flex id="decision-filters" className="filters" gap={2} mb={2} wrap="wrap">
        {(Object.keys(filterNames) as (keyof Filters)[]).map((key) => {
          const values = [...choices[key]];
          if (filters[key] && !values.includes(filters[key])) values.unshift(filters[key]);
          return (
            <NativeSelect.Root key={key} size="sm" width="auto" maxWidth="360px">
              <NativeSelect.Field name={key} aria-label={filterNames[key]} value={filters[key]}
                onChange={(event) => setFilters({ ...filters, [key]: event.currentTarget.value })}>
                <option value="">{`${filterNames[key]}: all`}</option>
                {values.map((value) => <option key={value} value={value}>{key === "job" ? name(value) : value}</option>)}
              </NativeSelect.Field>
              <NativeSelect.Indicator />
            </NativeSelect.Root>
          );
        })}
      </Flex>
      <Box id="decisions">
        <DataTable className="events" columns={["At", "Decision", "Quota share", "Job", "What happened"].map((header) => ({ header }))}
          empty={filtering ? "No decision matches these filters." : "No events yet."}>
          {shownEvents.map((event) => {
            const parts = event.jobId ? event.jobId.split("/") : [];
            const jobName = event.jobId ? name(event.jobId) : "";
            return (
              <Table.Row key={event.id} data-kind={event.kind} data-job={event.jobId ?? ""}>
                <Table.Cell whiteSpace="nowrap">{dateClock(event.at)}</Table.Cell>
                <Table.Cell><StatusBadge value={event.kind} /></Table.Cell>
                <Table.Cell>{event.quotaShareName ?? ""}</Table.Cell>
                <Table.Cell className="job" title={event.jobId ?? ""}>
                  {jobName}
                  {/* Its run under it, unless its name already says it (jobs of two runs of its DAG shown). */}
                  {parts.length >= 5 && !jobName.includes(" (run ") ? <Text color="fg.muted" fontSize="xs">{`run ${parts.slice(1, -3).join("/")}`}</Text> : null}
                </Table.Cell>
                <Table.Cell>
                  {named(event.message)}
                  {typeof event.details?.lostUnitSeconds === "number" ? (
                    <Text className="lost-work" color="fg.error" fontSize="xs">
                      {`Work ${lostText(event.details.lostUnitSeconds, event.details.lostSince as string | undefined)}`}
                    </Text>
                  ) : null}
                </Table.Cell>
              </Table.Row>
            );
          })}
        </DataTable>
        <UtcNote show={shownEvents.length > 0} />
        {data.matching.length > shownEvents.length ? (
          <Text color="fg.muted" fontSize="sm">{`The newest ${shownEvents.length} of the last ${data.matching.length} ` +
            `${filtering ? "matching " : ""}decisions; the filters search the whole audit log, the REST API's /events pages through all.`}</Text>
        ) : null}
      </Box>
    </Box>
  );
}

/** A share's lost work on a unit in the snapshot's window (a share owning or using the unit is always listed). */
function shareLost(lostWork: LostWork | null | undefined, unit: string, share: string): ShareLostWork | undefined {
  return lostWork?.units.find((entry) => entry.capacityUnit === unit)?.quotaShares.find((entry) => entry.quotaShareName === share);
}

/** The queue's heading: what its preemptions lost in the timeline's window, per capacity unit. */
function queueLostText(lostWork: LostWork, picked: string): string {
  const units = lostWork.units.map((unit) => `${gpuHours(unit.lostUnitSeconds)}` + (lostWork.units.length > 1 ? ` of ${unit.capacityUnit}` : "") +
    ` in ${plural(unit.preemptions, "preemption")}`);
  return `work lost to preemptions ${WINDOW_WORDS[apiWindow(picked)]}: ${units.join(", ") || "none"}`;
}

function shareFacts(share: QuotaShare): [string, string][] {
  const facts: [string, string][] = [["Job queue", share.jobQueueName], ["Strategy", strategyOf(share)], ["Borrow limit", borrowLimitText(share)],
    ["In-share preemption", share.preemptionConfiguration.inSharePreemption], ["State", share.state]];
  if (share.scheduler === "AWS_BATCH") {
    facts.push(["Scheduled by", "AWS Batch (read from AWS Batch)"]);
    for (const used of share.capacityUsage) facts.push([used.capacityUnit, `${used.quantity} in use`]);
    if (share.error) facts.push(["Error", share.error]);
  }
  for (const usage of share.usage) {
    facts.push([usage.capacityUnit, `limit ${usage.limit}, ceiling ${usage.ceiling}: ${usage.used} in use (${usage.own} own, ${usage.borrowed} borrowed), ` +
      `${usage.lent} lent, ${usage.idle} idle; ${usage.running} RUNNING, ${usage.runnable} RUNNABLE`]);
  }
  return facts;
}

/** A job queue AWS Batch schedules: its shares, the capacity in use and its service jobs, read from AWS Batch. */
function AwsQueueSection({ queue, snapshot, shares, jobs, colorOf, focusShare, shareLink }: {
  queue: JobQueue; snapshot: Snapshot; shares: QuotaShare[]; jobs: { open: ServiceJobList; finished: ServiceJobList };
  colorOf: (name: string | null | undefined) => string; focusShare: string | null; shareLink: (queue: string, share: string) => React.ReactNode;
}) {
  const usage = snapshot.error ? [] : snapshot.queueUtilization.quotaShareUtilization.topCapacityUtilization.flatMap((share) =>
    share.capacityUsage.map((entry) => ({ ...entry, quotaShareName: share.quotaShareName })));
  const positions = new Map<string, number>();
  if (!snapshot.error) for (const front of Object.values(snapshot.frontOfQuotaShares.quotaShares)) for (const job of front) positions.set(job.jobArn, job.position);
  const errors = [...new Set([snapshot.error, jobs.open.error, jobs.finished.error, ...shares.map((s) => s.error)].filter(Boolean) as string[])];
  const serviceJobsTable = (list: ServiceJob[]) => (
    <>
      <DataTable className="jobs service-jobs" columns={["Quota share", "Position", "Service job", "Status", "Capacity", "Why it waits / what happened",
        "Created", "Training job"].map((header, i) => ({ header, numeric: i === 1 }))} empty="No service jobs.">
        {list.map((job) => (
          <Table.Row key={job.jobId} data-job={job.jobId} className={job.quotaShareName === focusShare ? "focus" : undefined}>
            <Table.Cell>{job.quotaShareName ?? ""}</Table.Cell>
            <Table.Cell textAlign="end">{positions.get(job.jobArn) ?? ""}</Table.Cell>
            <Table.Cell title={job.jobArn}>{job.jobName || job.jobId}<Text color="fg.muted" fontSize="xs">{job.jobId}</Text></Table.Cell>
            <Table.Cell><StatusBadge value={job.status} /></Table.Cell>
            <Table.Cell>{job.capacityUsage.map((entry) => `${entry.quantity} × ${entry.capacityUnit}`).join(", ")}</Table.Cell>
            <Table.Cell className="reason">{plainReason(job.statusReason)}</Table.Cell>
            <Table.Cell whiteSpace="nowrap">{dateClock(job.createdAt)}</Table.Cell>
            <Table.Cell>{job.trainingJob ? <Link href={job.trainingJob.consoleUrl ?? undefined} target="_blank" rel="noopener noreferrer" color="fg.info">{job.trainingJob.name}</Link> : ""}</Table.Cell>
          </Table.Row>
        ))}
      </DataTable>
      <UtcNote show={list.some((job) => job.createdAt)} />
    </>
  );
  return (
    <Box as="section" className="queue" data-queue={queue.jobQueueName} data-scheduler="AWS_BATCH">
      <SectionHeading>
        {`Job queue ${queue.jobQueueName} `}
        <Box as="span" className="badge aws-batch" fontSize="xs" px={2} py={0.5} borderRadius="md" bg="bg.muted">scheduled by AWS Batch</Box>
        <Text as="span" fontWeight="normal" fontSize="sm" color="fg.muted">{`  revision ${queue.revision}`}</Text>
      </SectionHeading>
      <Text color="fg.muted" fontSize="sm" mb={2}>
        AWS Batch admits, preempts and re-queues this queue's jobs: its shares, the capacity in use and its service jobs are read from AWS
        Batch. The GPU timeline and the decisions below are our allocator's.
      </Text>
      {errors.map((message) => <ErrorBox key={message}>{message}</ErrorBox>)}
      {snapshot.error ? null : queue.capacityLimits.map((limit) => {
        const used = usage.filter((entry) => entry.capacityUnit === limit.capacityUnit && entry.quantity);
        const inUse = used.reduce((sum, entry) => sum + entry.quantity, 0);
        const total = Math.max(limit.maxCapacity, inUse);
        const idle = Math.max(0, limit.maxCapacity - inUse);
        return (
          <Box className="unit" data-unit={limit.capacityUnit} key={limit.capacityUnit} mb={3}>
            <Flex className="unit-title" justify="space-between" fontSize="sm" mb={1}>
              <Text as="span" fontWeight="semibold">{limit.capacityUnit}</Text>
              <Text as="span" className="queue-total" color="fg.muted">{`${limit.maxCapacity} total: ${inUse} in use, ${idle} idle`}</Text>
            </Flex>
            <Flex className="bar" height="24px" borderWidth="1px" borderColor="border" borderRadius="sm" overflow="hidden">
              {used.map((entry) => <Segment key={entry.quotaShareName} units={entry.quantity} total={total} color={colorOf(entry.quotaShareName)}
                label={`${entry.quotaShareName} ${entry.quantity}`} title={`${entry.quotaShareName}: ${entry.quantity} in use`} />)}
              {idle ? <Segment units={idle} total={total} color="transparent" label={`idle ${idle}`} title={`${idle} idle`} className="idle" /> : null}
            </Flex>
          </Box>
        );
      })}
      <SectionHeading level={3}>Quota shares</SectionHeading>
      <DataTable className="shares" scheduler="AWS_BATCH" columns={["Quota share", "Strategy", "Borrow limit", "In-share preemption", "State",
        "Capacity limits", "In use"].map((header, i) => ({ header, numeric: i === 2 }))}>
        {shares.map((share) => (
          <Table.Row key={share.quotaShareName} data-share={share.quotaShareName} className={share.quotaShareName === focusShare ? "focus" : undefined}>
            <Table.Cell><Swatch color={colorOf(share.quotaShareName)} />{shareLink(share.jobQueueName, share.quotaShareName)}</Table.Cell>
            <Table.Cell>{strategyOf(share)}</Table.Cell>
            <Table.Cell textAlign="end">{borrowLimitText(share)}</Table.Cell>
            <Table.Cell>{share.preemptionConfiguration.inSharePreemption}</Table.Cell>
            <Table.Cell>{share.state}</Table.Cell>
            <Table.Cell>{share.capacityLimits.map((limit) => `${limit.capacityUnit} × ${limit.maxCapacity}`).join(", ")}</Table.Cell>
            <Table.Cell>{share.capacityUsage.map((entry) => `${entry.capacityUnit} × ${entry.quantity}`).join(", ") || "none"}</Table.Cell>
          </Table.Row>
        ))}
      </DataTable>
      <SectionHeading level={3}>Service jobs</SectionHeading>
      {serviceJobsTable(jobs.open.jobs)}
      {jobs.finished.jobs.length ? <><SectionHeading level={3}>Recently finished</SectionHeading>{serviceJobsTable(jobs.finished.jobs)}</> : null}
    </Box>
  );
}
