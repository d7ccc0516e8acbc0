"""``airflow quota simulate``: pass the arguments to the simulator's command line and exit with its code."""

from __future__ import annotations

import argparse
import sys


def simulate(args: argparse.Namespace) -> None:
    from airflow_quota.sim.__main__ import main

    sys.exit(main(simulator_argv(args)))


def simulator_argv(args: argparse.Namespace) -> list[str]:
    """The simulator's argv for what was given to ``airflow quota simulate``."""
    argv: list[str] = []
    if args.scenario:
        argv.append(args.scenario)
    if args.trace:
        argv += ["--trace", args.trace]
    if args.config:
        argv += ["--config", args.config]
    for option in ("queue", "checkpoint_interval", "stop_seconds", "start_seconds", "report"):
        value = getattr(args, option, None)
        if value is not None:
            argv += ["--" + option.replace("_", "-"), value]
    if args.compare_static:
        argv.append("--compare-static")
    if getattr(args, "jobs", False):
        argv.append("--jobs")
    if args.json:
        argv.append("--json")
    return argv
