"""The quota advisor (``airflow-quota-advise``, ``sim/advisor.py``): proposals that validate and move capacity
the right way, nothing proposed where nothing is better, one-line errors that write nothing."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_quota.cli.advise import main
from airflow_quota.config_file import load_quota_file
from airflow_quota.sim.advisor import AdviseOptions, _Context, _Replayer, advise
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import load_queue_configuration, load_trace

#: 8 GPUs as two fixed pools: busy's 2 are far too few for its stream of jobs, idle's 6 sit unused.
STARVED_QUOTAS = """jobQueues:
  - jobQueueName: q
    capacityLimits: [{capacityUnit: gpu, maxCapacity: 8}]
    quotaShares:
      - quotaShareName: busy
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 2}]
        resourceSharingConfiguration: {strategy: RESERVE}
      - quotaShareName: idle
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 6}]
        resourceSharingConfiguration: {strategy: RESERVE}
"""

#: The same 8 GPUs lent both ways, with a light load: no job ever waits.
WELL_SERVED_QUOTAS = """jobQueues:
  - jobQueueName: q
    capacityLimits: [{capacityUnit: gpu, maxCapacity: 8}]
    quotaShares:
      - quotaShareName: busy
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 4}]
        resourceSharingConfiguration: {strategy: LEND_AND_BORROW}
      - quotaShareName: idle
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 4}]
        resourceSharingConfiguration: {strategy: LEND}
"""

HEADER = "submitTime,jobName,quotaShareName,schedulingPriority,capacityUnit,instanceCount,duration\n"


def starved_trace(seed: int = 1) -> str:
    """busy submits a job of 1 GPU every 10 minutes, each running 40 minutes (4 GPUs busy on average);
    idle submits one small job a day."""
    rng = random.Random(seed)
    rows = [f"{i * 600},busy-{i},busy,0,gpu,1,{rng.randint(2000, 2800)}" for i in range(120)]
    rows += [f"{i * 86400 + 100},idle-{i},idle,0,gpu,1,600" for i in range(1)]
    return HEADER + "\n".join(rows) + "\n"


def light_trace() -> str:
    rows = [f"{i * 3600},a-{i},busy,0,gpu,2,1200" for i in range(20)]
    rows += [f"{i * 3600 + 1800},b-{i},idle,0,gpu,1,600" for i in range(20)]
    return HEADER + "\n".join(rows) + "\n"


def files(folder: Path, quotas: str, trace: str) -> tuple[Path, Path]:
    (folder / "quotas.yaml").write_text(quotas)
    (folder / "history.csv").write_text(trace)
    return folder / "history.csv", folder / "quotas.yaml"


def report_data(path: Path) -> dict[str, Any]:
    match = re.search(
        r"<script type='application/json' id='advice-data'>\n(.*?)\n</script>", path.read_text(), re.S
    )
    assert match is not None
    data: dict[str, Any] = json.loads(match[1])
    return data


def run(folder: Path, history: Path, quotas: Path, *extra: str) -> int:
    return main(
        [
            "--history",
            str(history),
            "--config",
            str(quotas),
            "-o",
            str(folder / "proposed.yaml"),
            "--report",
            str(folder / "report.html"),
            "--workers",
            "1",
            *extra,
        ]
    )


def test_a_starved_share_gets_the_idle_shares_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, quotas = files(tmp_path, STARVED_QUOTAS, starved_trace())

    assert run(tmp_path, history, quotas, "--max-replays", "30", "--time-limit", "120") == 0

    out = capsys.readouterr().out
    assert "Proposed design" in out
    proposed = load_quota_file(tmp_path / "proposed.yaml")  # validates like airflow quota validate
    limits = {
        share.quota_share_name: share.capacity_limits[0].max_capacity
        for share in proposed.job_queues[0].quota_shares
    }
    assert limits["busy"] > 2 and limits["idle"] < 6 and sum(limits.values()) <= 8
    # RESERVE stays RESERVE without --allow-reserve-changes.
    assert {
        share.resource_sharing_configuration.strategy for share in proposed.job_queues[0].quota_shares
    } == {"RESERVE"}
    data = report_data(tmp_path / "report.html")
    assert data["improved"] is True
    current, after = data["current"]["shares"]["busy"], data["proposed"]["shares"]["busy"]
    assert after["waitP95"] < current["waitP95"] / 2 and after["waitMean"] < current["waitMean"] / 2
    assert "busy: capacityLimits.gpu 2 -&gt; " in (tmp_path / "report.html").read_text()
    assert any(line.startswith("busy: capacityLimits.gpu 2 -> ") for line in data["changes"])


def test_the_search_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    history, quotas = files(tmp_path, STARVED_QUOTAS, starved_trace())
    configuration = load_queue_configuration(quotas)
    events = load_trace(history, configuration)
    options = AdviseOptions(max_replays=7, time_limit=300, workers=1, seed=3)

    first, second = advise(configuration, events, options), advise(configuration, events, options)

    assert [(t.move, t.score) for t in first.trials] == [(t.move, t.score) for t in second.trials]
    assert first.proposed_shares == second.proposed_shares


def test_a_well_served_history_gets_nothing_better(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, quotas = files(tmp_path, WELL_SERVED_QUOTAS, light_trace())

    assert run(tmp_path, history, quotas) == 0

    out = capsys.readouterr().out
    assert "Found nothing better: the current design stays" in out
    assert not (tmp_path / "proposed.yaml").exists()
    assert report_data(tmp_path / "report.html")["improved"] is False
    assert "Found nothing better" in (tmp_path / "report.html").read_text()


def test_a_search_cut_short_by_its_time_limit_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, quotas = files(tmp_path, STARVED_QUOTAS, starved_trace())

    assert run(tmp_path, history, quotas, "--time-limit", "0") == 0

    out = " ".join(capsys.readouterr().out.split())
    assert "Found nothing better: the current design stays" in out
    assert "no other design was replayed" in out and "The search stopped early" in out
    assert "--time-limit" in out and not (tmp_path / "proposed.yaml").exists()


@pytest.mark.parametrize(
    ("history_text", "expected"),
    [
        ("jobQueues: []\n", "unknown column 'jobQueues: []'"),
        (HEADER + "0,a,nobody,0,gpu,1,10\n", "quota share 'nobody' does not exist"),
        (HEADER, "the history holds no job"),
    ],
    ids=["not-a-trace", "unknown-share", "empty"],
)
def test_a_bad_history_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], history_text: str, expected: str
) -> None:
    history, quotas = files(tmp_path, STARVED_QUOTAS, history_text)

    assert run(tmp_path, history, quotas) == 1

    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "proposed.yaml").exists() and not (tmp_path / "report.html").exists()


def test_an_invalid_quota_file_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, quotas = files(
        tmp_path, STARVED_QUOTAS.replace("maxCapacity: 6", "maxCapacity: 9"), light_trace()
    )

    assert run(tmp_path, history, quotas) == 1

    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "adds up to 11" in err, err
    assert not (tmp_path / "proposed.yaml").exists() and not (tmp_path / "report.html").exists()


def test_options_out_of_range_and_overwriting_the_quota_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, quotas = files(tmp_path, STARVED_QUOTAS, starved_trace())

    assert run(tmp_path, history, quotas, "--max-replays", "0") == 1
    assert "--max-replays '0'" in capsys.readouterr().err
    assert main(["--history", str(history), "--config", str(quotas), "-o", str(quotas)]) == 1
    assert "is the quota file itself" in capsys.readouterr().err
    assert quotas.read_text() == STARVED_QUOTAS


def test_the_standalone_command_needs_a_history(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "quotas.yaml"])

    assert exit_info.value.code == 2
    assert "give --history FILE.csv" in capsys.readouterr().err


def test_the_standalone_advisor_never_imports_airflow() -> None:
    code = (
        "import sys, airflow_quota.cli.advise; "
        "print(any(name.split('.')[0] == 'airflow' for name in sys.modules))"
    )
    root = Path(__file__).resolve().parents[3]
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60, check=True
    )

    assert completed.stdout.strip() == "False"


RECLAIMING_QUOTAS = """jobQueues:
  - jobQueueName: q
    capacityLimits: [{capacityUnit: gpu, maxCapacity: 4}]
    quotaShares:
      - quotaShareName: borrower
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 2}]
        resourceSharingConfiguration: {strategy: LEND_AND_BORROW}
      - quotaShareName: lender
        capacityLimits: [{capacityUnit: gpu, maxCapacity: 2}]
        resourceSharingConfiguration: {strategy: LEND}
