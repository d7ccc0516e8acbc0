"""The quota advisor: search quota designs by replaying a history in the simulator, and propose the best.

``advise`` replays the history (a trace, as ``airflow quota history`` writes it) under the current design
of one job queue, then runs a bounded local search (coordinate descent) from it: each round builds the
moves next to the best design so far (``_moves``: own limits moved between shares, strategies, borrow
limits, and our per-share extensions where the engine has them), ranks them by what the last replay says
(which share waits, which share idles, which share loses work to preemption), replays the best-ranked few
(in parallel processes when there are several cores) and keeps the best one when it beats the design it
came from. The search is deterministic for a given seed (the seed only breaks ties between moves of equal
rank), stops at a local optimum, after ``max_replays`` replays, or before a round that would pass the time
limit (the result then says so).

**Objective** (lower is better; docs/advisor.md): ``sum over shares of weight x (mean wait + p95 wait) / 2,
plus GPU-seconds lost to preemption per job``. A share's weight is its share of the jobs unless given. Ties
(within 0.5%) go to the higher utilization, then the fewer preemptions. A proposal must beat the current
design's objective by ``min_improvement`` (2%); otherwise the advisor found nothing better.

**Held fixed**: the queue's capacity, the set of shares, their units, ``state`` and in-share preemption;
no share's own limit below the units it held at its p95 in the current design's replay (time-weighted;
never above its current limit); a share's ceiling never below the largest job it submitted; RESERVE shares
stay RESERVE and no share becomes RESERVE (unless ``allow_reserve_changes``); no share's p95 wait more than
doubled (and at least 10 minutes longer) than under the current design.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.engine.model import QuotaShare
from airflow_quota.sim.metrics import p95
from airflow_quota.sim.result import SimulationResult
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import QueueConfiguration, Scenario, ScenarioEvent, Settings

#: Moves ranked within this fraction of the best score count as ties (then utilization, preemptions).
TIE_TOLERANCE = 0.005
#: A move is taken during the search when it lowers the objective by more than this fraction.
STEP_IMPROVEMENT = 0.005
#: borrowLimit values the search moves along (one step at a time); -1 is unlimited.
BORROW_LADDER = (0, 50, 100, 200, 400, -1)
#: minimumRunSeconds values tried (our extension).
MINIMUM_RUN_LADDER = (0, 300, 900, 1800)
#: A share's p95 wait may grow to at most this factor of the current design's ...
P95_GUARD_FACTOR = 2.0
#: ... and at least this many seconds more.
P95_GUARD_SLACK = 600.0

#: Whether the engine has our per-share extensions (issue 37): they are then part of the search.
EXTENSIONS_AVAILABLE = all(
    hasattr(QuotaShare, name)
    for name in ("checkpoint_aware_victims", "minimum_run_seconds", "starvation_limit_seconds")
)

OBJECTIVE_TEXT = (
    "sum over shares of weight x (mean wait + p95 wait) / 2, plus GPU-seconds lost to preemption per job "
    "(seconds; lower is better). Weight: the share's fraction of the jobs. Ties within 0.5% go to the "
    "higher utilization, then to fewer preemptions."
)


@dataclass(frozen=True, slots=True)
class AdviseOptions:
    """How the history is replayed and how far the search goes."""

    stop_seconds: float = 60.0
    start_seconds: float = 0.0
    checkpoint_interval: float = 900.0
    max_replays: int = 24
    time_limit: float = 50.0
    workers: int = 0  # 0: one per core, at most 2
    seed: int = 0
    min_improvement: float = 0.02
    allow_reserve_changes: bool = False
    #: Share name -> weight in the objective (the others keep their job-count weight).
    weights: Mapping[str, float] = field(default_factory=dict)

    def worker_count(self) -> int:
        if self.workers > 0:
            return self.workers
        return max(1, min(2, os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class ShareStats:
    """One share in one replay: waits (RUNNABLE seconds) over its jobs, capacity held, preemptions."""

    jobs: int
    wait_mean: float
    wait_p50: float
    wait_p95: float
    held_unit_seconds: float
    preemptions: int
    lost_unit_seconds: float
    unfinished: int
    #: Per unit: the units the share held at its time-weighted p95 over the span.
    usage_p95: dict[str, int]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What one replay of the history under one design measured."""

    shares: dict[str, ShareStats]
    utilization: dict[str, float | None]
    span_seconds: float
    jobs: int
    preemptions: int
    lost_unit_seconds: float
    unfinished: int
    wall_seconds: float

    def capacity_share(self, share: str, capacity: Mapping[str, int]) -> float:
        """The share's unit-seconds held as a fraction of the queue's capacity over the span."""
        offered = sum(capacity.values()) * self.span_seconds
        return self.shares[share].held_unit_seconds / offered if offered > 0 else 0.0

    def mean_utilization(self) -> float:
        values = [value for value in self.utilization.values() if value is not None]
        return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True, slots=True)
