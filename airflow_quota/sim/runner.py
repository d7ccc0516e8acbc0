"""The discrete-event loop: replays a scenario's events against the quota engine on a simulated clock.

Time jumps from one moment to the next one at which something is due (a heap of timers: a job's work
ends, its start ends, its stop completes) or an event is given. At each moment, in this order: the work,
starts and stops due then complete; the events of that moment are applied in file order; then allocation
cycles run (``engine.plan_cycle``) until one decides nothing, with the timers that fall due at that same
moment (zero-second stops and starts, zero-length work) applied between cycles. The engine's own
lifecycle functions make every state change; this module keeps the clock, each job's progress and the
timeline (a ``Step`` per moment at which anything happened), and feeds ``metrics.MetricsRecorder``.
Finished jobs are dropped from the engine's state at the end of each moment, so long traces stay fast.

The timers are ``clock.Timers``, each job's progress a ``jobs.JobRecord``, what a run returns is in
``result``, and the configuration after a queue or share update comes from ``queue_updates``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from airflow_quota.engine.extensions import lost_unit_seconds
from airflow_quota.engine.lifecycle import (
    complete_stop,
    finish_job,
    set_status,
    submit_job,
    terminate_job,
    update_priority,
    update_queue,
    without_final_jobs,
)
from airflow_quota.engine.model import (
    Grant,
    Job,
    JobStatus,
    Preemption,
    QueueState,
    StopCause,
)
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.sim.clock import Timer, Timers
from airflow_quota.sim.holds import HoldEnd, HoldRecorder
from airflow_quota.sim.jobs import JobRecord
from airflow_quota.sim.metrics import MetricsRecorder
from airflow_quota.sim.queue_updates import queue_updated, share_updated
from airflow_quota.sim.result import (
    Change,
    ChangeKind,
    JobOutcome,
    JobView,
    SimulationError,
    SimulationResult,
    Step,
)
from airflow_quota.sim.scenario import (
    QueueConfiguration,
    Scenario,
    ScenarioEvent,
    SubmitJob,
    TerminateJob,
    UpdateJob,
    UpdateJobQueue,
    UpdateQuotaShare,
)

#: statusReason of a job whose work ran out while it was being stopped, by why it was being stopped.
FINISHED_WHILE_STOPPING = {
    StopCause.PREEMPTED: "Finished while being stopped; not counted as a preemption",
    StopCause.TERMINATED: "Finished while being stopped for termination",
}


def simulate(
    scenario: Scenario,
    *,
    record_steps: bool = True,
    checkpoint_interval: float = 0.0,
) -> SimulationResult:
    """Run ``scenario`` to its end; raise ``SimulationError`` when an event does not apply."""
    return Simulation(scenario, record_steps=record_steps, checkpoint_interval=checkpoint_interval).run()


class Simulation:
    """One run. ``record_steps=False`` skips the timeline (trace mode); metrics are always kept.

    ``checkpoint_interval`` (seconds of work, 0 = none): a preempted job resumes from its last checkpoint
    at the moment the preemption was decided instead of where it stopped. The engine's jobs carry when
    they last checkpointed (``Job.last_checkpoint``): what a preemption loses is the engine's own figure
    (``engine.extensions.lost_unit_seconds``); without a checkpoint interval a job checkpoints when its
    stop begins (it resumes where it stopped), so it loses its stop's time.
    """

    def __init__(self, scenario: Scenario, *, record_steps: bool = True, checkpoint_interval: float = 0.0):
        if checkpoint_interval < 0:
            raise ValueError("checkpoint_interval must be >= 0")
        self.scenario = scenario
        self.settings = scenario.settings
        self.record_steps = record_steps
        self.checkpoint_interval = checkpoint_interval
        self.configuration: QueueConfiguration = scenario.configuration
        self.state = QueueState(self.configuration.queue)
        self.metrics = MetricsRecorder(self.configuration.queue.capacity)
        self.holds = HoldRecorder()
        self.records: dict[str, JobRecord] = {}
        self.steps: list[Step] = []
        self._timers = Timers(self.records)
        self._submission_seq = 0
        self._changes: list[Change] = []
        self._became_final = False
        self._now = 0.0
        events = len(scenario.events)
        #: Guards against a preemption loop: moments in all, and cycles at one moment.
        self._max_moments = 10_000 + 100 * events
        self._max_cycles = 1_000 + 20 * events
        self._configured()

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        events = sorted(self.scenario.events, key=lambda event: (event.at, event.index))
        next_event = 0
        moments = 0
        while True:
            timer_at = self._timers.next_at()
            event_at = events[next_event].at if next_event < len(events) else None
            if timer_at is None and event_at is None:
                break
            now = min(t for t in (timer_at, event_at) if t is not None)
            moments += 1
            if moments > self._max_moments:
                raise SimulationError(
                    self.scenario.source,
                    f"the simulation did not settle after {self._max_moments} moments (a preemption loop?)",
                    at=now,
                )
            self._begin(now)
            self._run_due_timers()
            while next_event < len(events) and events[next_event].at == now:
                self._apply(events[next_event])
                next_event += 1
            self._allocate()
            self._end()
        return self._result()

    def _begin(self, now: float) -> None:
        self._now = now
        self._changes = []
        self._became_final = False
        self.metrics.advance(now)

    def _end(self) -> None:
        if self._became_final:
            self.state = without_final_jobs(self.state)
        if not self.record_steps:
            return
        for job in self.state.jobs.values():
            if (
                job.status is JobStatus.RUNNABLE
                and job.status_reason != self.records[job.job_id].reported_reason
            ):
                self.records[job.job_id].reported_reason = job.status_reason
                self._note(Change(ChangeKind.WAITING, job.job_id, job.status_reason))
        if self._changes:
            self.steps.append(Step(self._now, tuple(self._changes), self._snapshot()))

    def _allocate(self) -> None:
        if self._checkpoints_seen:
            self._report_checkpoints()
        for _ in range(self._max_cycles):
            plan = plan_cycle(self.state, self._now)
            self.state = plan.state
            for job_id, at in plan.deferred.items():
                if at > self._now and (job_id, at) not in self._wakes:
                    # A preemption put off (minimumRunSeconds, preemptAtCheckpoint): a cycle then.
                    self._wakes.add((job_id, at))
                    self._timers.push(at, Timer.WAKE, self.records[job_id])
            for decision in plan.decisions:
                if isinstance(decision, Grant):
                    self._granted(decision)
                elif isinstance(decision, Preemption):
                    self._preempting(decision)
            timers_ran = self._run_due_timers()
            if not plan.decisions and not timers_ran:
                return
        raise SimulationError(
            self.scenario.source,
            f"allocation did not settle after {self._max_cycles} cycles at one moment (a preemption loop?)",
            at=self._now,
        )

    # -- timers --------------------------------------------------------------------------------------

    def _run_due_timers(self) -> bool:
        ran = False
        while (due := self._timers.pop_due(self._now)) is not None:
            kind, record = due
            if kind is Timer.WORK_DONE:
                self._work_done(record)
            elif kind is Timer.STARTED:
                self._start_done(record)
            elif kind is Timer.STOPPED:
                self._stop_done(record)
            # (Timer.WAKE: nothing ends; a cycle runs since a timer ran.)
            ran = True
        return ran

    def _work_done(self, record: JobRecord) -> None:
        job = self.state.jobs[record.name]
        record.progress = record.progress_at(self._now)
        reason = FINISHED_WHILE_STOPPING[job.stop_cause] if job.stop_cause is not None else ""
        self.state = finish_job(self.state, record.name, succeeded=True, reason=reason)
        self._released(record)
        self.holds.released(record.name, self._now, HoldEnd.SUCCEEDED)
        self._final(record)
        self._note(Change(ChangeKind.FINISHED, record.name, reason))

    def _start_done(self, record: JobRecord) -> None:
        job = self.state.jobs.get(record.name)
        if job is None or job.status is not JobStatus.STARTING or job.is_stopping:
            return  # a job being stopped keeps its status until the stop completes
        self.state = set_status(self.state, record.name, JobStatus.RUNNING)
        self._running(record)
        self._note(Change(ChangeKind.RUNNING, record.name))

    def _stop_done(self, record: JobRecord) -> None:
        job = self.state.jobs[record.name]
        preempted = job.stop_cause is StopCause.PREEMPTED
        stopped_at_progress = record.progress_at(self._now)
        stop_started = record.stop_started_at if record.stop_started_at is not None else self._now
        # What the preemption lost, as the engine counts it: from the last checkpoint before the stop.
        at_checkpoint = replace(job, last_checkpoint=self._checkpoint_time(record, stop_started))
        lost = lost_unit_seconds(at_checkpoint, self._now) if preempted else None
        self.state = complete_stop(self.state, record.name)
        self._released(record)
        if lost is not None:
            checkpoint = self._last_checkpoint(record.progress_at_stop)
            self.metrics.preempted(record.share, record.unit, lost)
            record.lost_unit_seconds += lost
            record.progress = stopped_at_progress if self.checkpoint_interval <= 0 else checkpoint
        else:
            record.progress = stopped_at_progress
        after = self.state.jobs[record.name]
        requeued = after.status is JobStatus.RUNNABLE
        self.holds.released(
            record.name, self._now, HoldEnd.REQUEUED if requeued else HoldEnd.FAILED, lost=lost
        )
        if requeued:
            self._waiting(record)
            self._note(Change(ChangeKind.REQUEUED, record.name, after.status_reason))
        else:
            self._final(record)
            self._note(Change(ChangeKind.FAILED, record.name, after.status_reason))

    def _checkpoint_time(self, record: JobRecord, stop_started: float) -> float | None:
        """When the job's training was last at a checkpoint before its stop began at ``stop_started``
        (None: never in this attempt's lineage, the attempt's start counts). Every ``checkpoint_interval``
        seconds of work; an attempt that resumed from one was at it when it began running. Without an
        interval, a job checkpoints as its stop begins."""
        if self.checkpoint_interval <= 0:
            return stop_started
        if record.running_since is None:
            return None  # not running yet (STARTING): its start counts
        progress = record.progress_at(stop_started)
        checkpoint = self._last_checkpoint(progress)
        if checkpoint <= 0:
            return None
        return record.running_since + max(0.0, checkpoint - record.progress)

    def _report_checkpoints(self) -> None:
        """The running jobs' latest checkpoints, as trainings report them, for the shares whose rules read
        them (``checkpointAwareVictims``, ``preemptAtCheckpoint``)."""
        jobs = self.state.jobs
        changed = {}
        for name, job in jobs.items():
            if job.status is not JobStatus.RUNNING or job.stop_cause is not None:
                continue
            at = self._checkpoint_time(self.records[name], self._now)
            if at != job.last_checkpoint:
                changed[name] = replace(job, last_checkpoint=at)
        if changed:
            self.state = QueueState(self.state.queue, {**jobs, **changed})

    def _configured(self) -> None:
        """What the shares' extensions ask of the simulation: checkpoints reported to the engine, and a
        cycle when a job's minimum run time before preemption ends (and when a preemption put off may be
        made: ``_allocate``)."""
        shares = self.state.queue.shares
        self._checkpoints_seen = self.checkpoint_interval > 0 and any(
            share.checkpoint_aware_victims or share.preempt_at_checkpoint is not None for share in shares
        )
        #: The cycles set for preemptions put off, by job and moment (each set once).
        self._wakes: set[tuple[str, float]] = set()
        self._minimum_run = {
            share.name: share.minimum_run_seconds for share in shares if share.minimum_run_seconds > 0
        }

    def _last_checkpoint(self, progress: float) -> float:
        if self.checkpoint_interval <= 0:
            return progress
        return math.floor(progress / self.checkpoint_interval) * self.checkpoint_interval

    # -- decisions -----------------------------------------------------------------------------------

    def _granted(self, grant: Grant) -> None:
        record = self.records[grant.job_id]
        record.epoch += 1
        self._not_waiting(record)
        record.started_at, record.stopped_at, record.stop_started_at = self._now, None, None
        if record.first_started_at is None:
            record.first_started_at = self._now
        minimum_run = self._minimum_run.get(record.share)
        if minimum_run:
            self._timers.push(self._now + minimum_run, Timer.WAKE, record)
        self.metrics.held(record.unit, record.count)
        priority = self.state.jobs[record.name].priority
        self.holds.granted(
            record.name, record.share, record.unit, record.count, grant.borrowed, priority, self._now
        )
        self._note(
            Change(
                ChangeKind.GRANTED,
                record.name,
                units=grant.instance_count,
                unit=grant.capacity_unit,
                borrowed=grant.borrowed,
            )
        )
        if self.settings.start_seconds > 0:
            self.state = set_status(self.state, record.name, JobStatus.STARTING)
            self._timers.push(self._now + self.settings.start_seconds, Timer.STARTED, record)
        else:
            self.state = set_status(self.state, record.name, JobStatus.RUNNING)
            self._running(record)

    def _preempting(self, preemption: Preemption) -> None:
        for victim_id in preemption.victim_ids:
            record = self.records[victim_id]
            self._stopping(record)
            self.holds.stopping(victim_id, self._now, by=preemption.preemptor_id, rule=str(preemption.rule))
            self._note(
                Change(
                    ChangeKind.PREEMPTED,
                    victim_id,
                    self.state.jobs[victim_id].status_reason,
                    by=preemption.preemptor_id,
                    rule=str(preemption.rule),
                )
            )

    # -- one job's bookkeeping -----------------------------------------------------------------------

    def _running(self, record: JobRecord) -> None:
        record.running_since = self._now
        if record.duration is not None:
            self._timers.push(
                self._now + max(0.0, record.duration - record.progress), Timer.WORK_DONE, record
            )

    def _stopping(self, record: JobRecord) -> None:
        """A stop begins (unless one is already under way, which keeps its timer)."""
        if record.stop_started_at is None:
            record.stop_started_at = self._now
            record.progress_at_stop = record.progress_at(self._now)
            self._timers.push(self._now + self.settings.stop_seconds, Timer.STOPPED, record)

    def _released(self, record: JobRecord) -> None:
        """The attempt ended (work done or stop completed): its units are free, its timers void."""
        record.epoch += 1
        if record.started_at is not None:
            record.held_seconds += self._now - record.started_at
        record.running_since = None
        record.stop_started_at = None
        record.stopped_at = self._now
        self.metrics.held(record.unit, -record.count)

    def _waiting(self, record: JobRecord) -> None:
        record.runnable_since = self._now
        record.ever_runnable = True

    def _not_waiting(self, record: JobRecord) -> None:
        if record.runnable_since is not None:
            record.runnable_seconds += self._now - record.runnable_since
            record.runnable_since = None

    def _final(self, record: JobRecord) -> None:
        self._not_waiting(record)
        record.final = self.state.jobs[record.name]
        self._became_final = True
        self.metrics.job_final(self._now)

    def _note(self, change: Change) -> None:
        if self.record_steps:
            self._changes.append(change)

    # -- events --------------------------------------------------------------------------------------

    def _apply(self, event: ScenarioEvent) -> None:
        action = event.action
        if isinstance(action, SubmitJob):
            self._submit(event, action)
        elif isinstance(action, UpdateJob):
            self._update_job(event, action)
        elif isinstance(action, TerminateJob):
            self._terminate(event, action)
        elif isinstance(action, UpdateQuotaShare):
            self._update_share(event, action)
        else:
            self._update_queue(event, action)

    def _submit(self, event: ScenarioEvent, action: SubmitJob) -> None:
        request = action.request
        name = request.job_name
        if name in self.records:
            raise self._error(
                event, f"a job named {name!r} was already submitted; give each job its own jobName"
            )
        share_names = self.state.queue.share_names()
        if request.quota_share_name not in share_names:
            raise self._error(
                event,
                f"quota share {request.quota_share_name!r} does not exist in job queue "
                f"{self.state.queue.name!r}; use one of: {', '.join(share_names)}",
            )
        self._submission_seq += 1
        self.state = submit_job(self.state, name, request, self._now, seq=self._submission_seq)
        job = self.state.jobs[name]
        record = JobRecord(
            name=name,
            share=request.quota_share_name,
            unit=request.capacity_unit,
            count=request.instance_count,
            duration=action.duration,
            submitted_at=self._now,
        )
        self.records[name] = record
        self.metrics.submitted(self._now)
        if job.status is JobStatus.FAILED:
            self._final(record)
            self._note(Change(ChangeKind.FAILED, name, job.status_reason))
        else:
            self._waiting(record)
            self._note(Change(ChangeKind.SUBMITTED, name, f"priority {request.scheduling_priority}"))

    def _update_job(self, event: ScenarioEvent, action: UpdateJob) -> None:
        record = self._record(event, action.job_name)
        if record.final is not None:
            reason = f"already {record.final.status}; schedulingPriority left unchanged"
            self._note(Change(ChangeKind.IGNORED, record.name, reason))
            return
        before = self.state.jobs[record.name].priority
        self.state = update_priority(self.state, record.name, action.scheduling_priority)
        reason = f"schedulingPriority {before} -> {action.scheduling_priority}"
        self._note(Change(ChangeKind.PRIORITY_UPDATED, record.name, reason))

    def _terminate(self, event: ScenarioEvent, action: TerminateJob) -> None:
        record = self._record(event, action.job_name)
        if record.final is not None:
            reason = f"already {record.final.status}; nothing to terminate"
            self._note(Change(ChangeKind.IGNORED, record.name, reason))
            return
        granted = self.state.jobs[record.name].status.holds_capacity
        self.state = terminate_job(self.state, record.name, action.reason)
        job = self.state.jobs[record.name]
        if granted:
            self._stopping(record)
            self.holds.stopping(record.name, self._now)
            self._note(Change(ChangeKind.TERMINATING, record.name, job.status_reason))
        else:
            self._final(record)
            self._note(Change(ChangeKind.FAILED, record.name, job.status_reason))

    def _update_share(self, event: ScenarioEvent, action: UpdateQuotaShare) -> None:
        configuration, change = share_updated(self.configuration, event, action, self.scenario.source)
        self._configure(configuration)
        self._note(change)

    def _update_queue(self, event: ScenarioEvent, action: UpdateJobQueue) -> None:
        configuration, change = queue_updated(self.configuration, event, action, self.scenario.source)
        self._configure(configuration)
        self.metrics.capacity_changed(self._now, configuration.queue.capacity)
        self._note(change)

    def _configure(self, configuration: QueueConfiguration) -> None:
        self.configuration = configuration
        self.state = update_queue(self.state, configuration.queue)
        self._configured()

    def _record(self, event: ScenarioEvent, job_name: str) -> JobRecord:
        record = self.records.get(job_name)
        if record is None:
            known = ", ".join(self.records) or "none yet"
            raise self._error(
                event,
                f"no job named {job_name!r} has been submitted before this event (jobs so far: {known})",
            )
        return record

    def _error(self, event: ScenarioEvent, message: str) -> SimulationError:
        return SimulationError(self.scenario.source, message, event=event)

    # -- results -------------------------------------------------------------------------------------

    def _view(self, record: JobRecord) -> Job:
        return record.final if record.final is not None else self.state.jobs[record.name]

    def _snapshot(self) -> dict[str, JobView]:
        return {
            name: JobView(job.status, job.status_reason)
            for name, record in self.records.items()
            for job in (self._view(record),)
        }

    @staticmethod
    def _still_held_seconds(record: JobRecord, end: float) -> float:
        """Seconds of the attempt that still holds units at the end of the run (0 if none does)."""
        if record.started_at is None or record.stopped_at is not None:
            return 0.0
        return end - record.started_at

    def _result(self) -> SimulationResult:
        end = self._now
        outcomes: dict[str, JobOutcome] = {}
        for name, record in self.records.items():
            self._not_waiting(record)
            if record.ever_runnable:
                self.metrics.runnable_time(record.share, record.runnable_seconds)
            job = self._view(record)
            outcomes[name] = JobOutcome(
                name=name,
                quota_share_name=record.share,
                status=job.status,
                status_reason=job.status_reason,
                preempted_attempt_count=job.preempted_attempt_count,
                started_at=record.started_at,
                stopped_at=record.stopped_at,
                submitted_at=record.submitted_at,
                runnable_seconds=record.runnable_seconds,
                scheduling_priority=job.priority,
                capacity_unit=record.unit,
                instance_count=record.count,
                first_started_at=record.first_started_at,
                held_seconds=record.held_seconds + self._still_held_seconds(record, end),
                lost_unit_seconds=record.lost_unit_seconds,
            )
        metrics = self.metrics.result(end, self.state.queue.share_names())
        return SimulationResult(
            source=self.scenario.source,
            settings=self.settings,
            queue=self.state.queue,
            steps=tuple(self.steps),
            jobs=outcomes,
            metrics=metrics,
            end=end,
            holds=self.holds.holds(),
        )
