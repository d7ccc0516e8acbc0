// A task instance's "Quota" tab: the timeline of its jobs (every try) and their story in order: waits,
// grants, preemptions, stops, resumes. A task on a job queue AWS Batch schedules has no job in the ledger:
// its AWS Batch service job is read instead (GET /quota/api/taskInstances/serviceJobs).
import { Box, Link, Table, Text } from "@chakra-ui/react";
import { useNavigate } from "react-router-dom";

import { get, must, query } from "./api";
import { dateClock, gpuHours, lostText, namer, palette, plural, withNames } from "./format";
import { usePoll } from "./hooks";
import { GpuTimeline } from "./Timeline";
import type { ServiceJob, Timeline, TimelineBar, TimelineJob } from "./types";
import { DataTable, ErrorBox, PageHeader, SectionHeading, StatusBadge, UtcNote } from "./ui";

type Line = { at: string; kind: string; job: TimelineJob | undefined; text: string };

/** Each preemption of the timeline's jobs once (its stop phase, whatever the units it held): its lost work. */
function preemptionsOf(timeline: Timeline): TimelineBar[] {
  const seen = new Map<string, TimelineBar>();
  for (const bar of timeline.units.flatMap((unit) => unit.bars)) {
    if (bar.phase === "STOPPING" && bar.preemptedBy) seen.set(`${bar.jobId} ${bar.startedAt}`, bar);
  }
  return [...seen.values()];
}

function storyOf(timeline: Timeline, name: (id: string) => string): Line[] {
  const lines: Line[] = [];
  const jobs = new Map(timeline.jobs.map((job) => [job.jobId, job]));
  for (const job of timeline.jobs) for (const wait of job.waits) lines.push({ at: wait.startedAt, kind: "WAITING", job, text: wait.reason });
  const phases = new Map<string, TimelineBar & { units: number; borrowedUnits: number }>();
  for (const unit of timeline.units) {
    for (const bar of unit.bars) {
      const key = `${bar.jobId} ${bar.phase} ${bar.startedAt}`;
      const phase = phases.get(key) ?? { ...bar, units: 0, borrowedUnits: 0 };
      phase.units += 1;
      phase.borrowedUnits += bar.borrowed ? 1 : 0;
      phases.set(key, phase);
    }
  }
  for (const phase of phases.values()) {
    const job = jobs.get(phase.jobId);
    const held = `${phase.units} ${phase.capacityUnit}`;
    if (phase.phase === "RUNNING") {
      const borrowed = phase.borrowedUnits ? ` (${phase.borrowedUnits} borrowed)` : "";
      const resumed = (phase.attempt ?? 1) > 1 ? `, attempt ${phase.attempt}: resumed from its checkpoint` : "";
      lines.push({ at: phase.startedAt, kind: "GRANTED", job, text: `Granted ${held}${borrowed}${resumed}` });
    } else {
      const lost = typeof phase.lostUnitSeconds === "number" ? `; it ${lostText(phase.lostUnitSeconds, phase.lostSince)}` : "";
      lines.push({ at: phase.startedAt, kind: phase.preemptedBy ? "PREEMPTED" : "TERMINATED", job,
        text: phase.preemptedBy
          ? `Preempted by ${name(phase.preemptedBy)} (${phase.rule ?? "preemption"}): stopping its training job, still holding its ${held} until it has stopped${lost}`
          : `Terminated: stopping its training job, still holding its ${held}` });
    }
    if (phase.endedAt && phase.endedBy === "REQUEUED") {
      lines.push({ at: phase.endedAt, kind: "REQUEUED", job, text: "Stopped: back in the queue at its original position" });
    } else if (phase.endedAt && (phase.endedBy === "SUCCEEDED" || phase.endedBy === "FAILED")) {
      lines.push({ at: phase.endedAt, kind: phase.endedBy, job, text: `Released its ${held}` });
    }
  }
  const order = ["REQUEUED", "SUCCEEDED", "FAILED", "WAITING", "GRANTED", "PREEMPTED", "TERMINATED"];
  return lines.sort((a, b) => Date.parse(a.at) - Date.parse(b.at) || order.indexOf(a.kind) - order.indexOf(b.kind));
}

function ServiceJobSection({ job }: { job: ServiceJob }) {
  const summary = job.preemptionSummary ?? { preemptedAttemptCount: 0, recentPreemptedAttempts: [] };
  const training = (value: string | null | undefined) => value?.split("/").pop();
  return (
    <Box as="section" className="queue" data-queue={job.jobQueueName} data-scheduler="AWS_BATCH">
      <SectionHeading>
        {`Job queue ${job.jobQueueName} `}
        <Box as="span" className="badge aws-batch" fontSize="xs" px={2} py={0.5} borderRadius="md" bg="bg.muted">scheduled by AWS Batch</Box>
      </SectionHeading>
      <Text data-service-job={job.jobId}>
        {`Service job ${job.jobName} (${job.jobId}) · quota share ${job.quotaShareName} · schedulingPriority ${job.schedulingPriority} · now ${job.status}` +
          (job.statusReason ? `: ${job.statusReason}` : "")}
      </Text>
      {job.trainingJob ? (
        <Text>Latest training job: <Link href={job.trainingJob.consoleUrl ?? undefined} target="_blank" rel="noopener noreferrer" color="fg.info">{job.trainingJob.name}</Link></Text>
      ) : null}
      <SectionHeading level={3}>{`Preempted ${summary.preemptedAttemptCount} time${summary.preemptedAttemptCount === 1 ? "" : "s"}`}</SectionHeading>
      {summary.recentPreemptedAttempts.length ? (
        <>
          <DataTable className="story" columns={[{ header: "Stopped" }, { header: "What" }, { header: "Details" }]}>
            {summary.recentPreemptedAttempts.map((attempt, index) => (
              <Table.Row key={index} data-kind="PREEMPTED">
                <Table.Cell whiteSpace="nowrap">{dateClock(attempt.stoppedAt)}</Table.Cell>
                <Table.Cell><StatusBadge value="PREEMPTED" /></Table.Cell>
                <Table.Cell>{`Training job ${training(attempt.serviceResourceId?.value) ?? "?"}` +
                  (attempt.startedAt ? ` (started ${dateClock(attempt.startedAt)})` : "") + (attempt.statusReason ? `: ${attempt.statusReason}` : "")}</Table.Cell>
              </Table.Row>
            ))}
          </DataTable>
          <UtcNote show />
        </>
      ) : null}
    </Box>
  );
}

