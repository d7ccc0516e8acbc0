"""The simulator's HTML report (``--report FILE.html``) in a real browser (headless chromium): hovering a
bar of its GPU timeline tells when it ran, with the days when the run lasts more than a day."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from airflow_quota.sim.__main__ import main
from tests.ui.browser import ARTIFACTS, NEEDS_CHROMIUM, chromium, console_errors, drawn_timeline, wait_for

pytestmark = NEEDS_CHROMIUM

ROOT = Path(__file__).resolve().parents[2]
DASH = "\N{EN DASH}"  # between a period's start and end
HOUR = 3600
#: reclaim.yaml's story over days: train-b borrows eval's GPUs, eval's job comes back for them at 26 h.
MULTI_DAY = f"""
jobQueue:
  jobQueueName: gpu-queue
  capacityLimits: [{{capacityUnit: gpu, maxCapacity: 4}}]
quotaShares:
  - quotaShareName: research
    capacityLimits: [{{capacityUnit: gpu, maxCapacity: 2}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 100}}
    preemptionConfiguration: {{inSharePreemption: DISABLED}}
  - quotaShareName: eval
    capacityLimits: [{{capacityUnit: gpu, maxCapacity: 2}}]
    resourceSharingConfiguration: {{strategy: LEND}}
    preemptionConfiguration: {{inSharePreemption: DISABLED}}
settings: {{stopSeconds: 600, startSeconds: 0}}
events:
  - at: 0
    submitJob: {{jobName: train-a, quotaShareName: research, schedulingPriority: 50, capacityUnit: gpu,
                instanceCount: 2, duration: {30 * HOUR}}}
  - at: 0
    submitJob: {{jobName: train-b, quotaShareName: research, schedulingPriority: 50, capacityUnit: gpu,
                instanceCount: 2, duration: {40 * HOUR}}}
  - at: {26 * HOUR}
    submitJob: {{jobName: eval-nightly, quotaShareName: eval, schedulingPriority: 10, capacityUnit: gpu,
                instanceCount: 2, duration: {2 * HOUR}}}
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def report(tmp_path: Path, scenario: Path) -> str:
    path = tmp_path / f"{scenario.stem}.html"
    assert main([str(scenario), "--report", str(path)]) == 0
    return path.as_uri()


def hover_tooltip(driver: WebDriver, job: str, phase: str) -> str:
    """Hover the middle of ``job``'s first ``phase`` bar; the tooltip's text."""
    host = driver.find_element(By.ID, "timeline-0")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", host)
    bar = next(
        item
        for item in drawn_timeline(driver, "gpu-queue")
        if item["jobId"] == job and item["phase"] == phase and item["kind"] == "bar"
    )
    hover = ActionBuilder(driver)
    hover.pointer_action.move_to_location(int(bar["x"]), int(bar["y"]))
    hover.perform()
    tips = wait_for(
        driver,
        lambda d: (
            [tip.text for tip in d.find_elements(By.CSS_SELECTOR, ".tl-tip") if job in tip.text] or None
        ),
        f"{job}'s tooltip",
    )
    return str(tips[-1])


def opened(driver: WebDriver, url: str) -> list[dict[str, Any]]:
    driver.get(url)
    wait_for(driver, lambda d: d.execute_script("return document.body.dataset.drawn") == "true", "the report")
    return drawn_timeline(driver, "gpu-queue")


def test_a_run_over_days_says_the_day_of_each_moment_in_its_tooltips(
    browser: WebDriver, tmp_path: Path
) -> None:
    scenario = tmp_path / "multi_day.yaml"
    scenario.write_text(MULTI_DAY, encoding="utf-8")
    opened(browser, report(tmp_path, scenario))
    console_errors(browser)

    # train-b borrowed from the start; eval's job stopped it at 26 h (1d 02:00, as on the time axis).
    stopping = hover_tooltip(browser, "train-b", "STOPPING")
    assert f"1d 02:00:00 {DASH} 1d 02:10:00 (10 min)" in stopping, stopping
    running = hover_tooltip(browser, "eval-nightly", "RUNNING")
    assert f"1d 02:10:00 {DASH} 1d 04:10:00 (2.0 h)" in running, running
    browser.save_screenshot(str(ARTIFACTS / "sim-report-multi-day-tooltip.png"))
    assert console_errors(browser) == []


def test_a_run_within_a_day_shows_its_elapsed_clock_alone(browser: WebDriver, tmp_path: Path) -> None:
    opened(browser, report(tmp_path, ROOT / "examples" / "scenarios" / "reclaim.yaml"))

    stopping = hover_tooltip(browser, "train-b", "STOPPING")
    assert f"00:00:30 {DASH} 00:00:40 (10 s)" in stopping, stopping
    assert not re.search(r"\dd ", stopping)
