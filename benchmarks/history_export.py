"""``airflow quota history`` on a large ledger: wall time and peak memory of the real command.

The benchmark makes its own schema (``quota_history_bench``) in a PostgreSQL database (default
``postgresql://postgres@127.0.0.1:5432/test``), creates the ledger's job and audit tables there and fills
them in SQL (``generate_series``, the same rows every time): ``--jobs`` jobs of one job queue, one second
apart over 5 shares, and ``--audit-rows`` audit rows (5 a job on average at the defaults):

- every job: SUBMITTED, GRANTED, SUCCEEDED (held 600 s);
- every second job, besides: PREEMPTED, REQUEUED (a 2 s stop) and GRANTED again;
- every other job, besides: one PRIORITY_CHANGED;
- PROMISED rows (which the export reads past) on odd jobs for any rows still missing (none at the
  default sizes: 6 + 4 rows a pair of jobs).

Then it runs ``airflow quota history --since 2000-01-01 -o FILE`` as a user does (a new ``airflow``
process, a throwaway AIRFLOW_HOME, the metadata DB pointed at the schema) once per ``--checkout``, and
prints its wall time, its peak resident memory (the child's ``ru_maxrss``), the trace's size and SHA-256
(the same figure from two checkouts means the same output). ``--checkout DIR`` runs another checkout's
code, e.g. the code before a change: ``git worktree add /tmp/wt-before <rev>``; several are measured in
the order given, on the same rows. The schema is dropped at the end unless ``--keep``; ``--reuse`` skips
filling it again when it already holds the asked rows.

Usage::

    .venv/bin/python benchmarks/history_export.py                      # 200,000 jobs, 1,000,000 rows
    .venv/bin/python benchmarks/history_export.py --checkout /tmp/wt-before --checkout .
    .venv/bin/python benchmarks/history_export.py --jobs 2000 --audit-rows 10000   # smoke run

**Goal (issue 36)**: 200,000 jobs and 1,000,000 audit rows in at most 30 s and 300 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

SCHEMA = "quota_history_bench"
DEFAULT_DATABASE = "postgresql://postgres@127.0.0.1:5432/test"
GOAL_SECONDS = 30.0
GOAL_MB = 300.0
#: A realistic message length: the audit log's messages name jobs by their whole id.
_JOB_ID = "'bench_dag/scheduled__2026-01-01T00:00:00+00:00/train_' || j || '/-1/1'"
_MESSAGE = f"{_JOB_ID} || ' granted 2 gpu (0 borrowed)'"


def schema_url(database: str) -> sa.URL:
    url = sa.make_url(database).set(drivername="postgresql+psycopg2")
    return url.update_query_dict({"options": f"-csearch_path={SCHEMA}"})


def fill(database: str, jobs: int, audit_rows: int, *, reuse: bool) -> None:
    """The schema with ``jobs`` jobs and ``audit_rows`` audit rows (made again unless ``reuse`` finds
    them)."""
    from airflow_quota.ledger.models import AuditRow, JobRow

    engine = sa.create_engine(schema_url(database))
    with engine.begin() as connection:
        if reuse and connection.scalar(
            sa.text("SELECT count(*) FROM information_schema.tables WHERE table_schema = :s"), {"s": SCHEMA}
        ):
            have = connection.scalar(sa.text("SELECT count(*) FROM quota_job"))
            have_rows = connection.scalar(sa.text("SELECT count(*) FROM quota_audit_log"))
            if (have, have_rows) == (jobs, audit_rows):
                print(f"Reusing schema {SCHEMA}: {jobs:,} jobs, {audit_rows:,} audit rows.")
                return
        connection.execute(sa.text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        connection.execute(sa.text(f"CREATE SCHEMA {SCHEMA}"))
    tables = [JobRow.__table__, AuditRow.__table__]
    JobRow.metadata.create_all(engine, tables=tables)  # type: ignore[arg-type]
    extra = max(audit_rows - 6 * (jobs - jobs // 2) - 4 * (jobs // 2), 0)
    started = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                f"""
                INSERT INTO quota_job (job_id, job_queue_name, quota_share_name, job_name, capacity_unit,
                    instance_count, scheduling_priority, preemption_retries_before_termination, status,
                    status_reason, submitted_at, submit_seq, started_at, start_seq, stop_cause,
                    preempted_by, preemption_rule, awaiting_victims, preempted_attempt_count,
                    recent_preempted_attempts, attempt, held_capacity_unit, held_instance_count,
                    borrowed_instance_count, borrowed_from, held_devices, stop_signalled_at,
                    task_ended_seen_at, training_job, dag_id, run_id, task_id, map_index, try_number,
                    ti_id, created_at, updated_at)
                SELECT {_JOB_ID}, 'gpu-training',
                    'team-' || (j % 5), 'train-' || j, 'ml.p4d.24xlarge', 1 + j % 4, j % 10, NULL,
                    'SUCCEEDED',
                    'Its task succeeded', t, j, t, j, NULL, NULL, NULL, '[]', j % 2,
                    '[]', 1 + (1 - j % 2), NULL, 0, 0, NULL, NULL, NULL, NULL, NULL,
                    'bench_dag', 'scheduled__2026-01-01T00:00:00+00:00', 'train_' || j, -1, 1, NULL, t, t
                FROM (SELECT j, TIMESTAMPTZ '2026-01-01 00:00:00+00' + j * INTERVAL '1 second' AS t
                      FROM generate_series(0, :jobs - 1) AS j) AS s
                """
            ),
            {"jobs": jobs},
        )
        # (offset seconds, kind, which jobs: 'all', 'even', 'odd')
        steps = [
            (0, "SUBMITTED", "all"),
            (1, "GRANTED", "all"),
            (100, "PREEMPTED", "even"),
            (102, "REQUEUED", "even"),
            (110, "GRANTED", "even"),
            (50, "PRIORITY_CHANGED", "odd"),
            (700, "SUCCEEDED", "all"),
        ]
        for offset, kind, which in steps:
            where = {"all": "TRUE", "even": "j % 2 = 0", "odd": "j % 2 = 1"}[which]
            details = '\'{"old": 1, "new": 9}\'' if kind == "PRIORITY_CHANGED" else "NULL"
            connection.execute(
                sa.text(
                    f"""
                    INSERT INTO quota_audit_log (at, job_queue_name, kind, quota_share_name, job_id,
                        related_job_id, rule, message, details)
                    SELECT TIMESTAMPTZ '2026-01-01 00:00:00+00' + (j + {offset}) * INTERVAL '1 second',
                        'gpu-training', '{kind}', 'team-' || (j % 5),
                        {_JOB_ID}, NULL, NULL,
                        {_MESSAGE}, {details}::json
                    FROM generate_series(0, :jobs - 1) AS j WHERE {where}
                    """
                ),
                {"jobs": jobs},
            )
        if extra:
            connection.execute(
                sa.text(
                    f"""
                    INSERT INTO quota_audit_log (at, job_queue_name, kind, quota_share_name, job_id,
                        related_job_id, rule, message, details)
                    SELECT TIMESTAMPTZ '2026-01-01 00:00:00+00' + (j + 60) * INTERVAL '1 second',
                        'gpu-training', 'PROMISED', 'team-' || (j % 5),
                        {_JOB_ID}, NULL, NULL,
                        {_MESSAGE}, NULL
                    FROM (SELECT (2 * k + 1) % :jobs AS j FROM generate_series(0, :extra - 1) AS k) AS s
                    """
                ),
                {"jobs": jobs, "extra": extra},
            )
        connection.execute(sa.text("ANALYZE quota_job"))
        connection.execute(sa.text("ANALYZE quota_audit_log"))
        rows = connection.scalar(sa.text("SELECT count(*) FROM quota_audit_log"))
    took = time.perf_counter() - started
    print(f"Filled schema {SCHEMA}: {jobs:,} jobs, {rows:,} audit rows in {took:.1f} s.")


def commit_of(checkout: Path) -> str:
    result = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h %cs"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no", "airflow_quota"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return result.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")


def run_history(
    database: str, checkout: Path, output: Path, since: str = "2000-01-01"
) -> tuple[float, float, int]:
    """Wall seconds, peak resident MB of the ``airflow quota history`` process, and its exit code."""
    home = Path(tempfile.mkdtemp(prefix="quota-history-bench-home-"))
    try:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__")}
        env |= {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": schema_url(database).render_as_string(hide_password=False),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PYTHONPATH": str(checkout.resolve()),
        }
        command = [
            str(Path(sys.executable).with_name("airflow")),
            *("quota", "history", "--since", since, "-o", str(output)),
        ]
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, cwd=home, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        stderr = process.stderr.read() if process.stderr else ""
        code = os.waitstatus_to_exitcode(status)
        if code:
            print(stderr, file=sys.stderr)
        return elapsed, usage.ru_maxrss / 1024, code
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=os.environ.get("QUOTA_HISTORY_BENCH_DB", DEFAULT_DATABASE))
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--audit-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--checkout", action="append", type=Path, help="a checkout whose code runs (repeatable)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the schema (with --reuse next time)")
    parser.add_argument("--reuse", action="store_true", help="reuse the schema when it holds these rows")
    args = parser.parse_args(argv)
    checkouts = args.checkout or [ROOT]
    load = os.getloadavg()
    print(f"Load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} CPUs)")
    fill(args.database, args.jobs, args.audit_rows, reuse=args.reuse)
    results = []
    try:
        with tempfile.TemporaryDirectory() as folder:  # what the command costs before it reads a row
            seconds, megabytes, code = run_history(
                args.database, checkouts[-1], Path(folder) / "empty.csv", "2100-01-01"
            )
        startup = (seconds, megabytes)
        for checkout in checkouts:
            with tempfile.TemporaryDirectory() as folder:
                output = Path(folder) / "jobs.csv"
                load_before = os.getloadavg()[0]
                seconds, megabytes, code = run_history(args.database, checkout, output)
                data = output.read_bytes() if output.exists() else b""
                digest = hashlib.sha256(data).hexdigest()[:12]
                lines = data.count(b"\n")
            commit = commit_of(checkout)
            results.append((checkout, commit, seconds, megabytes, code, lines, digest, load_before))
    finally:
        if not args.keep:
            engine = sa.create_engine(schema_url(args.database))
            with engine.begin() as connection:
                connection.execute(sa.text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
    print(f"\nairflow quota history --since 2000-01-01: {args.jobs:,} jobs, {args.audit_rows:,} audit rows")
    print(f"{'code':<48} {'wall s':>8} {'peak MB':>8} {'exit':>4} {'lines':>8} {'sha256':>12} {'load':>5}")
    for checkout, commit, seconds, megabytes, code, lines, digest, load_before in results:
        name = f"{commit} ({checkout})" if checkout != ROOT else commit
        figures = f"{seconds:8.1f} {megabytes:8.0f} {code:4d} {lines:8,d} {digest:>12} {load_before:5.1f}"
        print(f"{name[:48]:<48} {figures}")
    print(
        f"Start-up alone (--since 2100-01-01, no row; the last code): {startup[0]:.1f} s, {startup[1]:.0f} MB"
    )
    print(f"Goal: at most {GOAL_SECONDS:.0f} s and {GOAL_MB:.0f} MB at 200,000 jobs / 1,000,000 audit rows.")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(this script's own peak: {own:.0f} MB; the figures above are the airflow process's alone)")
    return 0 if all(result[4] == 0 for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
