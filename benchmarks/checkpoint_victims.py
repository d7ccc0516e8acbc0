"""Checkpoint-aware victims (issue 37) on allocation_quality.py's trace: how much less work the extension's
victim order loses than the default order, why not more, and what any choice within the rules could do.

The trace, stops and checkpoints are allocation_quality.py's ``quota`` column (``--load 1.5``: 3,000 jobs
on 16 GPUs, stops of ``--stop-seconds``, a checkpoint every ``--checkpoint-interval`` seconds of progress,
phase from the job's first start: a resumed job is at a checkpoint when it starts again). Runs:

* ``default order``: the quota file as written. The simulator reports the running jobs' checkpoints to the
  engine here too (only the extension's order reads them), so each decision's lost work can be priced;
* ``checkpoint-aware``: every share's ``checkpointAwareVictims`` on (``engine.extensions``);
* ``least lost per unit``: a variant order, each rank's candidates by lost work per unit they free;
* ``best within the rules``: at each preemption, of the choices the engine's search makes under every order
  of each rank's candidates (a rank: other shares' jobs of one priority, or the preemptor's own share's of
  one priority; other shares first, lowest priority first kept), the one that loses least: the most any
  victim order can do per decision (myopic: it does not look at later decisions);
* ``best of the allowed set``: at each preemption, any set of the candidates its rule allows (priority and
  other-shares-first ignored) that lets the preemptor fit, the one that loses least: what dropping those
  rules would buy per decision. Not a rule the engine has, a bound.

A choice's cost is what the simulator will count for it: each victim's lost work at the decision (the
engine's ``lost_unit_seconds``, from its last checkpoint) plus its units x the stop (lost whoever is taken).
Per run the table also gives each decision's *static* bounds: the cost of the best choice within the rules
and of the allowed set at that same decision, summed over the run's decisions (the run's own trajectory,
no knock-on effects).

Usage::

    .venv/bin/python benchmarks/checkpoint_victims.py                      # the benchmark's trace, ~2 min
    .venv/bin/python benchmarks/checkpoint_victims.py --seeds 20260325,1,2,3,4  # more traces, ~10 min
    .venv/bin/python benchmarks/checkpoint_victims.py --load 0.05          # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import combinations, groupby, permutations, product
from math import factorial, prod
from operator import itemgetter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import allocation_quality as quality  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from airflow_quota.engine import planner  # noqa: E402
from airflow_quota.engine.extensions import VictimPolicy, lost_unit_seconds  # noqa: E402
from airflow_quota.engine.model import Job, Preemption  # noqa: E402
from airflow_quota.engine.usage import Usage  # noqa: E402
from airflow_quota.engine.victims import Candidates, Spare, VictimChoice, choose_victims  # noqa: E402
from airflow_quota.sim.jobs import JobRecord  # noqa: E402
from airflow_quota.sim.scenario import (  # noqa: E402
    QueueConfiguration,
    Scenario,
    ScenarioEvent,
    Settings,
    SubmitJob,
)
from airflow_quota.sim.trace import load_queue_configuration, load_trace  # noqa: E402

TITLE = "Checkpoint-aware victims on the allocation-quality trace (simulated)"
DEFAULT = "default order"
AWARE = "checkpoint-aware"
PER_UNIT = "least lost per unit"
WITHIN = "best within the rules"
ALLOWED = "best of the allowed set"
RUNS = (DEFAULT, AWARE, PER_UNIT, WITHIN, ALLOWED)
#: Most orders of one decision's ranks the within-the-rules search tries; past it, two sorted orders.
MAX_ORDERS = 5040
#: Most candidates whose subsets the allowed-set search tries (the first ones in victim order).
MAX_SUBSET = 14


# --- victim policies the runs hand the engine's search --------------------------------------------------


def _rank(job: Job) -> int:
    return job.request.scheduling_priority


@dataclass(frozen=True, slots=True)
class OrderedPolicy(VictimPolicy):
    """The engine's search, each rank's candidates in ``position``'s order (missing ones last, in victim
    order), only those in ``only`` allowed (all when None), and the lists it was handed kept in ``seen``."""

    position: Mapping[str, float] = field(default_factory=dict)
    only: frozenset[str] | None = None
    key: Callable[[Job], float] | None = None
    seen: list[list[Job]] = field(default_factory=list)

    def may_preempt(self, job: Job) -> bool:
        return self.only is None or job.job_id in self.only

    def order(self, preemptor_share: str, candidates: Iterable[Job]) -> Iterable[Job]:
        listed = list(candidates)
        self.seen.append(listed)
        key = self.key
        if key is not None:
            return sorted(listed, key=lambda job: (_rank(job), key(job)))
        if self.position:
            last = float(len(self.position))
            return sorted(listed, key=lambda job: (_rank(job), self.position.get(job.job_id, last)))
        return listed


def policy_at(now: float, **fields: object) -> OrderedPolicy:
    return OrderedPolicy(now, {}, frozenset(), {}, **fields)  # type: ignore[arg-type]


# --- one decision -------------------------------------------------------------------------------------------


@dataclass
class Decision:
    """A preemption decision of a run, as the search saw it."""

    at: float
    preemptor: str
    rule: str
    victims: tuple[str, ...]
    units: int
    #: Lost work per victim at the decision (the engine's estimate), unit-seconds.
    estimated: dict[str, float]
    #: The deciding rank (the last a victim came from) had more allowed candidates than it took.
    choice: bool
    #: The default order would have taken other victims at the same moment.
    differs: bool
    cost: float
    best_within: float
    best_allowed: float


@dataclass
class Stats:
    orders_capped: int = 0
    subsets_capped: int = 0


class Chooser:
    """Stands in for the planner's ``choose_victims``: the run's victim order, with every decision priced."""

    def __init__(self, label: str, stop_seconds: float, clock: Callable[[], float]) -> None:
        self.label = label
        self.stop_seconds = stop_seconds
        self.clock = clock
        self.pending: dict[str, Decision] = {}
        self.stats = Stats()

    def cost(self, victims: Iterable[Job], now: float) -> float:
        return sum(lost_unit_seconds(job, now) + job.count * self.stop_seconds for job in victims)

    def __call__(
        self,
        usage: Usage,
        preemptor: Job,
        candidates: Candidates,
        spare: Sequence[Spare],
        policy: VictimPolicy | None = None,
    ) -> VictimChoice | None:
        now = self.clock()
        recording = policy_at(now)
        default = _valid(choose_victims(usage, preemptor, candidates, spare, recording))
        if self.label == AWARE:
            chosen = choose_victims(usage, preemptor, candidates, spare, policy)
        elif self.label == PER_UNIT:
            chosen = choose_victims(
                usage,
                preemptor,
                candidates,
                spare,
                policy_at(now, key=lambda job: lost_unit_seconds(job, now) / job.count),
            )
        else:
            chosen = default
        if default is None:
            return chosen  # no allowed set lets it fit: the rules decide alone (a wait, or not_before)
        ranks = _ranks(preemptor, recording.seen, default)
        within, within_cost = self.best_within(usage, preemptor, candidates, spare, ranks, now)
        allowed, allowed_cost = self.best_allowed(usage, preemptor, candidates, spare, ranks, default, now)
        if self.label == WITHIN:
            chosen = within
        elif self.label == ALLOWED:
            chosen = allowed
        chosen = _valid(chosen)
        if chosen is None:
            return None
        victim_ids = {job.job_id for job in chosen.victims}
        deciding = max(
            (rank for rank, jobs in enumerate(ranks) for job in jobs if job.job_id in victim_ids), default=-1
        )
        taken = sum(1 for job in ranks[deciding] if job.job_id in victim_ids) if deciding >= 0 else 0
        self.pending[preemptor.job_id] = Decision(
            now,
            preemptor.job_id,
            str(chosen.rule),
            tuple(job.job_id for job in chosen.victims),
            sum(job.count for job in chosen.victims),
            {job.job_id: lost_unit_seconds(job, now) for job in chosen.victims},
            choice=deciding >= 0 and len(ranks[deciding]) > taken,
            differs=victim_ids != {job.job_id for job in default.victims},
            cost=self.cost(chosen.victims, now),
            best_within=within_cost,
            best_allowed=allowed_cost,
        )
        return chosen

    def best_within(
        self,
        usage: Usage,
        preemptor: Job,
        candidates: Candidates,
        spare: Sequence[Spare],
        ranks: Sequence[Sequence[Job]],
        now: float,
    ) -> tuple[VictimChoice, float]:
        """The least costly choice the search makes under an order of each rank's candidates."""
        best: tuple[VictimChoice, float] | None = None
        for position in self._orders(ranks, now):
            choice = _valid(
                choose_victims(usage, preemptor, candidates, spare, policy_at(now, position=position))
            )
            if choice is not None:
                cost = self.cost(choice.victims, now)
                if best is None or cost < best[1] - 1e-9:
                    best = (choice, cost)
        assert best is not None  # the victim order itself is one of the orders
        return best

    def _orders(self, ranks: Sequence[Sequence[Job]], now: float) -> Iterator[dict[str, float]]:
        if prod(factorial(len(rank)) for rank in ranks) > MAX_ORDERS:
            self.stats.orders_capped += 1
            for key in (
                lambda job: lost_unit_seconds(job, now),
                lambda job: lost_unit_seconds(job, now) / job.count,
            ):
                yield {job.job_id: key(job) for rank in ranks for job in rank}
            yield {}
            return
        for combo in product(*(permutations(rank) for rank in ranks)):
            yield {job.job_id: float(index) for rank in combo for index, job in enumerate(rank)}

    def best_allowed(
        self,
        usage: Usage,
        preemptor: Job,
        candidates: Candidates,
        spare: Sequence[Spare],
        ranks: Sequence[Sequence[Job]],
        default: VictimChoice,
        now: float,
    ) -> tuple[VictimChoice, float]:
        """The least costly set of the rule's candidates with which the search lets the preemptor fit by
        the same rule (subsets tried cheapest first)."""
        pool = [job for rank in ranks for job in rank]
        if len(pool) > MAX_SUBSET:
            self.stats.subsets_capped += 1
            pool = pool[:MAX_SUBSET]
        best = (default, self.cost(default.victims, now))
        subsets = sorted(
            (
                (self.cost(subset, now), subset)
                for size in range(1, len(pool) + 1)
                for subset in combinations(pool, size)
            ),
            key=itemgetter(0),
        )
        for subset_cost, subset in subsets:
            if subset_cost >= best[1] - 1e-9:
                break
            only = frozenset(job.job_id for job in subset)
            choice = _valid(choose_victims(usage, preemptor, candidates, spare, policy_at(now, only=only)))
            if choice is not None and choice.rule is default.rule:
                cost = self.cost(choice.victims, now)
                if cost < best[1] - 1e-9:
                    best = (choice, cost)
        return best


