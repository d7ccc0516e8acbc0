"""``airflow quota apply -f FILE --to-aws [--dry-run] [--aws-conn-id ID] [--region R] [--allow-lower]
[--allow-repoint]``.

The quota file (or AWS Batch documents) is validated and exported as ``export --format aws`` prints it (each
request body checked by botocore); what AWS Batch would refuse (more shares or capacity limits than it
allows, a unit that is not an ``ml.*`` instance type, ``maxCapacity`` 0) stops it before any call. The
connection is checked (an unknown ``--aws-conn-id`` is an error naming it; with none given, ``aws_default``,
else the environment's credentials, said in a note), what AWS Batch has of the design is read, and the diff
is printed first: each service environment, scheduling policy, job queue and quota share added (its
fields), changed (each field old -> new) or unchanged, then the quota shares AWS has in the file's job
queues that the file leaves out (kept: apply never deletes). A change that lowers something or re-points a
job queue is refused unless ``--allow-lower`` / ``--allow-repoint`` names it. ``--dry-run`` then prints
every AWS call it would make, in order; otherwise the calls are made, each Create*/Update* waited on until
AWS shows the resource VALID. Exit 1 when the file is invalid or AWS would refuse it, the connection is
unknown, AWS cannot be read, a change needs a field no Update* takes or a flag not given (nothing is sent in
these cases), or a call fails (what was done before it is listed, with how to finish or undo it). The quota
ledger is not touched.
"""

from __future__ import annotations

from collections.abc import Collection

from rich.console import Console
from rich.markup import escape

from airflow_quota.aws_batch.apply_plan import ApplyPlan, Guard, ResourceChange, plan_apply, plan_calls
from airflow_quota.aws_batch.apply_to_aws import (
    ApplyToAwsError,
    UnknownConnectionError,
    aws_connection,
    batch_client,
    read_state,
    send_plan,
    undo_commands,
)
from airflow_quota.aws_batch.export import defaulted_fields, export_design, export_issues
from airflow_quota.aws_batch.portability import portability_warnings
from airflow_quota.cli.aws_queues import logs_to_stderr
from airflow_quota.cli.common import console, plural
from airflow_quota.cli.validate import print_errors
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import ConfigIssue, QuotaConfigError

NOTHING_SENT = "Nothing was sent to AWS Batch."


def run_apply_to_aws(
    paths: list[str],
    *,
    dry_run: bool = False,
    aws_conn_id: str | None = None,
    region: str | None = None,
    allowed: Collection[Guard] = (),
) -> int:
    out = console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        design = load_quota_design(paths)
    except QuotaConfigError as error:
        print_errors(out, error)
        out.print(NOTHING_SENT)
        return 1
    config = design.config
    refusals = design.aws_refusals()
    for warning in portability_warnings(config):
        moved = ConfigIssue(design.aws_path(warning.path), warning.message)
        if moved not in refusals:
            err.print(f"[yellow]warning:[/] {escape(str(moved))}")
    if refusals:
        for refusal in refusals:
            err.print(f"[red]error:[/] {escape(str(refusal))}")
        err.print(f"AWS Batch would refuse this design: nothing was sent. {_fix_file()}")
        return 1
    bundle = export_design(config)
    problems = export_issues(bundle)
    if problems:  # a bug of ours: never send what botocore refuses
        print_errors(err, QuotaConfigError("the export", problems))
        return 1
    try:
        with logs_to_stderr():  # the connection's lookup may log: keep stdout the diff
            conn_id, note = aws_connection(aws_conn_id)
    except UnknownConnectionError as error:
        err.print(f"[red]error:[/] {escape(str(error))}. {NOTHING_SENT}")
        return 1
    if note is not None:
        err.print(f"note: {escape(note)}")
    try:
        with logs_to_stderr():  # the provider logs its connection on stdout: keep stdout the diff
            client = batch_client(conn_id, region)
            plan = plan_apply(bundle, read_state(client, bundle), defaulted_fields(config))
    except Exception as error:  # whatever the connection or AWS said: shown, nothing sent
        where = f"the Airflow connection {conn_id}" if conn_id else "this environment's AWS credentials"
        err.print(
            f"[red]error:[/] AWS Batch could not be read ({type(error).__name__}: {escape(str(error))}); "
            f"check {escape(where)}. {NOTHING_SENT}"
        )
        return 1
    print_aws_diff(out, plan)
    blocked = [*plan.refusals, *plan.blocked(allowed)]
    if blocked:
        for message in blocked:
            err.print(f"[red]error:[/] {escape(message)}")
        err.print(NOTHING_SENT)
        return 1
    pending = plan.pending()
    if not pending:
        out.print("Nothing to apply: AWS Batch already matches the file.")
        return 0
    if dry_run:
        print_calls(out, plan)
        out.print(f"[yellow]Dry run:[/] {_summary(pending)}; nothing was sent to AWS Batch.", soft_wrap=True)
        return 0
    try:
        with logs_to_stderr():
            done = send_plan(client, pending)
    except ApplyToAwsError as error:
        print_failure(err, error)
        return 1
    out.print(f"[green]Applied to AWS Batch:[/] {escape('; '.join(done))}.", soft_wrap=True)
    return 0


