"""``airflow quota apply -f FILE [--dry-run]``: make the ledger's job queues and shares those of a quota file.

``-f`` may also name AWS Batch documents (repeated for several files), imported as ``validate`` does. The
design is validated first (the errors ``validate`` prints; exit 1, nothing written). Then the diff against
what is applied is printed per job queue and share (added, removed, or each changed field old -> new) and
the whole file is applied in one transaction (``apply_quota_config``: a new revision per job queue that
changes, one audit row per change). ``--dry-run`` prints the same diff and rolls the transaction back. A
refusal (a share with unfinished jobs left out of the file) exits 1 and changes nothing. Limits lowered
below current usage are allowed: the usage above them drains or is reclaimed.

With ``--to-aws`` the same file goes to AWS Batch instead of the ledger (``apply_to_aws``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from airflow_quota.cli.common import console, fail, metadata_session, plural
from airflow_quota.cli.validate import print_errors
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.ledger.configuration import ConfigChange, apply_quota_config
from airflow_quota.ledger.errors import ConfigApplyError


def apply(args: argparse.Namespace) -> None:
    if args.to_aws:  # AWS Batch, not the ledger: cli/apply_to_aws.py
        from airflow_quota.aws_batch.apply_plan import Guard
        from airflow_quota.cli.apply_to_aws import run_apply_to_aws

        allowed: list[Guard] = []
        if args.allow_lower:
            allowed.append("lower")
        if args.allow_repoint:
            allowed.append("repoint")
        sys.exit(
            run_apply_to_aws(
                args.file,
                dry_run=args.dry_run,
                aws_conn_id=args.aws_conn_id,
                region=args.aws_region,
                allowed=allowed,
            )
        )
    sys.exit(run_apply(args.file, dry_run=args.dry_run))


def run_apply(paths: str | list[str], *, dry_run: bool = False) -> int:
    out = console()
    paths = [paths] if isinstance(paths, str) else paths
    path = ", ".join(paths)
    try:
        config = load_quota_design(paths).config
    except QuotaConfigError as error:
        print_errors(out, error)
        out.print("Nothing was applied.")
        return 1
    try:
        with metadata_session() as session:
            changes = apply_quota_config(session, config, applied_by=_os_user(), source=path)
            if dry_run:
                session.rollback()
    except ConfigApplyError as error:
        fail(str(error))
    print_diff(out, changes)
    if not changes:
        out.print(f"Nothing to apply: the quota ledger already matches {escape(path)}.", soft_wrap=True)
    elif dry_run:
        out.print(f"[yellow]Dry run:[/] {plural(len(changes), 'change')}, nothing written.")
    else:
        revisions = ", ".join(
            f"{queue} revision {revision}"
            for queue, revision in dict.fromkeys((c.job_queue_name, c.revision) for c in changes)
        )
        out.print(f"[green]Applied[/] {plural(len(changes), 'change')}: {escape(revisions)}.", soft_wrap=True)
    return 0


def print_diff(out: Console, changes: list[ConfigChange]) -> None:
    for change in changes:
        verb = "added" if change.old is None else "removed" if change.new is None else "changed"
        colour = {"added": "green", "removed": "red", "changed": "yellow"}[verb]
        what = (
            f"job queue {change.job_queue_name}"
            if change.quota_share_name is None
            else f"quota share {change.quota_share_name} (job queue {change.job_queue_name})"
        )
        out.print(f"[{colour}]{verb}[/]: {escape(what)}", soft_wrap=True)
        old, new = flatten(change.old), flatten(change.new)
        for field in dict.fromkeys([*old, *new]):
            before, after = old.get(field), new.get(field)
            if before == after:
                continue
            if change.old is None:
                line = f"{field}: {after}"
            elif change.new is None:
                line = f"{field}: {before}"
            else:
                line = f"{field}: {'-' if before is None else before} -> {'-' if after is None else after}"
            out.print(f"    {escape(line)}", soft_wrap=True)


def flatten(document: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """Dotted field paths to values; capacity limits are keyed by their unit (``capacityLimits.gpu``)."""
    fields: dict[str, Any] = {}
    for key, value in (document or {}).items():
        path = f"{prefix}{key}"
        if key in ("jobQueueName", "quotaShareName"):
            continue
        if isinstance(value, dict):
            fields |= flatten(value, f"{path}.")
        elif isinstance(value, list) and _is_capacity_limits(value):
            fields |= {f"{path}.{item['capacityUnit']}": item.get("maxCapacity") for item in value}
        else:
            fields[path] = value
    return fields


def _is_capacity_limits(value: list[Any]) -> bool:
    return all(isinstance(item, dict) and "capacityUnit" in item for item in value)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