def _valid(choice: VictimChoice | None) -> VictimChoice | None:
    """A choice that preempts now (not one for later: ``not_before``)."""
    if choice is None or choice.not_before is not None or not choice.victims:
        return None
    return choice


def _ranks(preemptor: Job, seen: Sequence[Sequence[Job]], choice: VictimChoice) -> list[list[Job]]:
    """The ranks of the candidates ``choice``'s rule was handed, in victim order: other shares' jobs by
    priority (a reclaim), then the preemptor's own share's by priority."""
    own = [job for jobs in seen for job in jobs if job.share_name == preemptor.share_name]
    others = [job for jobs in seen for job in jobs if job.share_name != preemptor.share_name]
    own = list({job.job_id: job for job in own}.values())
    others = list({job.job_id: job for job in others}.values()) if choice.rule == "RECLAIM" else []
    return [list(jobs) for part in (others, own) for _, jobs in groupby(part, key=_rank)]


# --- runs ---------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    seed: int
    lost: float
    preemptions: int
    makespan: float
    decisions: list[Decision]
    #: Per victim: (estimated at the decision + units x stop, counted when its stop ended).
    priced: list[tuple[float, float]]
    #: Victims whose stop ended without a loss counted (finished while stopping).
    not_lost: int
    stats: Stats
    wall: float


