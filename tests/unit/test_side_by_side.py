"""What ``tests/side_by_side.py`` reads from a whole-suite run's output, and how it sets runs against the
first commit's: the figures issue 38's comparisons are made of."""

from __future__ import annotations

import pytest

from tests.side_by_side import SuiteRun, against_the_first, minutes, read_run

QUOTA = (
    "cpu_quota: 1.1 cores; exit status 0; 608 s; 650.1 CPU-s in the group (97% of its quota);"
    " held back 452.0 s in all\n"
)
#: Case name -> (the run's output, what is read from it).
LOGS = {
    "a passing run gives pytest's time, its summary and the cgroup's CPU": (
        "test: pytest\n...\n"
        "=========== 1569 passed, 2 skipped, 10 warnings in 577.96s (0:09:37) ===========\n" + QUOTA,
        (577.96, "1569 passed, 2 skipped, 10 warnings", 650.1, 97),
    ),
    "a run with a failure gives the same figures and says so": (
        "====== 1 failed, 1568 passed, 2 skipped, 10 warnings in 350.35s (0:05:50) ======\n" + QUOTA,
        (350.35, "1 failed, 1568 passed, 2 skipped, 10 warnings", 650.1, 97),
    ),
    "a run where every test failed still gives its time": (
        "================= 3 failed in 12.50s =================\n" + QUOTA,
        (12.5, "3 failed", 650.1, 97),
    ),
    "a run that stopped before pytest (mypy failed) has no time, and says where to look": (
        "test: mypy\nFound 1 error in 1 file\n" + QUOTA,
        (None, "no pytest summary (see the log)", 650.1, 97),
    ),
}


@pytest.mark.parametrize(("log", "expected"), LOGS.values(), ids=LOGS.keys())
def test_the_figures_read_from_a_run(log: str, expected: tuple[object, ...]) -> None:
    run = read_run("abc1234", log)
    assert (run.pytest_seconds, run.summary, run.cpu_seconds, run.quota_share) == expected


def test_each_run_is_set_against_the_median_of_the_first_commits_runs() -> None:
    def run(commit: str, seconds: float | None) -> SuiteRun:
        return SuiteRun(commit, seconds, "", None, None)

    runs = [run("issue", 765.0), run("head", 578.0), run("issue", 795.0), run("head", None)]
    assert against_the_first(runs) == [765 / 780, 578 / 780, 795 / 780, None]


def test_times_read_as_minutes_and_seconds() -> None:
    assert [minutes(577.96), minutes(60.0), minutes(None)] == ["9 min 38 s", "1 min 00 s", "-"]
