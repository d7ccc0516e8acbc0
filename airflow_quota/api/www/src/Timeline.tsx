// The GPU timeline: one ECharts chart per capacity unit of a job queue, drawn from the REST API's timeline
// (GET /quota/api/jobQueues/{q}/timeline, or a task instance's). One row per unit of capacity, time left to
// right, each bar a job's hold of that unit in its share's colour (borrowed units lighter with a dashed edge),
// the stop phase of a preemption drawn distinctly and linked to its preemptor, each job's waits on lanes
// below. Lane names sit beside the chart, each whole in its tooltip when the column cuts it. Hover shows a
// job's details; a click pins them under the chart, naming a preemption's preemptor and reason.
import { Box, Button, Flex, Link, Text } from "@chakra-ui/react";
import { CustomChart } from "echarts/charts";
import { DataZoomInsideComponent, GridComponent, TooltipComponent } from "echarts/components";
import * as echarts from "echarts/core";
import { SVGRenderer } from "echarts/renderers";
import { useEffect, useMemo, useRef, useState } from "react";

import { duration, lostText, timeTextFor, withNames } from "./format";
import { useDarkMode } from "./hooks";
import type { Timeline, TimelineBar, TimelineJob, TimelineUnit, TimelineWait } from "./types";

echarts.use([CustomChart, GridComponent, TooltipComponent, DataZoomInsideComponent, SVGRenderer]);

const ROW_PX = 22;
const TOP = 8;
const BOTTOM = 30;
const LABEL_PX = 220;
const STOP_COLOR = "#cf222e";
const INK = { light: { fg: "#1f2328", muted: "#656d76" }, dark: { fg: "#e6edf3", muted: "#9198a1" } };

type Item = {
  kind: "bar" | "wait";
  lane: number;
  start: number;
  end: number;
  job: TimelineJob | undefined;
  jobId: string;
  label: string;
  bar?: TimelineBar;
  wait?: TimelineWait;
  dim: boolean;
};

/** The window drawn, [since, until] in ms: "fit" is the last hour or since the queue's first job, whichever
 * is shorter (at least a minute); "all" starts at the queue's first submission. */
export function windowOf(timeline: Timeline, fit: boolean): [number, number] {
  const until = Date.parse(timeline.until);
  const first = timeline.firstSubmittedAt ? Date.parse(timeline.firstSubmittedAt) : until - 3600e3;
  let since = timeline.since ? Date.parse(timeline.since) : Math.min(first, until - 60e3);
  if (fit) since = Math.max(since, Math.min(first - Math.max(5e3, (until - first) * 0.03), until - 60e3));
  return [since, until];
}

function itemsOf(timeline: Timeline, unit: TimelineUnit, name: (id: string) => string, since: number, until: number, focusShare?: string | null) {
  const jobs = new Map(timeline.jobs.map((job) => [job.jobId, job]));
  const lanes: string[] = Array.from({ length: unit.rows }, (_, row) => (unit.devices ? `GPU ${row}` : `#${row + 1}`));
  const items: Item[] = [];
  const clip = (iso: string | null, fallback: number) =>
    Math.min(Math.max(iso ? Date.parse(iso) : fallback, since), until);
  for (const bar of unit.bars) {
    const job = jobs.get(bar.jobId);
    items.push({
      kind: "bar", lane: bar.row, start: clip(bar.startedAt, since), end: clip(bar.endedAt, until),
      bar, job, jobId: bar.jobId, label: name(bar.jobId),
      dim: Boolean(focusShare && bar.quotaShareName !== focusShare),
    });
  }
  const waiting = timeline.jobs.filter((job) => job.capacityUnit === unit.capacityUnit && job.waits.length &&
    (!focusShare || job.quotaShareName === focusShare));
  waiting.forEach((job, index) => {
    lanes.push(`${name(job.jobId)} · waits`);
    for (const wait of job.waits) {
      items.push({ kind: "wait", lane: unit.rows + index, start: clip(wait.startedAt, since),
        end: clip(wait.endedAt, until), wait, job, jobId: job.jobId, label: name(job.jobId), dim: false });
    }
  });
  return { lanes, items };
}

