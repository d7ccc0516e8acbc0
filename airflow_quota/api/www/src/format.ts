// How the page writes times (UTC, as Airflow's API gives them), durations, counts and job names.
import type { TaskInstanceLink } from "./types";

const two = (n: number) => String(n).padStart(2, "0");
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** 14:03:07 (UTC). */
export function clock(at: string | number | null | undefined): string {
  if (at === null || at === undefined || at === "") return "";
  const d = new Date(at);
  return `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}`;
}

/** Mar 1 14:03:07 (UTC). */
export function dateClock(at: string | number | null | undefined): string {
  if (at === null || at === undefined || at === "") return "";
  const d = new Date(at);
  return `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()} ${clock(at)}`;
}

const utcDay = (ms: number) => Math.floor(ms / 86400e3);

/** How a window [since, until] writes its moments: the clock, with the day when it spans days or the moment
 * is on another day than the window's end. */
export function timeTextFor(since: number, until: number): (ms: number) => string {
  const overDays = until - since >= 86400e3 || utcDay(since) !== utcDay(until);
  return (ms) => (overDays || utcDay(ms) !== utcDay(until) ? dateClock(ms) : clock(ms));
}

export function duration(ms: number): string {
  const seconds = Math.round(ms / 1000);
  if (seconds < 120) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  return minutes < 120 ? `${minutes} min` : `${(minutes / 60).toFixed(1)} h`;
}

/** Work lost to preemption (GPU-seconds, as the REST API gives it) in GPU-hours: "0.25 GPU-h". */
export const gpuHours = (unitSeconds: number) => `${(unitSeconds / 3600).toFixed(2)} GPU-h`;

/** A preemption's lost work: "lost 0.25 GPU-h (900 GPU-seconds) since its last checkpoint". */
export function lostText(unitSeconds: number, since: string | null | undefined): string {
  const from = since === "checkpoint" ? " since its last checkpoint" : since === "start" ? " since its start" : "";
  return `lost ${gpuHours(unitSeconds)} (${Math.round(unitSeconds).toLocaleString("en-US")} GPU-seconds)${from}`;
}

export const plural = (count: number, noun: string) => `${count} ${noun}${count === 1 ? "" : "s"}`;

/** A job id is dag_id/run_id/task_id/map_index/try_number (a run id may hold slashes: read from both ends). */
export function jobParts(jobId: string | null | undefined): TaskInstanceLink | null {
  const parts = (jobId ?? "").split("/");
  if (parts.length < 5) return null;
  const [mapIndex, tryNumber] = parts.slice(-2).map(Number);
  return {
    dagId: parts[0],
    runId: parts.slice(1, -3).join("/"),
    taskId: parts[parts.length - 3],
    mapIndex,
    tryNumber,
    path: "",
  };
}

type Named = { jobId: string; displayName?: string | null; runLabel?: string | null; taskInstance?: TaskInstanceLink };

const taskOf = (ti: TaskInstanceLink) =>
  `${ti.dagId} / ${ti.taskId}${ti.mapIndex >= 0 ? `[${ti.mapIndex}]` : ""}${ti.tryNumber > 1 ? ` #${ti.tryNumber}` : ""}`;

/** Names jobs the same way everywhere (the REST API's and the CLI's way, airflow_quota/job_names.py): its
 * displayName, "dag / task", "[map index]" for a mapped task and "#try" after the first try; where jobs of
 * two runs of one DAG are shown together, each of that DAG's jobs with "(run <runLabel>)". `known` holds
 * every job shown (jobs or job ids). */
export function namer(known: (Named | string | null | undefined)[]): (job: Named | string | null | undefined) => string {
  const runs = new Map<string, Set<string>>();
  const given = new Map<string, Named>();
  const refOf = (job: Named | string | null | undefined): TaskInstanceLink | null => {
    if (!job) return null;
    if (typeof job === "string") return jobParts(job);
    return job.taskInstance ?? jobParts(job.jobId);
  };
  for (const job of known) {
    if (job && typeof job !== "string" && job.displayName) given.set(job.jobId, job);
    const ref = refOf(job);
    if (ref) runs.set(ref.dagId, (runs.get(ref.dagId) ?? new Set()).add(ref.runId));
  }
  return (job) => {
    const id = typeof job === "string" ? job : job?.jobId;
    const full = (id && given.get(id)) || (job && typeof job !== "string" ? job : undefined);
    const ref = refOf(job);
    if (!ref) return id ?? "";
    const base = full?.displayName || taskOf(ref);
    const run = (runs.get(ref.dagId)?.size ?? 0) > 1 ? ` (run ${full?.runLabel || ref.runId})` : "";
    return `${base}${run}`;
  };
}

/** Writes a message with the job ids it holds replaced by the jobs' names. */
export function withNames(text: string, ids: (string | null | undefined)[], name: (id: string) => string): string {
  let out = text;
  for (const id of [...new Set(ids.filter(Boolean) as string[])].sort((a, b) => b.length - a.length)) {
    out = out.split(id).join(name(id));
  }
  return out;
}

/** The share colours, in quota-file order (the capacity bars, the tables' swatches and the GPU timeline). */
const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7b83", "#9a6700", "#cf222e"];

export function palette(shareNames: string[]): (name: string | null | undefined) => string {
  const colors = new Map(shareNames.map((name, i) => [name, COLORS[i % COLORS.length]]));
  return (name) => (name && colors.get(name)) || "#6e7781";
}
