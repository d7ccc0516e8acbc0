"""How a job is named to people, the same way everywhere: the CLI's tables, the REST API's ``displayName``
and ``runLabel``, and the job ids inside audit messages and status reasons as the CLI shows them.

A job is one try of one task instance; its id is ``dag_id/run_id/task_id/map_index/try_number``. People
see it as ``dag / task``: ``demo_nlp_sweep / trial_b``, with ``[3]`` after a mapped task's name and
``#2`` after a second try's (a first try's is left out). Where jobs of two runs of one DAG are shown
together, each of that DAG's jobs also names its run: ``demo_nlp_sweep / trial_b (run demo-20260101-1200)``
(``display_names`` decides this for a set of jobs; ``run_label`` shortens Airflow's own run ids, and
where two runs' short labels would be the same, the whole run ids are shown).

Nothing here imports Airflow or a database: the engine's and the ledger's job ids are plain text.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: A job id inside a text: ``dag/run/task/map_index/try``. DAG and task ids are letters, digits, ``_``,
#: ``-`` and ``.`` (a long one ends ``~`` and hex digits, ``ids.bounded_id``); a run id has no blank or ``/``.
_JOB_ID = re.compile(
    r"(?<![\w.~/-])([\w.~-]+)/([^\s/]+)/([\w.~-]+)/(-?\d+)/(\d+)(?![\w/])",
)
#: Airflow's own run ids: ``manual__2026-12-01T03:00:00.123456+00:00`` (also scheduled, backfill,
#: asset_triggered): the kind and the time to the second are enough to tell runs apart.
_AIRFLOW_RUN_ID = re.compile(
    r"^(?P<kind>[a-z_]+?)__(?P<date>\d{4}-\d\d-\d\d)T(?P<time>\d\d:\d\d:\d\d)(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?$"
)


@dataclass(frozen=True, slots=True)
class JobKey:
    """The task instance try a job id names."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int

    @property
    def job_id(self) -> str:
        return f"{self.dag_id}/{self.run_id}/{self.task_id}/{self.map_index}/{self.try_number}"


def parse_job_id(job_id: str) -> JobKey | None:
    """The parts of a task instance's job id; None for any other id (a service job's, a test's ``j1``)."""
    match = _JOB_ID.fullmatch(job_id)
    if match is None:
        return None
    dag_id, run_id, task_id, map_index, try_number = match.groups()
    return JobKey(dag_id, run_id, task_id, int(map_index), int(try_number))


def run_label(run_id: str) -> str:
    """A run as a job's name shows it: Airflow's own run ids shortened to their kind and time to the second
    (``manual 2026-12-01 03:00:00``), any other run id (the demo's ``demo-20260101-120000``) whole."""
    match = _AIRFLOW_RUN_ID.match(run_id)
    if match is None:
        return run_id
    return f"{match['kind']} {match['date']} {match['time']}"


def display_name(
    dag_id: str, task_id: str, map_index: int = -1, try_number: int = 1, *, run: str | None = None
) -> str:
    """``dag / task[map index] #try (run RUN)``: the map index only for a mapped task, the try only after
    the first, the run only when given (``run_label``'s, or a whole run id)."""
    name = f"{dag_id} / {task_id}{'' if map_index < 0 else f'[{map_index}]'}"
    if try_number > 1:
        name += f" #{try_number}"
    return name if run is None else f"{name} (run {run})"


def job_display_name(job_id: str, *, run: str | None = None) -> str:
    """``display_name`` of a job id; an id that names no task instance try is shown whole."""
    key = parse_job_id(job_id)
    if key is None:
        return job_id
    return display_name(key.dag_id, key.task_id, key.map_index, key.try_number, run=run)


def display_names(job_ids: Iterable[str]) -> dict[str, str]:
    """Each job's name among these jobs: ``job_display_name``, with its run where the jobs of one DAG are
    of several runs (the short ``run_label``, or the whole run ids where two runs' labels are the same)."""
    keys = {job_id: parse_job_id(job_id) for job_id in dict.fromkeys(job_ids)}
    runs: dict[str, set[str]] = defaultdict(set)
    for key in keys.values():
        if key is not None:
            runs[key.dag_id].add(key.run_id)
    labels: dict[tuple[str, str], str] = {}
    for dag_id, run_ids in runs.items():
        if len(run_ids) < 2:
            continue
        short = {run_id: run_label(run_id) for run_id in run_ids}
        whole = len(set(short.values())) < len(short)
        for run_id in run_ids:
            labels[dag_id, run_id] = run_id if whole else short[run_id]
    return {
        job_id: job_id if key is None else job_display_name(job_id, run=labels.get((key.dag_id, key.run_id)))
        for job_id, key in keys.items()
    }


def job_ids_in(text: str) -> list[str]:
    """The task instance job ids a message or status reason names, in order."""
    return [match.group(0) for match in _JOB_ID.finditer(text)]


def name_jobs_in(
    text: str, names: Mapping[str, str], *, subject: str | None = None, share: str | None = None
) -> str:
    """``text`` with each job id it names replaced by the job's name (``names``, else
    ``job_display_name``). With ``subject``, the job a table's row already shows: a text that begins with
    that job's id (and then its ``share`` in parentheses) drops them, and a lowercase first word is
    capitalized (``"<id> (research) preempted by <id2> ..."`` -> ``"Preempted by nlp_dag / trial_b ..."``)."""
    if subject is not None and text.startswith(subject + " "):
        rest = text[len(subject) + 1 :]
        if share is not None and rest.startswith(f"({share}) "):
            rest = rest[len(share) + 3 :]
        first = rest.split(" ", 1)[0]
        text = rest[:1].upper() + rest[1:] if first.isalpha() and first.islower() else rest
    return _JOB_ID.sub(lambda match: names.get(match.group(0)) or job_display_name(match.group(0)), text)


def name_fields(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> dict[str, str]:
    """A job's ``displayName`` (``display_name``: without its run) and ``runLabel`` (``run_label``), as the
    REST API's Job and the CLI's job JSON give them: show ``displayName``, and ``"(run <runLabel>)"``
    after it where jobs of two runs of its DAG are shown together (``display_names``' rule)."""
    return {
        "displayName": display_name(dag_id, task_id, map_index, try_number),
        "runLabel": run_label(run_id),
    }