function period(startedAt: string | null, endedAt: string | null, item: Item): [number, number] {
  const start = startedAt ? Date.parse(startedAt) : item.start;
  return [start, endedAt ? Date.parse(endedAt) : Math.max(item.end, start)];
}

/** The stop phase that ended a RUNNING bar (its preemption or termination), when the timeline has it. */
function stopAfter(timeline: Timeline, bar: TimelineBar): TimelineBar | undefined {
  if (!bar.endedAt || (bar.endedBy !== "PREEMPTED" && bar.endedBy !== "TERMINATED")) return undefined;
  const bars = timeline.units.flatMap((unit) => unit.bars);
  return bars.find((other) => other.jobId === bar.jobId && other.phase === "STOPPING" && other.startedAt === bar.endedAt);
}

type Fact = [string, string];

function describe(item: Item, timeline: Timeline, name: (id: string) => string, timeText: (ms: number) => string) {
  const job = item.job;
  const ids = [...timeline.jobs.map((one) => one.jobId), ...timeline.units.flatMap((unit) => unit.bars.map((bar) => bar.preemptedBy))];
  const named = (text: string) => withNames(text, ids, name);
  const facts: Fact[] = [["Job", item.jobId], ["Share", job?.quotaShareName ?? item.bar?.quotaShareName ?? ""],
    ["Priority", String(item.bar ? item.bar.schedulingPriority : job?.schedulingPriority ?? "")]];
  let preemption: { by: string | null; rule: string | null; reason: string; stopping: boolean; lost: string | null } | null = null;
  // A preemption's lost work (its PREEMPTED row's lostUnitSeconds, on its stop phase's bars).
  const lostOf = (stop: TimelineBar) =>
    stop.preemptedBy && stop.lostUnitSeconds !== null && stop.lostUnitSeconds !== undefined ? lostText(stop.lostUnitSeconds, stop.lostSince) : null;
  if (item.kind === "wait" && item.wait) {
    const [start, end] = period(item.wait.startedAt, item.wait.endedAt, item);
    facts.push(["Waiting", `${timeText(start)} – ${item.wait.endedAt ? timeText(end) : "now"} (${duration(end - start)})`]);
    facts.push(["Why", named(item.wait.reason)]);
  } else if (item.bar) {
    const bar = item.bar;
    const phase = bar.phase === "STOPPING"
      ? (bar.preemptedBy ? "stopping after its preemption" : "stopping (terminated)")
      : "holding it (granted)";
    facts.push(["Phase", `${phase}${bar.borrowed ? ", borrowed unit" : ""}`]);
    if (bar.device !== null && bar.device !== undefined) facts.push(["GPU", `device ${bar.device}`]);
    const [start, end] = period(bar.startedAt, bar.endedAt, item);
    const stop = bar.phase === "RUNNING" ? stopAfter(timeline, bar) : undefined;
    const endedBy = bar.endedBy === "PREEMPTED" && stop?.preemptedBy
      ? `, ended by its preemption for ${name(stop.preemptedBy)}`
      : bar.endedBy ? `, ended by ${bar.endedBy}` : "";
    facts.push(["When", `${timeText(start)} – ${bar.endedAt ? timeText(end) : "now"} (${duration(end - start)})${endedBy}`]);
    facts.push([bar.phase === "STOPPING" ? "Why stopped" : "Why granted", named(bar.reason)]);
    if (bar.phase === "STOPPING") {
      preemption = { by: bar.preemptedBy, rule: bar.rule, reason: named(bar.reason), stopping: true, lost: lostOf(bar) };
    } else if (stop) {
      preemption = { by: stop.preemptedBy, rule: stop.rule, reason: named(stop.reason), stopping: false, lost: lostOf(stop) };
      if (stop.preemptedBy) facts.push(["Preempted by", `${name(stop.preemptedBy)} (${stop.rule ?? "preemption"})`]);
      facts.push([stop.preemptedBy ? "Why preempted" : "Why stopped", named(stop.reason)]);
    }
    if (preemption?.lost) facts.push(["Work lost", preemption.lost]);
  }
  return { title: item.label, facts, preemption };
}