class Trial:
    """One replayed design: what changed from the design it came from, and its score."""

    number: int
    round: int
    move: str
    shares: tuple[dict[str, Any], ...]
    evaluation: Evaluation
    score: float
    allowed: bool
    taken: bool = False


@dataclass(frozen=True, slots=True)
class Advice:
    """The search's outcome. ``improved``: the proposal beats the current design by ``min_improvement``."""

    queue_name: str
    capacity: dict[str, int]
    current_shares: tuple[dict[str, Any], ...]
    proposed_shares: tuple[dict[str, Any], ...]
    current: Evaluation
    proposed: Evaluation
    current_score: float
    proposed_score: float
    improved: bool
    weights: dict[str, float]
    floors: dict[str, dict[str, int]]
    held_fixed: list[str]
    not_searched: list[str]
    trials: list[Trial]
    stopped_because: str
    #: False when the search stopped at its replay or time limit, before a local optimum.
    complete: bool
    elapsed_seconds: float
    options: AdviseOptions
    job_count: int

    @property
    def improvement(self) -> float:
        if self.current_score <= 0:
            return 0.0
        return (self.current_score - self.proposed_score) / self.current_score


class AdviseError(ValueError):
    """The advisor cannot run on this input (the message is one line)."""


# --- the replay of one design -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    source: str
    queue_raw: dict[str, Any]
    events: tuple[ScenarioEvent, ...]
    settings: Settings
    checkpoint_interval: float


#: The replay context of the worker processes (set before the pool forks, so the events are not pickled).
_CONTEXT: _Context | None = None


def _replay(shares: Sequence[Mapping[str, Any]]) -> Evaluation:
    assert _CONTEXT is not None
    context = _CONTEXT
    configuration = QueueConfiguration.parse(context.queue_raw, list(shares), context.source)
    scenario = Scenario(context.source, configuration, context.settings, context.events)
    started = time.perf_counter()
    result = simulate(scenario, record_steps=False, checkpoint_interval=context.checkpoint_interval)
    return summarize(result, time.perf_counter() - started)