type TaskData = { timelines: Timeline[] | null; serviceJobs: { jobs: ServiceJob[]; errors: string[] } | null };

export function TaskView({ dagId, runId, taskId, mapIndex }: { dagId: string; runId: string; taskId: string; mapIndex: string }) {
  const navigate = useNavigate();
  const task = { dagId, runId, taskId, mapIndex: /^-?\d+$/.test(mapIndex) ? mapIndex : "-1" };
  const poll = usePoll<TaskData>(async () => {
    const found = await get<{ timelines: Timeline[] }>(`/taskInstances/timeline${query(task)}`, [404]);
    if (found) return { timelines: found.timelines, serviceJobs: null };
    return { timelines: null, serviceJobs: await must<{ jobs: ServiceJob[]; errors: string[] }>(`/taskInstances/serviceJobs${query(task)}`) };
  }, JSON.stringify(task));
  const data = poll.data;
  const extra = `${dagId} · ${runId}${task.mapIndex !== "-1" ? ` · map index ${task.mapIndex}` : ""}`;
  return (
    <Box p={2} data-quota-page="task">
      <PageHeader title={`Quota: ${taskId}`} updatedAt={poll.updatedAt} error={poll.error} extra={extra} />
      {data?.timelines?.map((timeline) => {
        const name = namer(timeline.jobs);
        const named = (text: string) => withNames(text, timeline.jobs.map((job) => job.jobId), name);
        const job = timeline.jobs[timeline.jobs.length - 1];
        const story = storyOf(timeline, name);
        const tries = timeline.jobs.length;
        const preemptions = preemptionsOf(timeline);
        const measured = preemptions.filter((bar) => typeof bar.lostUnitSeconds === "number");
        const lost = measured.reduce((sum, bar) => sum + (bar.lostUnitSeconds ?? 0), 0);
        return (
          <Box as="section" key={timeline.jobQueueName} className="queue" data-queue={timeline.jobQueueName}>
            <SectionHeading>{`Job queue ${timeline.jobQueueName}`}</SectionHeading>
            {job ? (
              <Text mb={2}>{`Quota share ${job.quotaShareName} · schedulingPriority ${job.schedulingPriority} · ${job.instanceCount} × ${job.capacityUnit} · now ${job.status}` +
                (job.statusReason ? `: ${named(job.statusReason)}` : "")}</Text>
            ) : null}
            {preemptions.length ? (
              <Text className="task-lost" mb={2} color="fg.error">
                {`Preempted ${plural(preemptions.length, "time")}: ${gpuHours(lost)} of work lost` +
                  (measured.length < preemptions.length ? ` (${preemptions.length - measured.length} recorded before lost work was measured)` : "")}
              </Text>
            ) : null}
            <GpuTimeline timeline={timeline} colorOf={palette(timeline.quotaShareNames)} name={(id) => name(id)} fit={false}
              openTask={(path) => navigate(`/${path}`)} />
            <SectionHeading level={3}>What happened</SectionHeading>
            <DataTable className="story" columns={[{ header: "At" }, { header: "What" }, ...(tries > 1 ? [{ header: "Try" }] : []), { header: "Details" }]}>
              {story.map((line, index) => (
                <Table.Row key={index} data-kind={line.kind}>
                  <Table.Cell whiteSpace="nowrap">{dateClock(line.at)}</Table.Cell>
                  <Table.Cell><StatusBadge value={line.kind} /></Table.Cell>
                  {tries > 1 ? <Table.Cell>{line.job?.taskInstance.tryNumber ?? ""}</Table.Cell> : null}
                  <Table.Cell>{named(line.text)}</Table.Cell>
                </Table.Row>
              ))}
            </DataTable>
            <UtcNote show={story.length > 0} />
          </Box>
        );
      })}
      {data?.serviceJobs ? (
        <>
          {data.serviceJobs.errors.map((message) => <ErrorBox key={message}>{message}</ErrorBox>)}
          {data.serviceJobs.jobs.map((job) => <ServiceJobSection key={job.jobId} job={job} />)}
          {!data.serviceJobs.jobs.length && !data.serviceJobs.errors.length ? (
            <Text color="fg.muted">This task instance has no job in the quota ledger: it does not use QuotaTrainingOperator, or has not asked for capacity yet.</Text>
          ) : null}
        </>
      ) : null}
    </Box>
  );
}