class PricedSimulation(quality.BacklogSimulation):
    """The benchmark's simulation with checkpoints reported to the engine, each preemption decision kept
    with its prices, and what each victim lost when its stop ended."""

    def __init__(self, scenario: Scenario, *, checkpoint_interval: float, chooser: Chooser) -> None:
        super().__init__(scenario, checkpoint_interval=checkpoint_interval)
        # Only the extension's order reads the checkpoints: the default order runs as without them.
        self._checkpoints_seen = checkpoint_interval > 0
        self.chooser = chooser
        self.decisions: list[Decision] = []
        self.awaiting: dict[str, list[tuple[Decision, Job]]] = defaultdict(list)
        self.priced: list[tuple[float, float]] = []
        self.not_lost = 0

    def _preempting(self, preemption: Preemption) -> None:
        decision = self.chooser.pending.pop(preemption.preemptor_id)
        assert decision.victims == preemption.victim_ids, (decision, preemption)
        self.decisions.append(decision)
        for victim in preemption.victim_ids:
            self.awaiting[victim].append((decision, self.state.jobs[victim]))
        super()._preempting(preemption)

    def _work_done(self, record: JobRecord) -> None:
        super()._work_done(record)
        if self.awaiting.get(record.name):  # it finished while being stopped: it lost nothing
            self.awaiting[record.name].pop(0)
            self.not_lost += 1

    def _stop_done(self, record: JobRecord) -> None:
        before = record.lost_unit_seconds
        super()._stop_done(record)
        if self.awaiting.get(record.name):
            decision, job = self.awaiting[record.name].pop(0)
            if record.lost_unit_seconds == before:
                self.not_lost += 1
            else:
                estimate = decision.estimated[record.name] + job.count * self.chooser.stop_seconds
                self.priced.append((estimate, record.lost_unit_seconds - before))