"""


def test_our_extensions_are_part_of_the_search(tmp_path: Path) -> None:
    """Borrowed GPUs reclaimed again and again lose work: the search tries the extensions against it."""
    rows = [f"{i * 3000},b-{i},borrower,0,gpu,2,5000" for i in range(30)]
    rows += [f"{i * 3000 + 1500},l-{i},lender,0,gpu,2,600" for i in range(30)]
    history, quotas = files(tmp_path, RECLAIMING_QUOTAS, HEADER + "\n".join(rows) + "\n")
    configuration = load_queue_configuration(quotas)
    options = AdviseOptions(max_replays=40, time_limit=300, workers=1)

    advice = advise(configuration, load_trace(history, configuration), options)

    assert advice.current.lost_unit_seconds > 0
    moves = " ".join(trial.move for trial in advice.trials)
    assert "extensions.checkpointAwareVictims ENABLED" in moves and "extensions.minimumRunSeconds" in moves
    assert not any("extensions" in line for line in advice.not_searched)


def test_a_round_past_the_deadline_is_cut_and_its_replays_abandoned(tmp_path: Path) -> None:
    """The time limit holds however slow the machine gets: unfinished replays of a round are dropped."""
    history, quotas = files(tmp_path, STARVED_QUOTAS, starved_trace())
    configuration = load_queue_configuration(quotas)
    context = _Context(
        "h", dict(configuration.queue_raw), load_trace(history, configuration), Settings(), 0.0
    )
    replayer = _Replayer(context, 1)
    try:
        shares = configuration.shares_raw
        assert replayer.replay([shares], lambda: None, deadline=time.perf_counter()) == [None]
    finally:
        replayer.close()
    replayer = _Replayer(context, 2)
    try:
        evaluations = replayer.replay([shares, shares], lambda: None, deadline=time.perf_counter() + 120)
    finally:
        replayer.close()
    first, second = evaluations
    assert first is not None and second is not None
    assert (first.shares, first.utilization) == (second.shares, second.utilization)