const escapeHtml = (text: unknown) =>
  String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);

type Entry = { unit: string; chart: echarts.ECharts; node: HTMLDivElement; items: Item[]; lanes: string[]; dark: boolean };

/** What each chart draws and where, for the browser tests (and anyone scripting the page):
 * QuotaTimeline.drawn(document.querySelector(".timeline[data-queue='Q']")). */
type Host = HTMLDivElement & { quotaDrawn?: () => unknown[] };

declare global {
  var QuotaTimeline: { drawn: (host: Host | null) => unknown[] } | undefined;
}
globalThis.QuotaTimeline = { drawn: (host) => host?.quotaDrawn?.() ?? [] };

type Props = {
  timeline: Timeline;
  colorOf: (share: string | null | undefined) => string;
  name: (id: string) => string;
  fit: boolean;
  focusShare?: string | null;
  openTask?: (path: string) => void;
};

export function GpuTimeline({ timeline, colorOf, name, fit, focusShare, openTask }: Props) {
  const dark = useDarkMode();
  const [since, until] = windowOf(timeline, fit);
  const timeText = useMemo(() => timeTextFor(since, until), [since, until]);
  const [pinned, setPinned] = useState<{ jobId: string; kind: string; start: number; phase: string } | null>(null);
  const hostRef = useRef<Host>(null);
  const entries = useRef(new Map<string, Entry>());
  const units = timeline.units.filter((unit) => unit.rows > 0);
  const drawnUnits = units.map((unit) => ({ unit, ...itemsOf(timeline, unit, name, since, until, focusShare) }));
  const allItems = drawnUnits.flatMap((drawn) => drawn.items);
  const pinnedItem = pinned
    ? allItems.find((item) => item.jobId === pinned.jobId && item.kind === pinned.kind && item.start === pinned.start &&
        (item.bar?.phase ?? "WAITING") === pinned.phase) ??
      allItems.find((item) => item.jobId === pinned.jobId && item.kind === "bar") ??
      allItems.find((item) => item.jobId === pinned.jobId)
    : undefined;
  const pin = (item: Item | undefined) =>
    item && setPinned({ jobId: item.jobId, kind: item.kind, start: item.start, phase: item.bar?.phase ?? "WAITING" });
  const pinJob = (jobId: string) => {
    const item = allItems.find((one) => one.jobId === jobId && one.kind === "bar") ?? allItems.find((one) => one.jobId === jobId);
    if (item) pin(item);
    else setPinned({ jobId, kind: "none", start: 0, phase: "" });
  };
  const pinRef = useRef(pin);
  pinRef.current = pin;
  const selected = pinnedItem?.jobId ?? pinned?.jobId ?? null;

  useEffect(() => {
    const host = hostRef.current;
    if (!host) return;
    const ink = dark ? INK.dark : INK.light;
    const seen = new Set<string>();
    for (const { unit, items, lanes } of drawnUnits) {
      seen.add(unit.capacityUnit);
      const node = host.querySelector<HTMLDivElement>(`.timeline-chart[data-unit="${CSS.escape(unit.capacityUnit)}"]`);
      if (!node) continue;
      let entry = entries.current.get(unit.capacityUnit);
      if (entry && (entry.node !== node || entry.dark !== dark)) {
        entry.chart.dispose();
        entry = undefined;
      }
      if (!entry) {
        const chart = echarts.init(node, dark ? "dark" : undefined, { renderer: "svg" });
        entry = { unit: unit.capacityUnit, chart, node, items, lanes, dark };
        const mine = entry;
        chart.on("click", (event) => pinRef.current(mine.items[event.dataIndex as number]));
        entries.current.set(unit.capacityUnit, entry);
      }
      entry.items = items;
      entry.lanes = lanes;
      const state = entry;
      const zoom = (entry.chart.getOption() as { dataZoom?: { start: number; end: number }[] } | undefined)?.dataZoom?.[0];
      entry.chart.setOption({
        backgroundColor: "transparent",
        useUTC: true,
        // Zoom with the mouse wheel and drag to pan (kept across the page's refreshes).
        dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none", start: zoom?.start ?? 0, end: zoom?.end ?? 100 }],
        animation: false,
        grid: { left: 4, right: 24, top: TOP, bottom: BOTTOM },
        tooltip: {
          trigger: "item", confine: true,
          formatter: (p: { dataIndex: number }) => {
            const item = state.items[p.dataIndex];
            if (!item) return "";
            const { title, facts } = describe(item, timeline, name, timeText);
            const stop = item.bar?.preemptedBy ? `<div style="color:${STOP_COLOR}">Stopping for ${escapeHtml(name(item.bar.preemptedBy))}</div>` : "";
            return `<div class="tl-tip"><b>${escapeHtml(title)}</b>${stop}<table>${facts.map(([k, v]) =>
              `<tr><th style="text-align:left;padding-right:8px;vertical-align:top">${escapeHtml(k)}</th><td style="white-space:normal;max-width:420px">${escapeHtml(v)}</td></tr>`).join("")}</table></div>`;
          },
        },
        xAxis: { type: "time", min: since, max: until, axisLabel: { color: ink.muted, hideOverlap: true },
          splitLine: { show: true, lineStyle: { opacity: 0.25 } } },
        yAxis: { type: "category", data: lanes, inverse: true, axisTick: { show: false }, axisLabel: { show: false },
          splitLine: { show: true, lineStyle: { opacity: 0.2 } } },
        series: [{
          id: "bars", type: "custom", encode: { x: [1, 2], y: 0 },
          data: items.map((item, index) => [item.lane, item.start, item.end, index]),
          // eslint-disable-next-line @typescript-eslint/no-explicit-any
          renderItem: (params: any, api: any) => {
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
            const isSelected = selected !== null && item.jobId === selected;
            const color = item.kind === "wait" ? ink.muted : colorOf(item.bar?.quotaShareName);
            const style: Record<string, unknown> = { fill: color, stroke: isSelected ? ink.fg : null, lineWidth: isSelected ? 2 : 0, opacity: item.dim ? 0.25 : 1 };
            let text = "";
            if (item.kind === "wait") {
              style.opacity = 0.55;
            } else if (item.bar?.phase === "STOPPING") {
              style.fill = `${color}55`;
              style.stroke = STOP_COLOR;
              style.lineWidth = isSelected ? 3 : 2;
              text = item.bar.preemptedBy ? "stopping" : "terminating";
            } else if (item.bar) {
              text = item.label + (item.bar.borrowed ? " (borrowed)" : "");
              if (item.bar.borrowed) {
                style.fill = `${color}99`;
                style.stroke = isSelected ? ink.fg : color;
                style.lineWidth = isSelected ? 2 : 1.5;
                style.lineDash = [4, 3];
              }
            }
            const children: unknown[] = [{ type: "rect", shape, style }];
            if (text && shape.width > 40) {
              children.push({ type: "text", silent: true, style: { x: shape.x + 4, y: shape.y + shape.height / 2, text,
                fill: item.bar?.phase === "STOPPING" ? ink.fg : "#fff", fontSize: 11, verticalAlign: "middle",
                width: shape.width - 8, overflow: "truncate" } });
            }
            return { type: "group", children };
          },
        }],
      }, { notMerge: true });
      entry.chart.resize();
    }
    for (const [unit, entry] of entries.current) {
      if (!seen.has(unit)) {
        entry.chart.dispose();
        entries.current.delete(unit);
      }
    }
    host.quotaDrawn = () => [...entries.current.values()].flatMap((entry) => entry.items.map((item) => {
      const [x, y] = entry.chart.convertToPixel({ gridIndex: 0 }, [(item.start + item.end) / 2, item.lane]) as number[];
      const box = entry.node.getBoundingClientRect();
      return {
        unit: entry.unit, kind: item.kind, jobId: item.jobId, label: item.label, lane: item.lane,
        phase: item.bar ? item.bar.phase : "WAITING", borrowed: item.bar ? item.bar.borrowed : false,
        device: item.bar && item.bar.device !== undefined ? item.bar.device : null, laneName: entry.lanes[item.lane],
        preemptedBy: item.bar ? item.bar.preemptedBy : null, share: item.bar ? item.bar.quotaShareName : item.job?.quotaShareName,
        start: item.start, end: item.end, dim: item.dim, x: box.left + x, y: box.top + y,
      };
    }));
  });

  useEffect(() => {
    const current = entries.current;
    const resize = () => current.forEach((entry) => entry.chart.resize());
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      current.forEach((entry) => entry.chart.dispose());
      current.clear();
    };
  }, []);

  const details = pinnedItem ? describe(pinnedItem, timeline, name, timeText) : null;
  return (
    <Box ref={hostRef} className="timeline" data-queue={timeline.jobQueueName}>
      {drawnUnits.map(({ unit, lanes }) => (
        <Box key={unit.capacityUnit} className="timeline-unit" data-unit={unit.capacityUnit} mb={2}>
          <Text className="timeline-title" fontSize="sm" color="fg.muted" mb={1}>
            {unit.devices
              ? `${unit.capacityUnit}: one row per GPU of the host (${unit.capacity}), by device index`
              : `${unit.capacityUnit}: one row per unit of capacity (${unit.capacity})`}
          </Text>
          <Flex>
            <Box className="timeline-lanes" width={`${LABEL_PX}px`} flexShrink={0} pt={`${TOP}px`}>
              {lanes.map((lane, index) => (
                <Text key={index} className="lane" title={lane} height={`${ROW_PX}px`} lineHeight={`${ROW_PX}px`}
                  fontSize="xs" truncate pr={2} textAlign="right">
                  {lane}
                </Text>
              ))}
            </Box>
            <Box className="timeline-chart" data-unit={unit.capacityUnit} flex="1" minWidth={0}
              height={`${lanes.length * ROW_PX + TOP + BOTTOM}px`} />
          </Flex>
        </Box>
      ))}
      {units.length === 0 ? <Text color="fg.muted" className="timeline-empty">No capacity units.</Text> : null}
      {pinnedItem && details ? (
        <Box className="timeline-details" data-job={pinnedItem.jobId} data-kind={pinnedItem.kind}
          data-phase={pinnedItem.bar ? pinnedItem.bar.phase : "WAITING"} borderWidth="1px" borderColor="border"
          borderRadius="md" p={3} fontSize="sm">
          <Text fontWeight="bold">{details.title}</Text>
          {details.preemption?.by ? (
            <Text className="preemption" color="fg.error">
              {details.preemption.stopping ? "Stopping for " : "Preempted by "}
              <Link className="preemptor" data-job={details.preemption.by} href="#" color="fg.info" display="inline"
                onClick={(event) => { event.preventDefault(); pinJob(details.preemption?.by as string); }}>
                {name(details.preemption.by)}
              </Link>
              {` (${details.preemption.rule ?? "preemption"})`}
              {details.preemption.lost ? <Text as="span" className="lost-work">{`, ${details.preemption.lost}`}</Text> : null}
              {`: ${details.preemption.reason}`}
              {details.preemption.stopping ? " — its capacity goes to that job once this one has stopped" : ""}
            </Text>
          ) : null}
          <Box as="dl" display="grid" gridTemplateColumns="max-content 1fr" columnGap={3} rowGap={0.5} mt={2}>
            {details.facts.map(([term, value], index) => [
              <Box as="dt" key={`t${index}`} color="fg.muted">{term}</Box>,
              <Box as="dd" key={`d${index}`}>{value}</Box>,
            ])}
          </Box>
          {pinnedItem.job && openTask ? (
            <Button size="xs" variant="outline" mt={2} className="open-task"
              onClick={() => openTask((pinnedItem.job as TimelineJob).taskInstance.path)}>
              Open its task instance
            </Button>
          ) : null}
        </Box>
      ) : pinned ? (
        <Text className="timeline-details" color="fg.muted" fontSize="sm">{`${name(pinned.jobId)} has no bar or wait in this window.`}</Text>
      ) : (
        <Text className="timeline-details" color="fg.muted" fontSize="sm">
          Hover over a bar for its job; click it to keep its details here. Times in UTC.
        </Text>
      )}
    </Box>
  );
}