@contextmanager
def choosing(chooser: Chooser) -> Iterator[None]:
    # The planner calls choose_victims by its module's name for it: the one place a run's choice goes in.
    original = vars(planner)["choose_victims"]
    setattr(planner, "choose_victims", chooser)  # noqa: B010
    try:
        yield
    finally:
        setattr(planner, "choose_victims", original)  # noqa: B010


def simulate(
    label: str,
    configuration: QueueConfiguration,
    events: Sequence[ScenarioEvent],
    seed: int,
    args: argparse.Namespace,
) -> Outcome:
    if label == AWARE:
        configuration = quality.with_extensions(configuration, {"checkpointAwareVictims": "ENABLED"})
    scenario = Scenario(
        f"trace ({label})", configuration, Settings(stop_seconds=args.stop_seconds), tuple(events)
    )
    holder: list[PricedSimulation] = []
    chooser = Chooser(label, args.stop_seconds, lambda: holder[0]._now)
    started = time.perf_counter()
    simulation = PricedSimulation(scenario, checkpoint_interval=args.checkpoint_interval, chooser=chooser)
    holder.append(simulation)
    with choosing(chooser):
        result = simulation.run()
    metrics = result.metrics
    unit = next(iter(result.queue.capacity))
    return Outcome(
        label,
        seed,
        metrics.lost_total(unit),
        metrics.preemptions_total,
        (metrics.span_end or 0.0) - (metrics.span_start or 0.0),
        simulation.decisions,
        simulation.priced,
        simulation.not_lost,
        chooser.stats,
        time.perf_counter() - started,
    )


