"""Declare the ``airflow quota`` command group for Airflow's CLI (listed under "cli" in get_provider_info).

Airflow 3.3 imports ``get_quota_cli_commands`` through the provider's ``cli`` entry and adds the groups it
returns to ``airflow``. The command functions load lazily, so ``airflow --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command


def _arg(*flags: str, **options: Any) -> Arg:
    """Airflow's ``Arg`` (argparse's ``add_argument`` arguments), which carries no type annotations."""
    return Arg(flags, **options)  # type: ignore[no-untyped-call]


ARG_QUOTA_FILE = _arg("file", metavar="FILE", help="The quota file: YAML, or JSON when it ends in .json")
ARG_JSON = _arg("--json", action="store_true", help="Print the result as JSON")
ARG_SCENARIO = _arg("scenario", metavar="FILE", nargs="?", help="A scenario file to simulate (YAML)")
ARG_TRACE = _arg("--trace", metavar="CSV", help="Replay this job trace (CSV) instead of a scenario")
ARG_CONFIG = _arg("--config", metavar="YAML", help="The quota file to replay the trace against")
ARG_COMPARE_STATIC = _arg(
    "--compare-static",
    action="store_true",
    help="Also replay the trace with static partitions (no lending or borrowing) and compare",
)
ARG_QUEUE = _arg("--queue", metavar="NAME", help="The quota file's job queue to replay (default: the first)")
ARG_CHECKPOINT_INTERVAL = _arg(
    "--checkpoint-interval",
    metavar="SECONDS",
    help="A job checkpoints every SECONDS of progress; a preempted job resumes from its last checkpoint",
)
ARG_STOP_SECONDS = _arg("--stop-seconds", metavar="SECONDS", help="How long a stop takes in the trace replay")
ARG_START_SECONDS = _arg("--start-seconds", metavar="SECONDS", help="How long a granted job is STARTING")

QUOTA_COMMANDS = [
    ActionCommand(
        name="validate",
        help="Check a quota file and summarize its job queues and quota shares",
        description=(
            "Check a quota file (AWS Batch field names) and print each job queue's quota shares. "
            "Exits 1 and lists every error when the file is invalid; AWS Batch limits the file "
            "exceeds are warnings only."
        ),
        func=lazy_load_command("airflow_quota.cli.validate.validate"),
        args=(ARG_QUOTA_FILE, ARG_JSON),
    ),
    ActionCommand(
        name="simulate",
        help="Simulate a scenario, or replay a job trace against a quota file",
        description=(
            "Run the quota simulator: 'simulate FILE' runs a scenario file; "
            "'simulate --trace CSV --config YAML [--compare-static]' replays a job trace."
        ),
        func=lazy_load_command("airflow_quota.cli.simulate.simulate"),
        args=(
            ARG_SCENARIO,
            ARG_TRACE,
            ARG_CONFIG,
            ARG_QUEUE,
            ARG_COMPARE_STATIC,
            ARG_CHECKPOINT_INTERVAL,
            ARG_STOP_SECONDS,
            ARG_START_SECONDS,
            ARG_JSON,
        ),
    ),
]


def get_quota_cli_commands() -> list[GroupCommand]:
    return [
        GroupCommand(
            name="quota",
            help="GPU quota management: check quota files, simulate scenarios",
            subcommands=QUOTA_COMMANDS,
        )
    ]
