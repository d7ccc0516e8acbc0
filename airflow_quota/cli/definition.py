"""Declare the ``airflow quota`` command group for Airflow's CLI (listed under "cli" in get_provider_info).

Airflow 3.3 imports ``get_quota_cli_commands`` through the provider's ``cli`` entry and adds the groups it
returns to ``airflow``. The command functions load lazily, so ``airflow --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

from airflow_quota.allocator import DEFAULT_ALLOCATION_INTERVAL


def _arg(*flags: str, **options: Any) -> Arg:
    """Airflow's ``Arg`` (argparse's ``add_argument`` arguments), which carries no type annotations."""
    return Arg(flags, **options)  # type: ignore[no-untyped-call]


ARG_DESIGN_FILES = _arg(
    "files",
    metavar="FILE",
    nargs="+",
    help="A quota file, or AWS Batch documents (request bodies, Describe/List answers) in one or more files",
)
ARG_AWS_FILES = _arg(
    "files",
    metavar="FILE",
    nargs="+",
    help="AWS Batch documents: Create* request bodies and Describe*/ListQuotaShares answers, any mix",
)
ARG_IMPORT_OUTPUT = _arg("-o", "--output", metavar="FILE", help="Write the quota file here (default: stdout)")
ARG_EXPORT_FORMAT = _arg(
    "--format",
    choices=("aws",),
    default="aws",
    help="aws: one JSON object of CreateServiceEnvironment, CreateSchedulingPolicy, CreateJobQueue and "
    "CreateQuotaShare request bodies",
)
ARG_REGION = _arg("--region", metavar="REGION", help="The AWS region in the scheduling policy's ARN")
ARG_ACCOUNT_ID = _arg("--account-id", metavar="ID", help="The AWS account in the scheduling policy's ARN")
ARG_JSON = _arg("--json", action="store_true", help="Print the result as JSON")
ARG_WIDE = _arg(
    "--wide",
    action="store_true",
    help="Show every value whole (job ids in full, nothing wrapped), however wide the lines",
)
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
ARG_REPORT = _arg(
    "--report",
    metavar="FILE.html",
    help="Also write one self-contained HTML page: GPU timeline, capacity held per share over time, waits "
    "per share, drawn like the GPU Quotas page",
)

# The ledger's commands (they read and write the quota tables of the Airflow metadata DB).
ARG_APPLY_FILE = _arg(
    "-f",
    "--file",
    metavar="FILE",
    required=True,
    action="append",
    help="The quota file to apply, or AWS Batch documents (repeat -f for each file)",
)
ARG_DRY_RUN = _arg("--dry-run", action="store_true", help="Show the changes and write nothing")
ARG_TO_AWS = _arg(
    "--to-aws",
    action="store_true",
    help="Create or update the design's AWS Batch resources (service environment, scheduling policy, job "
    "queue, quota shares) instead of the quota ledger; never deletes",
)
ARG_AWS_CONN_ID = _arg(
    "--aws-conn-id",
    metavar="CONN_ID",
    default=None,
    help="With --to-aws: the Airflow AWS connection to use; an unknown one is an error (default: "
    "aws_default, or the environment's AWS credentials when aws_default is not defined either)",
)
ARG_ALLOW_LOWER = _arg(
    "--allow-lower",
    action="store_true",
    help="With --to-aws: also send changes that lower something (a capacity, a borrow limit, a sharing "
    "strategy, a job queue's priority, a state to DISABLED)",
)
ARG_ALLOW_REPOINT = _arg(
    "--allow-repoint",
    action="store_true",
    help="With --to-aws: also send changes that point a job queue at another scheduling policy or service "
    "environment",
)
ARG_AWS_REGION = _arg(
    "--region",
    dest="aws_region",
    metavar="REGION",
    help="With --to-aws: the AWS region (default: the connection's)",
)
ARG_OUTPUT = _arg(
    "-o", "--output", choices=("table", "json"), default="table", help="Print tables (default) or JSON"
)
ARG_LEDGER_QUEUE = _arg("--queue", metavar="NAME", help="Only this job queue")
ARG_SHARE = _arg("--share", metavar="NAME", help="Only this quota share")
ARG_STATUS = _arg("--status", metavar="STATUS", help="Only jobs with this status (RUNNABLE, RUNNING, ...)")
ARG_SHARE_NAME = _arg("name", metavar="NAME", help="The quota share")
ARG_JOB_NAME = _arg("name", metavar="NAME", help="The job id (or its job name, when no other job has it)")
ARG_PRIORITY = _arg("priority", metavar="PRIORITY", help="The new schedulingPriority (0-9999)")
ARG_REASON = _arg("--reason", metavar="TEXT", required=True, help="Why: becomes the job's statusReason")
ARG_SINCE = _arg("--since", metavar="ISO-TIME", help="Only events at or after this time (UTC when no zone)")
ARG_LIMIT = _arg("--limit", metavar="N", help="At most the newest N events (default 50, at most 1000)")
ARG_JOBS_LIMIT = _arg("--limit", metavar="N", help="At most the newest N jobs (default 100, at most 1000)")
ARG_HISTORY_SINCE = _arg(
    "--since",
    metavar="ISO-TIME",
    required=True,
    help="Jobs first submitted at or after this time (UTC when no zone)",
)
ARG_HISTORY_UNTIL = _arg("--until", metavar="ISO-TIME", help="... and before this time (default: now)")
ARG_TRACE_OUTPUT = _arg("-o", "--output", metavar="FILE", help="Write the trace (CSV) here (default: stdout)")
ARG_ONCE = _arg("--once", action="store_true", help="Run one allocation cycle, print what it did, and exit")
ARG_INTERVAL = _arg(
    "--interval",
    metavar="SECONDS",
    help="Seconds between cycle starts "
    f"(default: [quota] allocation_interval, {DEFAULT_ALLOCATION_INTERVAL:g})",
)

ALLOCATOR_NOTE = (
    "The change is written to the quota ledger and audited; the allocator's next cycle applies its "
    "effect to the task (a terminated running job is told to stop, and fails once it has stopped)."
)

SHARES_COMMANDS = [
    ActionCommand(
        name="list",
        help="List the applied quota shares with their limits and current usage",
        description=(
            "Each applied quota share: strategy, borrow limit, in-share preemption, state; then per "
            "capacity unit its limit, ceiling and usage now (own, borrowed, lent and idle units, RUNNING "
            "and RUNNABLE jobs)."
        ),
        func=lazy_load_command("airflow_quota.cli.shares.shares_list"),
        args=(ARG_LEDGER_QUEUE, ARG_OUTPUT, ARG_WIDE),
    ),
    ActionCommand(
        name="describe",
        help="Show one quota share: its configuration and current usage",
        func=lazy_load_command("airflow_quota.cli.shares.shares_describe"),
        args=(ARG_SHARE_NAME, ARG_LEDGER_QUEUE, ARG_OUTPUT, ARG_WIDE),
    ),
]

JOBS_COMMANDS = [
    ActionCommand(
        name="list",
        help="List jobs with their status, priority, capacity and position in their share",
        func=lazy_load_command("airflow_quota.cli.jobs.jobs_list"),
        args=(ARG_LEDGER_QUEUE, ARG_SHARE, ARG_STATUS, ARG_JOBS_LIMIT, ARG_OUTPUT, ARG_WIDE),
    ),
    ActionCommand(
        name="describe",
        help=(
            "Show one job: status, statusReason, position, preempted attempts (a service job of a job queue "
            "AWS Batch schedules is read from AWS Batch)"
        ),
        func=lazy_load_command("airflow_quota.cli.jobs.jobs_describe"),
        args=(ARG_JOB_NAME, ARG_OUTPUT, ARG_WIDE),
    ),
    ActionCommand(
        name="update-priority",
        help="Change a job's schedulingPriority (0 to 9999)",
        description=(
            "Change a job's schedulingPriority (0 to 9999, higher first). " + ALLOCATOR_NOTE + " A job "
            "of a job queue AWS Batch schedules (NAME its service job id, ARN or job name) is changed in AWS "
            "Batch (UpdateServiceJob, through the Airflow connection aws_default)."
        ),
        func=lazy_load_command("airflow_quota.cli.jobs.jobs_update_priority"),
        args=(ARG_JOB_NAME, ARG_PRIORITY),
    ),
    ActionCommand(
        name="terminate",
        help="Terminate a job: a waiting one fails now, a granted one once its task has stopped",
        description=(
            "Terminate a job: a waiting job is FAILED at once; a granted one is stopped first and FAILED "
            "once stopped. " + ALLOCATOR_NOTE
        ),
        func=lazy_load_command("airflow_quota.cli.jobs.jobs_terminate"),
        args=(ARG_JOB_NAME, ARG_REASON),
    ),
]

LEDGER_COMMANDS: list[ActionCommand | GroupCommand] = [
    ActionCommand(
        name="apply",
        help="Apply a quota file to the quota ledger (shows the diff first)",
        description=(
            "Validate a quota file, print its differences from what is applied (added, removed, and "
            "changed fields old -> new) and apply it in one transaction, audited. Exits 1 and writes "
            "nothing when the file is invalid or cannot be applied (a quota share with unfinished jobs "
            "left out). Lowering limits below current usage is allowed. With --to-aws, create or update "
            "the design's AWS Batch resources through an Airflow AWS connection instead (the diff first; "
            "resources the file leaves out are reported, never deleted; a change that lowers something or "
            "re-points a job queue needs --allow-lower or --allow-repoint; --dry-run prints every AWS call)."
        ),
        func=lazy_load_command("airflow_quota.cli.apply.apply"),
        args=(
            ARG_APPLY_FILE,
            ARG_DRY_RUN,
            ARG_TO_AWS,
            ARG_AWS_CONN_ID,
            ARG_AWS_REGION,
            ARG_ALLOW_LOWER,
            ARG_ALLOW_REPOINT,
        ),
    ),
    GroupCommand(name="shares", help="Applied quota shares and their usage", subcommands=SHARES_COMMANDS),
    GroupCommand(name="jobs", help="Jobs in the quota ledger", subcommands=JOBS_COMMANDS),
    ActionCommand(
        name="snapshot",
        help="Usage per share and the front of each share (like AWS GetJobQueueSnapshot)",
        func=lazy_load_command("airflow_quota.cli.snapshot.snapshot"),
        args=(ARG_LEDGER_QUEUE, ARG_OUTPUT, ARG_WIDE),
    ),
    ActionCommand(
        name="events",
        help="The quota audit log, newest last",
        func=lazy_load_command("airflow_quota.cli.events.events"),
        args=(ARG_LEDGER_QUEUE, ARG_SINCE, ARG_LIMIT, ARG_OUTPUT, ARG_WIDE),
    ),
    ActionCommand(
        name="history",
        help="Export the ledger's jobs as a simulator trace, to replay under another quota design",
        description=(
            "Write the jobs of one job queue first submitted from --since (to --until) as the CSV that "
            "'airflow quota simulate --trace' reads: submitTime (seconds from the first job's submission), "
            "jobName, quotaShareName, schedulingPriority as submitted, capacityUnit, instanceCount and "
            "duration (seconds it held capacity over all its attempts; empty while it has not ended). Then "
            "'airflow quota simulate --trace FILE --config NEW.yaml --compare-static --report out.html' "
            "shows that history under another design."
        ),
        func=lazy_load_command("airflow_quota.cli.history.history"),
        args=(ARG_HISTORY_SINCE, ARG_HISTORY_UNTIL, ARG_LEDGER_QUEUE, ARG_TRACE_OUTPUT),
    ),
    ActionCommand(
        name="allocator",
        help="Run the quota allocator as its own process (or one cycle with --once)",
        description=(
            "Run allocation cycles until SIGTERM: grant waiting tasks, signal preemption victims, "
            "release finished jobs. An alternative to hosting the allocator in the scheduler with "
            "[core] executor = LocalExecutor,airflow_quota.allocator.executor.QuotaAllocatorExecutor; "
            "both may run, one cycle runs at a time on PostgreSQL."
        ),
        func=lazy_load_command("airflow_quota.cli.allocator.allocator"),
        args=(ARG_ONCE, ARG_INTERVAL, ARG_OUTPUT),
    ),
]

QUOTA_COMMANDS: list[ActionCommand | GroupCommand] = [
    ActionCommand(
        name="validate",
        help="Check a quota file and summarize its job queues and quota shares",
        description=(
            "Check a quota file (AWS Batch field names), or AWS Batch documents, and print each job "
            "queue's quota shares. Exits 1 and lists every error when the design is invalid; what AWS "
            "Batch treats differently is a warning only. Airflow writes airflow.cfg and logs/ under "
            "AIRFLOW_HOME (~/airflow when unset) as it starts; 'python -m airflow_quota.cli.validate FILE' "
            "runs the same check without Airflow and writes no file."
        ),
        func=lazy_load_command("airflow_quota.cli.validate.validate"),
        args=(ARG_DESIGN_FILES, ARG_JSON, ARG_WIDE),
    ),
    ActionCommand(
        name="import",
        help="Turn AWS Batch documents (request bodies, Describe/List answers) into a quota file",
        description=(
            "Read any mix of CreateServiceEnvironment, CreateSchedulingPolicy, CreateJobQueue and "
            "CreateQuotaShare request bodies and DescribeServiceEnvironments, DescribeJobQueues, "
            "DescribeSchedulingPolicies, ListQuotaShares and DescribeQuotaShare answers, each checked by "
            "botocore, and write the quota file. What the quota file cannot express is listed by field."
        ),
        func=lazy_load_command("airflow_quota.cli.aws_design.import_command"),
        args=(ARG_AWS_FILES, ARG_IMPORT_OUTPUT),
    ),
    ActionCommand(
        name="export",
        help="Print a quota file as AWS Batch request bodies (checked by botocore)",
        description=(
            "Print one JSON object {serviceEnvironments, schedulingPolicies, jobQueues, quotaShares} whose "
            "items are request bodies for CreateServiceEnvironment, CreateSchedulingPolicy, CreateJobQueue "
            "and CreateQuotaShare (aws batch create-... --cli-input-json), each checked by botocore."
        ),
        func=lazy_load_command("airflow_quota.cli.aws_design.export_command"),
        args=(ARG_DESIGN_FILES, ARG_EXPORT_FORMAT, ARG_REGION, ARG_ACCOUNT_ID),
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
            _arg("--jobs", action="store_true", help="Also show one row per job (--json: a list per run)"),
            ARG_REPORT,
            ARG_JSON,
        ),
    ),
]


ADVISE_COMMAND = ActionCommand(
    name="advise",
    help="Propose a better quota design by replaying real history in the simulator",
    description=(
        "Replay a history of one job queue's jobs (--history, what 'airflow quota history' writes; without "
        "it, the ledger's jobs from --since) under the current quota file, search designs next to it (own "
        "limits moved between shares within the queue's capacity, strategies, borrow limits) and propose the "
        "best: -o the proposed quota file (validated; only when better), --report an HTML page comparing "
        "both designs per share. Objective: job-weighted (mean + p95) / 2 wait per share plus GPU-seconds "
        "lost per job; held fixed: the queue's capacity, no own limit below the share's p95 usage, RESERVE "
        "shares (docs/advisor.md). Says plainly when it found nothing better."
    ),
    func=lazy_load_command("airflow_quota.cli.advise.advise"),
    args=(
        _arg(
            "--history", metavar="FILE.csv", help="The jobs to replay (what 'airflow quota history' writes)"
        ),
        _arg("--since", metavar="ISO-TIME", help="Without --history: the ledger's jobs first submitted from"),
        ARG_HISTORY_UNTIL,
        _arg("--config", metavar="QUOTAS.yaml", required=True, help="The current quota file"),
        ARG_QUEUE,
        _arg(
            "-o", "--output", metavar="PROPOSED.yaml", help="Write the proposed quota file (only when better)"
        ),
        _arg(
            "--report", metavar="REPORT.html", help="Write the HTML report comparing both designs per share"
        ),
        ARG_JSON,
        _arg("--stop-seconds", metavar="S", help="How long a stop takes (default 60; the ledger's median)"),
        ARG_START_SECONDS,
        _arg("--checkpoint-interval", metavar="S", help="Jobs checkpoint every S s of work (default 900)"),
        _arg(
            "--max-replays", metavar="N", help="Replays at most, the current design's included (default 24)"
        ),
        _arg(
            "--time-limit",
            metavar="S",
            help="Start no replay that would end after S s of the command (default 50)",
        ),
        _arg("--workers", metavar="N", help="Processes replaying designs (default: one per core, at most 2)"),
        _arg("--seed", metavar="N", help="Breaks ties between moves (default 0): same seed, same search"),
        _arg(
            "--min-improvement", metavar="PERCENT", help="Propose only a design this much better (default 2)"
        ),
        _arg("--weight", metavar="SHARE=W", action="append", help="A share's weight in the objective"),
        _arg(
            "--allow-reserve-changes",
            action="store_true",
            help="Let the search change a RESERVE share's strategy (or make one)",
        ),
    ),
)
QUOTA_COMMANDS.append(ADVISE_COMMAND)


def get_quota_cli_commands() -> list[GroupCommand]:
    return [
        GroupCommand(
            name="quota",
            help="GPU quota management: quota files, the quota ledger, simulation",
            subcommands=[*QUOTA_COMMANDS, *LEDGER_COMMANDS],
        )
    ]