def trace(load: float, seed: int) -> tuple[QueueConfiguration, tuple[ScenarioEvent, ...]]:
    with tempfile.TemporaryDirectory(prefix="quota-ckpt-") as folder:
        path = Path(folder) / "trace.csv"
        quality.write_scaled_trace(path, load, seed)
        configuration = load_queue_configuration(quality.QUOTA_FILE)
        events = tuple(load_trace(path, configuration))
    for event in events:
        assert isinstance(event.action, SubmitJob)
    return configuration, events


# --- the tables ---------------------------------------------------------------------------------------------


def _ratio(value: float, base: float) -> str:
    return f"x{value / base:.3f}" if base else "-"


def render_seed(outcomes: Sequence[Outcome], console: Console, args: argparse.Namespace) -> None:
    base = outcomes[0]
    table = Table(title=f"{TITLE}: load {args.load:g}, seed {base.seed}")
    table.add_column("metric")
    for outcome in outcomes:
        table.add_column(outcome.label, justify="right")

    def row(label: str, cells: Iterable[str]) -> None:
        table.add_row(label, *cells)

    row("GPU-seconds lost to preemption", (f"{o.lost:,.0f}" for o in outcomes))
    row("  x the default order's", (_ratio(o.lost, base.lost) for o in outcomes))
    row("preemptions (completed)", (str(o.preemptions) for o in outcomes))
    row("makespan (h)", (f"{o.makespan / 3600:,.1f}" for o in outcomes))
    row("  x the default order's", (f"x{o.makespan / base.makespan:.4f}" for o in outcomes))
    row("preemption decisions", (str(len(o.decisions)) for o in outcomes))
    row(
        "  with a choice in the deciding rank",
        (f"{sum(d.choice for d in o.decisions)}" for o in outcomes),
    )
    row(
        "  victims other than the default order's",
        (f"{sum(d.differs for d in o.decisions)}" for o in outcomes),
    )
    units = [sum(d.units for d in o.decisions) for o in outcomes]
    row("units preempted", (str(u) for u in units))
    floors = [u * args.stop_seconds for u in units]
    row("  x stop: lost whoever is taken", (f"{f:,.0f}" for f in floors))
    row(
        "lost past the stop, per unit (s)",
        (
            f"{(sum(d.cost for d in o.decisions) - f) / u:,.0f}" if u else "-"
            for o, u, f in zip(outcomes, units, floors, strict=True)
        ),
    )
    row("decisions' cost (estimate + stop)", (f"{sum(d.cost for d in o.decisions):,.0f}" for o in outcomes))
    row(
        "  if each took the best within the rules",
        (f"{sum(d.best_within for d in o.decisions):,.0f}" for o in outcomes),
    )
    row(
        "  if each took the best of the allowed set",
        (f"{sum(d.best_allowed for d in o.decisions):,.0f}" for o in outcomes),
    )
    row(
        "estimate + stop = counted (victims)",
        (
            f"{sum(abs(e - c) < 1e-6 for e, c in o.priced)} of {len(o.priced)} (+{o.not_lost} finished)"
            for o in outcomes
        ),
    )
    row("simulation wall time (s)", (f"{o.wall:.1f}" for o in outcomes))
    console.print(table)
    capped = [o.label for o in outcomes if o.stats.orders_capped or o.stats.subsets_capped]
    if capped:
        console.print(f"[yellow]searches capped (sorted orders, first {MAX_SUBSET} candidates): {capped}[/]")