def print_aws_diff(out: Console, plan: ApplyPlan) -> None:
    for change in plan.changes:
        verb = _verb(change)
        colour = {"added": "green", "changed": "yellow", "unchanged": "dim"}[verb]
        out.print(f"[{colour}]{verb}[/]: {escape(change.title)}", soft_wrap=True)
        for field in change.fields:
            if change.action == "create":
                line = f"{field.path}: {field.new}"
            else:
                before, after = ("-" if value is None else value for value in (field.old, field.new))
                line = f"{field.path}: {before} -> {after}"
            out.print(f"    {escape(line)}", soft_wrap=True)
    for left_out in plan.left_out:
        out.print(
            f"[cyan]in AWS, not in the file (kept)[/]: {escape(left_out.title)}; apply never deletes",
            soft_wrap=True,
        )


def print_calls(out: Console, plan: ApplyPlan) -> None:
    """Every AWS call the apply would make, in order (the waits included)."""
    known = {(change.kind, change.name): change.arn for change in plan.changes if change.arn is not None}
    out.print("AWS calls, in order:")
    for number, call in enumerate(plan_calls(plan.pending()), 1):
        out.print(f"  {number}. {escape(call.text(known))}", soft_wrap=True)


def print_failure(err: Console, error: ApplyToAwsError) -> None:
    """The failed call, what was done before it, and how to finish or undo the apply."""
    err.print(f"[red]error:[/] {escape(str(error))}")
    if not error.done:
        err.print(NOTHING_SENT)
        return
    err.print("Done in AWS Batch before the error (kept): " + escape("; ".join(error.done)) + ".")
    err.print(
        "To finish, fix what AWS Batch refused and run the same apply again: it updates what exists and "
        "creates the rest."
    )
    if error.updated:
        err.print(
            "To undo an update, change the file back and apply again (with --allow-lower where that lowers "
            "something)."
        )
    commands = undo_commands(error.created)
    if commands:
        err.print(
            "To undo what this apply created, in this order (each delete once the resource reads DISABLED):"
        )
        for command in commands:
            err.print(f"  {escape(command)}", soft_wrap=True)


def _fix_file() -> str:
    return "Fix the file (airflow quota validate lists the same as warnings) and apply again."


def _verb(change: ResourceChange) -> str:
    if change.action == "create":
        return "added"
    return "changed" if change.fields else "unchanged"


def _summary(pending: list[ResourceChange]) -> str:
    created = sum(change.action == "create" for change in pending)
    return f"{plural(created, 'resource')} to create, {plural(len(pending) - created, 'resource')} to change"
