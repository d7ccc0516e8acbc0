"""``airflow quota apply -f FILE --to-aws [--dry-run] [--aws-conn-id aws_default] [--region R]``.

The quota file (or AWS Batch documents) is validated and exported as ``export --format aws`` prints it (each
request body checked by botocore), what AWS Batch has of it is read through the Airflow AWS connection, and
the diff is printed first: each service environment, scheduling policy, job queue and quota share added
(its fields), changed (each field old -> new) or unchanged, then the quota shares AWS has in the file's job
queues that the file leaves out (kept: apply never deletes). Unless ``--dry-run``, the changes are sent in
dependency order (Create* or Update*). Exit 1 when the file is invalid, AWS cannot be read, a change needs a
field no Update* takes (nothing is sent), or AWS refuses a request (what was done before it is listed).
The quota ledger is not touched.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from airflow_quota.aws_batch.apply_plan import ApplyPlan, ResourceChange, plan_apply
from airflow_quota.aws_batch.apply_to_aws import ApplyToAwsError, batch_client, read_state, send_plan
from airflow_quota.aws_batch.export import export_design, export_issues
from airflow_quota.aws_batch.portability import portability_warnings
from airflow_quota.cli.aws_queues import logs_to_stderr
from airflow_quota.cli.common import console, plural
from airflow_quota.cli.validate import print_errors
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import QuotaConfigError

NOTHING_SENT = "Nothing was sent to AWS Batch."


def run_apply_to_aws(
    paths: list[str], *, dry_run: bool = False, aws_conn_id: str = "aws_default", region: str | None = None
) -> int:
    out = console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        config = load_quota_design(paths).config
    except QuotaConfigError as error:
        print_errors(out, error)
        out.print(NOTHING_SENT)
        return 1
    for warning in portability_warnings(config):
        err.print(f"[yellow]warning:[/] {escape(str(warning))}")
    bundle = export_design(config)
    problems = export_issues(bundle)
    if problems:  # a bug of ours: never send what botocore refuses
        print_errors(err, QuotaConfigError("the export", problems))
        return 1
    try:
        with logs_to_stderr():  # the provider logs its connection on stdout: keep stdout the diff
            client = batch_client(aws_conn_id, region)
            plan = plan_apply(bundle, read_state(client, bundle))
    except Exception as error:  # whatever the connection or AWS said: shown, nothing sent
        err.print(
            f"[red]error:[/] AWS Batch could not be read ({type(error).__name__}: {escape(str(error))}); "
            f"check the Airflow connection {escape(aws_conn_id)}. {NOTHING_SENT}"
        )
        return 1
    print_aws_diff(out, plan)
    if plan.refusals:
        for refusal in plan.refusals:
            err.print(f"[red]error:[/] {escape(refusal)}")
        err.print(NOTHING_SENT)
        return 1
    pending = plan.pending()
    if not pending:
        out.print("Nothing to apply: AWS Batch already matches the file.")
        return 0
    if dry_run:
        out.print(f"[yellow]Dry run:[/] {_summary(pending)}; {NOTHING_SENT.lower()}", soft_wrap=True)
        return 0
    try:
        with logs_to_stderr():
            done = send_plan(client, pending)
    except ApplyToAwsError as error:
        err.print(f"[red]error:[/] {escape(str(error))}")
        if error.done:
            err.print("Done in AWS Batch before the error (kept): " + escape("; ".join(error.done)) + ".")
        else:
            err.print(NOTHING_SENT)
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


def _verb(change: ResourceChange) -> str:
    if change.action == "create":
        return "added"
    return "changed" if change.fields else "unchanged"


def _summary(pending: list[ResourceChange]) -> str:
    created = sum(change.action == "create" for change in pending)
    return f"{plural(created, 'resource')} to create, {plural(len(pending) - created, 'resource')} to change"
