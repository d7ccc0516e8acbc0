"""``airflow quota ...`` in the test's own process, through Airflow's own CLI parser and command functions.

This is how Airflow's own CLI tests run commands: ``airflow.cli.cli_parser.get_parser()`` (which adds our
provider's ``quota`` group, as the ``airflow`` command does), then the parsed command's function. Output and
exit code are what a user sees from the ``airflow`` process, without the seconds each process spends
importing Airflow: the ledger commands' tests run dozens of commands. ``metadata_session`` (Airflow's
``create_session``) is pointed at the test's database for the call. The tests that run the real ``airflow``
process say so (``test_the_airflow_process_runs_a_ledger_command``, the validate command's tests).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
from functools import cache
from typing import Any

import sqlalchemy as sa
from airflow import settings
from airflow.cli import cli_parser
from sqlalchemy.orm import scoped_session, sessionmaker


@cache
def _parser() -> Any:
    return cli_parser.get_parser()


def run_quota(command: list[str], engine: sa.Engine | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``airflow quota COMMAND`` here, on ``engine``'s database; its stdout, stderr and exit code."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    sessions = getattr(settings, "Session", None)
    ours = None if engine is None else scoped_session(sessionmaker(bind=engine, expire_on_commit=False))
    if ours is not None:
        settings.Session = ours
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                args = _parser().parse_args(["quota", *command])
                args.func(args)
            except SystemExit as exit:
                code = exit.code
    finally:
        if ours is not None:
            ours.remove()
            settings.Session = sessions
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(code, str):
        stderr.write(code + "\n")
    return subprocess.CompletedProcess(command, returncode, stdout.getvalue(), stderr.getvalue())
