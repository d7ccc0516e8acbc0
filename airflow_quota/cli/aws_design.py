"""``airflow quota import FILE... [-o quotas.yaml]`` and ``airflow quota export FILE... --format aws``.

``import`` reads AWS Batch documents (request bodies and Describe/List answers, any mix) and writes our quota
file (stdout by default); what the file cannot express is listed on stderr, each at its field's path. Exit 1
with every refusal listed, nothing written, when the documents do not make a design.

``export`` reads a quota file (or AWS documents) and prints one JSON object whose lists hold
CreateServiceEnvironment, CreateSchedulingPolicy, CreateJobQueue and CreateQuotaShare request bodies, each
checked by botocore's validator before it is printed; on stderr it warns as ``validate`` does (what AWS
Batch refuses or reads otherwise, and for AWS documents what the import did not keep).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from airflow_quota.aws_batch.export import export_design, export_issues, extensions_not_kept
from airflow_quota.cli.validate import print_errors
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import QuotaConfigError


def import_command(args: argparse.Namespace) -> None:
    sys.exit(run_import(args.files, args.output))


def export_command(args: argparse.Namespace) -> None:
    sys.exit(run_export(args.files, region=args.region, account_id=args.account_id))


def run_import(paths: list[str], output: str | None = None) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        design = load_quota_design(paths)
    except QuotaConfigError as error:
        print_errors(err, error)
        err.print("Nothing was written.")
        return 1
    for note in design.notes:
        err.print(f"[yellow]not kept:[/] {escape(str(note))}")
    text = yaml.safe_dump(design.document, sort_keys=False, default_flow_style=None, width=110)
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(output).write_text(text)
    except OSError as error:
        err.print(f"[red]error:[/] cannot write {escape(output)}: {escape(error.strerror or str(error))}")
        return 1
    queues = design.config.job_queues
    shares = sum(len(queue.quota_shares) for queue in queues)
    err.print(f"Wrote {escape(output)}: {len(queues)} job queue(s), {shares} quota share(s).")
    return 0


def run_export(paths: list[str], *, region: str | None = None, account_id: str | None = None) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        design = load_quota_design(paths)
    except QuotaConfigError as error:
        print_errors(err, error)
        return 1
    for warning in design.warnings():  # what validate warns about: AWS Batch may refuse the bodies below
        err.print(f"[yellow]warning:[/] {escape(str(warning))}")
    bundle = export_design(design.config, region=region or "REGION", account_id=account_id or "ACCOUNT_ID")
    problems = export_issues(bundle)
    if problems:  # a bug of ours: never print what AWS would refuse
        print_errors(err, QuotaConfigError("the export", problems))
        return 1
    sys.stdout.write(json.dumps(bundle, indent=2) + "\n")
    for note in extensions_not_kept(design.config):
        err.print(f"[yellow]not kept:[/] {escape(str(note))}")
    if region is None or account_id is None:
        err.print(
            "note: schedulingPolicyArn says REGION and ACCOUNT_ID: pass --region and --account-id to "
            "write the real ARN"
        )
    return 0