def summarize(result: SimulationResult, wall_seconds: float = 0.0) -> Evaluation:
    """The advisor's figures of one replay."""
    metrics = result.metrics
    start = metrics.span_start or 0.0
    end = metrics.span_end if metrics.span_end is not None else start
    waits: dict[str, list[float]] = defaultdict(list)
    unfinished: dict[str, int] = defaultdict(int)
    for job in result.jobs.values():
        waits[job.quota_share_name].append(job.runnable_seconds)
        if not job.status.is_final:
            unfinished[job.quota_share_name] += 1
    held: dict[str, float] = defaultdict(float)
    levels: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for hold in result.holds:
        until = hold.until(result.end)
        held[hold.share] += hold.count * max(0.0, until - hold.granted_at)
        levels[(hold.share, hold.unit)] += [(hold.granted_at, hold.count), (until, -hold.count)]
    shares: dict[str, ShareStats] = {}
    for share in result.queue.shares:
        name = share.name
        values = sorted(waits.get(name, []))
        usage = {unit: _time_p95(levels.get((name, unit), []), start, end) for unit in share.capacity_limits}
        lost = sum(by_share.get(name, 0.0) for by_share in metrics.lost_unit_seconds.values())
        shares[name] = ShareStats(
            jobs=len(values),
            wait_mean=sum(values) / len(values) if values else 0.0,
            wait_p50=values[(len(values) - 1) // 2] if values else 0.0,
            wait_p95=p95(values) or 0.0,
            held_unit_seconds=held.get(name, 0.0),
            preemptions=metrics.preemptions_by_share.get(name, 0),
            lost_unit_seconds=lost,
            unfinished=unfinished.get(name, 0),
            usage_p95=usage,
        )
    return Evaluation(
        shares=shares,
        utilization=dict(metrics.utilization),
        span_seconds=max(0.0, end - start),
        jobs=len(result.jobs),
        preemptions=metrics.preemptions_total,
        lost_unit_seconds=sum(metrics.lost_total(unit) for unit in metrics.lost_unit_seconds),
        unfinished=sum(unfinished.values()),
        wall_seconds=wall_seconds,
    )


def _time_p95(changes: list[tuple[float, int]], start: float, end: float) -> int:
    """The time-weighted nearest-rank p95 of the units held over ``[start, end]``, from +/- changes."""
    total = end - start
    if total <= 0 or not changes:
        return 0
    changes.sort()
    seconds_at: dict[int, float] = defaultdict(float)
    level, clock = 0, start
    for at, delta in changes:
        at = min(max(at, start), end)
        if at > clock:
            seconds_at[level] += at - clock
            clock = at
        level += delta
    if end > clock:
        seconds_at[level] += end - clock
    covered = 0.0
    for value in sorted(seconds_at):
        covered += seconds_at[value]
        if covered >= 0.95 * total - 1e-9:
            return value
    return max(seconds_at)


class _Replayer:
    """Replays designs in worker processes (forked, so they inherit the events; in this process where
    fork is not available). A round can be cut at a deadline: its unfinished replays are abandoned."""

    def __init__(self, context: _Context, workers: int) -> None:
        global _CONTEXT
        _CONTEXT = context
        self.workers = workers
        self._pool: Any = None
        if "fork" in multiprocessing.get_all_start_methods():
            self._pool = multiprocessing.get_context("fork").Pool(workers)
        else:
            self.workers = 1

    def replay(
        self,
        designs: Sequence[Sequence[Mapping[str, Any]]],
        done: Callable[[], None],
        deadline: float | None = None,
    ) -> list[Evaluation | None]:
        """Each design's evaluation, in order; None for those the deadline (``time.perf_counter()``) cut."""
        results: list[Evaluation | None] = [None] * len(designs)
        if self._pool is None:
            for index, design in enumerate(designs):
                results[index] = _replay(design)
                done()
            return results
        work = [(index, list(design)) for index, design in enumerate(designs)]
        finished = self._pool.imap_unordered(_replay_indexed, work)
        for _ in work:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            try:
                index, evaluation = finished.next(timeout)
            except multiprocessing.TimeoutError:
                self.close()
                break
            results[index] = evaluation
            done()
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _replay_indexed(item: tuple[int, Sequence[Mapping[str, Any]]]) -> tuple[int, Evaluation]:
    return item[0], _replay(item[1])


# --- the objective and the rules held fixed -----------------------------------------------------------------


def share_weights(evaluation: Evaluation, given: Mapping[str, float]) -> dict[str, float]:
    """Each share's weight: as given, else its fraction of the jobs."""
    total = sum(stats.jobs for stats in evaluation.shares.values()) or 1
    return {name: float(given.get(name, stats.jobs / total)) for name, stats in evaluation.shares.items()}


def objective(evaluation: Evaluation, weights: Mapping[str, float]) -> float:
    """Lower is better: weighted (mean + p95) / 2 wait per share, plus GPU-seconds lost per job."""
    waits = sum(
        weights.get(name, 0.0) * (stats.wait_mean + stats.wait_p95) / 2
        for name, stats in evaluation.shares.items()
    )
    return waits + evaluation.lost_unit_seconds / max(1, evaluation.jobs)


def _rank_key(score: float, evaluation: Evaluation) -> tuple[float, float, int]:
    return (score, -evaluation.mean_utilization(), evaluation.preemptions)


def _better(a: tuple[float, Evaluation], b: tuple[float, Evaluation]) -> bool:
    """Whether ``a`` ranks before ``b``: a lower score beyond the tie tolerance, else utilization, else
    fewer preemptions."""
    (score_a, eval_a), (score_b, eval_b) = a, b
    if abs(score_a - score_b) > TIE_TOLERANCE * max(score_a, score_b, 1e-9):
        return score_a < score_b
    return _rank_key(0.0, eval_a)[1:] < _rank_key(0.0, eval_b)[1:]


def _within_guard(candidate: Evaluation, current: Evaluation) -> bool:
    """No share's p95 wait beyond twice (and 10 minutes beyond) the current design's."""
    for name, stats in candidate.shares.items():
        before = current.shares[name].wait_p95
        if stats.wait_p95 > max(P95_GUARD_FACTOR * before, before + P95_GUARD_SLACK):
            return False
    return True


# --- designs and moves --------------------------------------------------------------------------------------


def _strategy(share: Mapping[str, Any]) -> str:
    return str((share.get("resourceSharingConfiguration") or {}).get("strategy", "RESERVE"))


def _borrow_limit(share: Mapping[str, Any]) -> int:
    return int((share.get("resourceSharingConfiguration") or {}).get("borrowLimit", -1))


def _limits(share: Mapping[str, Any]) -> dict[str, int]:
    return {item["capacityUnit"]: int(item["maxCapacity"]) for item in share.get("capacityLimits") or []}


def _with_limit(share: dict[str, Any], unit: str, value: int) -> None:
    share["capacityLimits"] = [
        {**item, "maxCapacity": value} if item["capacityUnit"] == unit else item
        for item in share["capacityLimits"]
    ]


def _with_sharing(share: dict[str, Any], strategy: str, borrow_limit: int | None = None) -> None:
    sharing = {"strategy": strategy}
    if strategy == "LEND_AND_BORROW" and borrow_limit is not None and borrow_limit != -1:
        sharing["borrowLimit"] = borrow_limit  # type: ignore[assignment]
    share["resourceSharingConfiguration"] = sharing


def _with_extension(share: dict[str, Any], key: str, value: Any) -> None:
    extensions = dict(share.get("extensions") or {})
    if value is None:
        extensions.pop(key, None)
    else:
        extensions[key] = value
    if extensions:
        share["extensions"] = extensions
    else:
        share.pop("extensions", None)


def _ceiling(share: Mapping[str, Any], unit: str, capacity: int) -> int:
    own = _limits(share).get(unit, 0)
    if _strategy(share) != "LEND_AND_BORROW":
        return own
    borrow = _borrow_limit(share)
    return capacity if borrow == -1 else min(capacity, own * (100 + borrow) // 100)


def design_key(shares: Iterable[Mapping[str, Any]]) -> str:
    return json.dumps(list(shares), sort_keys=True)


@dataclass(frozen=True, slots=True)
class _Move:
    label: str
    shares: tuple[dict[str, Any], ...]
    rank: float


@dataclass
class _Rules:
    """What the search holds fixed, from the current design and its replay."""

    queue_raw: dict[str, Any]
    capacity: dict[str, int]
    current: tuple[dict[str, Any], ...]
    floors: dict[str, dict[str, int]]
    largest_job: dict[tuple[str, str], int]
    allow_reserve_changes: bool

    def allows(self, shares: Sequence[Mapping[str, Any]]) -> bool:
        for before, after in zip(self.current, shares, strict=True):
            name = str(after["quotaShareName"])
            if not self.allow_reserve_changes and (_strategy(before) == "RESERVE") != (
                _strategy(after) == "RESERVE"
            ):
                return False
            for unit, limit in _limits(after).items():
                if limit < self.floors[name].get(unit, 0):
                    return False
                largest = self.largest_job.get((name, unit), 0)
                fits_now = _ceiling(before, unit, self.capacity.get(unit, 0)) >= largest
                if fits_now and _ceiling(after, unit, self.capacity.get(unit, 0)) < largest:
                    return False
        for unit, total in self.capacity.items():
            if sum(_limits(share).get(unit, 0) for share in shares) > total:
                return False
        return True


def _moves(
    shares: tuple[dict[str, Any], ...],
    evaluation: Evaluation,
    weights: Mapping[str, float],
    rules: _Rules,
    rng: random.Random,
    gains: Mapping[str, float],
) -> list[_Move]:
    """The designs one step from ``shares``, best-ranked first (the rank: how much the move should help,
    in seconds of the objective, as the replay of ``shares`` suggests, plus what the same move gained
    when it was replayed from an earlier design)."""
    jobs = max(1, evaluation.jobs)
    need = {
        name: weights.get(name, 0.0) * (stats.wait_mean + stats.wait_p95) / 2
        for name, stats in evaluation.shares.items()
    }
    lost = {name: stats.lost_unit_seconds / jobs for name, stats in evaluation.shares.items()}
    moves: list[_Move] = []

    def add(label: str, rank: float, change: Callable[[list[dict[str, Any]]], None]) -> None:
        changed = [copy.deepcopy(share) for share in shares]
        change(changed)
        moves.append(_Move(label, tuple(changed), rank))

    index = {str(share["quotaShareName"]): position for position, share in enumerate(shares)}
    for unit, capacity in rules.capacity.items():
        holders = [name for name in index if unit in _limits(shares[index[name]])]
        step = max(1, capacity // 16)
        free = capacity - sum(_limits(shares[index[name]])[unit] for name in holders)
        receivers = sorted((name for name in holders if need[name] > 0), key=lambda n: -need[n])[:3]
        slack = {
            name: _limits(shares[index[name]])[unit] - rules.floors[name].get(unit, 0) for name in holders
        }
        donors: list[str | None] = [None] if free > 0 else []
        donors += sorted((name for name in holders if slack[name] > 0), key=lambda n: (need[n], -slack[n]))[
            :3
        ]
        for receiver in receivers:
            for donor in donors:
                if donor == receiver:
                    continue
                room = free if donor is None else slack[donor]
                for size in sorted({min(step, room), min(2 * step, room)}):
                    if size <= 0:
                        continue
                    source = "unassigned capacity" if donor is None else donor
                    label = f"{size} {unit} of own limit: {source} -> {receiver}"
                    donor_need = 0.0 if donor is None else need[donor]
                    rank = need[receiver] - donor_need - 0.01 * size

                    def transfer(
                        changed: list[dict[str, Any]],
                        r: str = receiver,
                        d: str | None = donor,
                        k: int = size,
                        u: str = unit,
                    ) -> None:
                        if d is not None:
                            _with_limit(changed[index[d]], u, _limits(changed[index[d]])[u] - k)
                        _with_limit(changed[index[r]], u, _limits(changed[index[r]])[u] + k)

                    add(label, rank, transfer)

    for name, position in index.items():
        share = shares[position]
        strategy = _strategy(share)
        if strategy == "LEND" and need[name] > 0:
            for borrow in (-1, 100):
                text = "unlimited" if borrow == -1 else f"{borrow}%"
                add(
                    f"{name}: LEND -> LEND_AND_BORROW (borrowLimit {text})",
                    0.8 * need[name] - (0.01 if borrow == 100 else 0.0),
                    partial(_sharing_at, position, "LEND_AND_BORROW", borrow),
                )
        if strategy == "LEND_AND_BORROW":
            if lost[name] > 0:
                add(
                    f"{name}: LEND_AND_BORROW -> LEND",
                    0.8 * lost[name],
                    partial(_sharing_at, position, "LEND", None),
                )
            current = _borrow_limit(share)
            rung = BORROW_LADDER.index(current) if current in BORROW_LADDER else None
            for direction, gain in ((1, 0.5 * need[name]), (-1, 0.6 * lost[name])):
                if rung is None or gain <= 0 or not 0 <= rung + direction < len(BORROW_LADDER):
                    continue
                value = BORROW_LADDER[rung + direction]
                add(
                    f"{name}: borrowLimit {_borrow_text(current)} -> {_borrow_text(value)}",
                    gain,
                    partial(_sharing_at, position, "LEND_AND_BORROW", value),
                )
        if rules.allow_reserve_changes and strategy == "RESERVE":
            others = max((need[other] for other in index if other != name), default=0.0)
            if others > 0:
                add(
                    f"{name}: RESERVE -> LEND",
                    0.7 * others,
                    partial(_sharing_at, position, "LEND", None),
                )
        if rules.allow_reserve_changes and strategy == "LEND" and lost.get(name, 0) == 0 and need[name] > 0:
            add(
                f"{name}: LEND -> RESERVE",
                0.3 * need[name],
                partial(_sharing_at, position, "RESERVE", None),
            )
        if EXTENSIONS_AVAILABLE:
            _extension_moves(name, position, share, evaluation, need, lost, add)

    rng.shuffle(moves)  # the seed breaks ties; the sort below is stable
    moves.sort(key=lambda move: -(move.rank + gains.get(move.label, 0.0)))
    return moves


def _extension_moves(
    name: str,
    position: int,
    share: Mapping[str, Any],
    evaluation: Evaluation,
    need: Mapping[str, float],
    lost: Mapping[str, float],
    add: Callable[[str, float, Callable[[list[dict[str, Any]]], None]], None],
) -> None:
    """Our per-share extensions (issue 37): checkpoint-aware victims, minimum run time, no starvation."""
    extensions = share.get("extensions") or {}
    total_lost = sum(lost.values())
    if total_lost > 0 and extensions.get("checkpointAwareVictims", "DISABLED") != "ENABLED":
        add(
            f"{name}: extensions.checkpointAwareVictims ENABLED",
            0.5 * total_lost,
            partial(_extension_at, position, "checkpointAwareVictims", "ENABLED"),
        )
    current = int(extensions.get("minimumRunSeconds", 0))
    if lost[name] > 0 and current in MINIMUM_RUN_LADDER:
        rung = MINIMUM_RUN_LADDER.index(current)
        if rung + 1 < len(MINIMUM_RUN_LADDER):
            value = MINIMUM_RUN_LADDER[rung + 1]
            add(
                f"{name}: extensions.minimumRunSeconds {current} -> {value}",
                0.5 * lost[name],
                partial(_extension_at, position, "minimumRunSeconds", value),
            )
    stats = evaluation.shares[name]
    if (
        "starvationLimitSeconds" not in extensions
        and need[name] > 0
        and stats.wait_p95 > 4 * max(stats.wait_p50, 60.0)
    ):
        limit = int(max(3600, 60 * round(2 * stats.wait_p50 / 60)))
        add(
            f"{name}: extensions.starvationLimitSeconds {limit}",
            0.3 * need[name],
            partial(_extension_at, position, "starvationLimitSeconds", limit),
        )


def _sharing_at(
    position: int, strategy: str, borrow_limit: int | None, changed: list[dict[str, Any]]
) -> None:
    _with_sharing(changed[position], strategy, borrow_limit)


def _extension_at(position: int, key: str, value: Any, changed: list[dict[str, Any]]) -> None:
    _with_extension(changed[position], key, value)


def _borrow_text(value: int) -> str:
    return "unlimited" if value == -1 else f"{value}%"


# --- the search ---------------------------------------------------------------------------------------------


class Progress:
    """What the search reports as it goes (the CLI draws a rich progress bar from it)."""

    def start(self, total: int) -> None: ...

    def advance(self, description: str) -> None: ...

    def stop(self) -> None: ...


def advise(
    configuration: QueueConfiguration,
    events: tuple[ScenarioEvent, ...],
    options: AdviseOptions,
    *,
    source: str = "history",
    progress: Progress | None = None,
    started: float | None = None,
) -> Advice:
    """Search designs for ``configuration``'s queue by replaying ``events``; see the module's docstring."""
    if not events:
        raise AdviseError(f"{source}: the history holds no job: there is nothing to replay")
    progress = progress or Progress()
    # The time limit counts from ``started`` (``time.perf_counter()``; the CLI passes its own start).
    started = time.perf_counter() if started is None else started
    context = _Context(
        source,
        dict(configuration.queue_raw),
        events,
        Settings(stop_seconds=options.stop_seconds, start_seconds=options.start_seconds),
        options.checkpoint_interval,
    )
    current_shares = tuple(copy.deepcopy(dict(share)) for share in configuration.shares_raw)
    capacity = dict(configuration.queue.capacity)
    replayer = _Replayer(context, options.worker_count())
    trials: list[Trial] = []
    progress.start(max(1, options.max_replays))
    try:
        # The current design's replay runs to its end whatever the time limit: nothing is known without it.
        first = replayer.replay([current_shares], lambda: progress.advance("current design"))[0]
        assert first is not None
        baseline = first
        weights = share_weights(baseline, options.weights)
        current_score = objective(baseline, weights)
        trials.append(Trial(0, 0, "current design", current_shares, baseline, current_score, True, True))
        largest: dict[tuple[str, str], int] = {}
        for event in events:
            request = getattr(event.action, "request", None)
            if request is not None:
                key = (request.quota_share_name, request.capacity_unit)
                largest[key] = max(largest.get(key, 0), request.instance_count)
        floors = {
            str(share["quotaShareName"]): {
                unit: min(limit, baseline.shares[str(share["quotaShareName"])].usage_p95.get(unit, 0))
                for unit, limit in _limits(share).items()
            }
            for share in current_shares
        }
        rules = _Rules(
            context.queue_raw, capacity, current_shares, floors, largest, options.allow_reserve_changes
        )
        rng = random.Random(options.seed)
        best_shares, best, best_score = current_shares, baseline, current_score
        tried = {design_key(current_shares)}
        replays = 1
        batch_size = 2 * replayer.workers
        per_replay = max(baseline.wall_seconds, 1e-3)
        stopped = ""
        complete = True
        round_number = 0
        #: What each move (by its label) gained when it was last replayed: such moves are tried first again.
        gains: dict[str, float] = {}
        pending = _fresh(_moves(best_shares, best, weights, rules, rng, gains), tried, rules)
        while not stopped:
            if current_score <= 0:
                stopped = "the current design has no wait and loses no work: nothing can be better"
                break
            if not pending:
                stopped = "no move from the best design improves it (a local optimum)"
                break
            left = options.max_replays - replays
            if left <= 0:
                stopped = f"the search used its {options.max_replays} replays"
                complete = False
                break
            # As many replays as still fit in the time limit (in rounds of one replay per worker).
            rounds_fit = math.floor(
                (options.time_limit - (time.perf_counter() - started)) / (1.25 * per_replay)
            )
            batch = pending[: min(batch_size, left, max(0, rounds_fit) * replayer.workers)]
            if not batch:
                stopped = (
                    f"a further replay would pass the time limit of {options.time_limit:g} s; one replay "
                    f"takes about {per_replay:.1f} s here"
                )
                complete = False
                break
            rounds_needed = math.ceil(len(batch) / replayer.workers)
            round_number += 1
            pending = pending[len(batch) :]
            for move in batch:
                tried.add(design_key(move.shares))
            round_started = time.perf_counter()
            evaluations = replayer.replay(
                [move.shares for move in batch],
                partial(progress.advance, f"round {round_number}"),
                deadline=started + options.time_limit,
            )
            per_replay = max(per_replay, (time.perf_counter() - round_started) / rounds_needed)
            replays += len(batch)
            winner: tuple[int, float, Evaluation] | None = None
            if None in evaluations:
                cut = evaluations.count(None)
                stopped = (
                    f"the time limit of {options.time_limit:g} s cut the last round ({cut} of its "
                    f"{len(batch)} replays left unfinished)"
                )
                complete = False
            for move, evaluation in zip(batch, evaluations, strict=True):
                if evaluation is None:
                    continue
                score = objective(evaluation, weights)
                allowed = _within_guard(evaluation, baseline)
                trials.append(
                    Trial(len(trials), round_number, move.label, move.shares, evaluation, score, allowed)
                )
                if allowed and score < best_score:
                    gains[move.label] = best_score - score
                if allowed and (winner is None or _better((score, evaluation), (winner[1], winner[2]))):
                    winner = (len(trials) - 1, score, evaluation)
            if winner is not None and winner[1] < best_score * (1 - STEP_IMPROVEMENT):
                number, best_score, best = winner
                trials[number] = _taken(trials[number])
                best_shares = trials[number].shares
                gains.pop(trials[number].move, None)
                pending = _fresh(_moves(best_shares, best, weights, rules, rng, gains), tried, rules)
    finally:
        replayer.close()
        progress.stop()
    improvement = (current_score - best_score) / current_score if current_score > 0 else 0.0
    improved = best_shares != current_shares and improvement >= options.min_improvement
    if not improved:
        best_shares, best, best_score = current_shares, baseline, current_score
    return Advice(
        queue_name=configuration.queue.name,
        capacity=capacity,
        current_shares=current_shares,
        proposed_shares=best_shares,
        current=baseline,
        proposed=best,
        current_score=current_score,
        proposed_score=best_score,
        improved=improved,
        weights=weights,
        floors=floors,
        held_fixed=held_fixed_rules(options),
        not_searched=not_searched(),
        trials=trials,
        stopped_because=stopped,
        complete=complete,
        elapsed_seconds=time.perf_counter() - started,
        options=options,
        job_count=len(events),
    )


def _taken(trial: Trial) -> Trial:
    return Trial(
        trial.number,
        trial.round,
        trial.move,
        trial.shares,
        trial.evaluation,
        trial.score,
        trial.allowed,
        True,
    )


def _fresh(moves: list[_Move], tried: set[str], rules: _Rules) -> list[_Move]:
    """The moves not replayed yet that keep every rule held fixed and make a valid quota file."""
    fresh: list[_Move] = []
    seen: set[str] = set()
    for move in moves:
        key = design_key(move.shares)
        if key in tried or key in seen or not rules.allows(move.shares):
            continue
        try:
            QueueConfiguration.parse(rules.queue_raw, list(move.shares), "advisor")
        except QuotaConfigError:
            continue
        seen.add(key)
        fresh.append(move)
    return fresh


def held_fixed_rules(options: AdviseOptions) -> list[str]:
    rules = [
        "the job queue's capacity, its quota shares, their capacity units, state and in-share preemption",
        "no share's own limit below the units it held at its p95 (time-weighted) when the history is "
        "replayed under the current design (nor above the queue's capacity in total)",
        "a share's ceiling (own limit plus what it may borrow) never below the largest job it submitted",
        f"no share's p95 wait above {P95_GUARD_FACTOR:g}x (and {P95_GUARD_SLACK:g} s more than) the "
        "current design's",
    ]
    if options.allow_reserve_changes:
        rules.append("strategies may change, RESERVE included (--allow-reserve-changes)")
    else:
        rules.append(
            "RESERVE shares stay RESERVE and no share becomes RESERVE (--allow-reserve-changes allows it)"
        )
    return rules


def not_searched() -> list[str]:
    lines = ["inSharePreemption (priorities inside a share are the team's own)", "share state"]
    if not EXTENSIONS_AVAILABLE:
        lines.append(
            "our extensions (checkpoint-aware victims, minimum run time, no starvation): this engine has "
            "none of them"
        )
    return lines