def render_summary(by_seed: Sequence[Sequence[Outcome]], console: Console) -> None:
    table = Table(title="GPU-seconds lost / makespan, x the default order's, per seed")
    table.add_column("seed")
    for outcome in by_seed[0][1:]:
        table.add_column(outcome.label, justify="right")
    lost_ratios: dict[str, list[float]] = defaultdict(list)
    span_ratios: dict[str, list[float]] = defaultdict(list)
    for outcomes in by_seed:
        base = outcomes[0]
        cells = []
        for outcome in outcomes[1:]:
            lost_ratios[outcome.label].append(outcome.lost / base.lost if base.lost else 1.0)
            span_ratios[outcome.label].append(outcome.makespan / base.makespan)
            cells.append(f"x{lost_ratios[outcome.label][-1]:.3f} / x{span_ratios[outcome.label][-1]:.4f}")
        table.add_row(str(base.seed), *cells)
    table.add_row(
        "mean",
        *(f"x{_mean(lost_ratios[o.label]):.3f} / x{_mean(span_ratios[o.label]):.4f}" for o in by_seed[0][1:]),
    )
    console.print(table)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def render_goal(outcomes: Sequence[Outcome], console: Console, stop_seconds: float) -> None:
    base = outcomes[0]
    by_label = {o.label: o for o in outcomes}
    aware = by_label[AWARE]
    lost = aware.lost / base.lost if base.lost else 1.0
    span = aware.makespan / base.makespan
    met = lost <= quality.LOST_GOAL and span <= quality.MAKESPAN_GOAL
    console.print(
        f"checkpoint-aware against the default order: GPU-seconds lost {aware.lost:,.0f} vs {base.lost:,.0f} "
        f"(x{lost:.3f}), preemptions {aware.preemptions} vs {base.preemptions}, makespan x{span:.4f}; goal "
        f"(lost at most x{quality.LOST_GOAL}, makespan at most x{quality.MAKESPAN_GOAL}): "
        f"{'met' if met else 'missed'}"
    )
    floor = sum(d.units for d in base.decisions) * stop_seconds
    cost = sum(d.cost for d in base.decisions)
    within = sum(d.best_within for d in base.decisions)
    allowed = sum(d.best_allowed for d in base.decisions)
    if cost:
        console.print(
            f"bounds on the default order's own decisions (priced at each decision: lost work + units x "
            f"stop, {cost:,.0f}): the best victims within the rules at each x{within / cost:.3f}, the best "
            f"of each allowed set (priority and other-shares-first ignored) x{allowed / cost:.3f}, their "
            f"stops alone (units x stop) x{floor / cost:.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--load", type=float, default=1.5, help="allocation_quality.py's --load")
    parser.add_argument(
        "--seeds", default=None, help="trace seeds, comma-separated (default: make_trace.py's)"
    )
    parser.add_argument("--stop-seconds", type=float, default=60.0)
    parser.add_argument("--checkpoint-interval", type=float, default=900.0)
    parser.add_argument("--runs", default=",".join(RUNS), help=f"which runs, of {', '.join(RUNS)}")
    args = parser.parse_args(argv)
    generator = quality.load_trace_generator()
    seeds = [generator.SEED] if args.seeds is None else [int(seed) for seed in args.seeds.split(",")]
    labels = [label for label in RUNS if label in args.runs.split(",")]
    if labels[:1] != [DEFAULT]:
        parser.error(f"--runs must include {DEFAULT!r} (the figures are against it)")
    console = Console(width=180)
    by_seed = []
    for seed in seeds:
        configuration, events = trace(args.load, seed)
        outcomes = []
        for label in labels:
            console.print(f"[dim]seed {seed}: simulating {label}...[/dim]")
            outcomes.append(simulate(label, configuration, events, seed, args))
        render_seed(outcomes, console, args)
        if AWARE in labels:
            render_goal(outcomes, console, args.stop_seconds)
        by_seed.append(outcomes)
    if len(by_seed) > 1:
        render_summary(by_seed, console)
    console.print(
        f"settings: stop {args.stop_seconds:g} s, checkpoint every {args.checkpoint_interval:g} s of "
        f"progress, load x{args.load:g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
