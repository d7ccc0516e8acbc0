"""The "GPU Quotas" page in a real browser (headless Debian chromium through selenium) on a real api-server.

It loads after logging in through Airflow's login page, shows a share's usage once a job is granted, shows a
preemption (who, by whom, when) after the next refresh once the allocator records one, has a per-share page,
and sits in Airflow's navigation. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select

from airflow_quota.ledger.models import JobRow
from tests.ui.browser import (
    ARTIFACTS,
    NEEDS_CHROMIUM,
    chromium,
    click,
    console_errors,
    drawn_timeline,
    pick_window,
    text,
    wait_for,
)
from tests.ui.browser import log_in as log_in_as
from tests.ui.conftest import PASSWORDS, QUEUE, UNIT, ApiServer, Ledger
from tests.ui.test_api_limits import finished_jobs

pytestmark = [pytest.mark.airflow, NEEDS_CHROMIUM]


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def log_in(driver: WebDriver, server: ApiServer, path: str, user: str) -> None:
    """Open ``path`` without a session: Airflow's login page comes first, then the page itself."""
    log_in_as(driver, server.url, path, user, PASSWORDS[user])


#: What the page shows, read in one script run (the page redraws itself every few seconds).
SHOWN = """
const text = (node) => (node ? node.innerText.trim() : null);
const cells = (row) => [...row.querySelectorAll(":scope > td")].map(text);
const jobs = {};
for (const row of document.querySelectorAll("table.jobs tr[data-job]")) {
  const task = row.querySelector("td:nth-child(3) a");
  const training = row.querySelector("td:last-child a");
  jobs[row.dataset.job] = {
    cells: cells(row),
    text: text(row),
    taskHref: task && task.href, taskTarget: task && task.getAttribute("target"),
    trainingHref: training && training.href, training: text(training),
  };
}
return {
  title: document.title,
  units: [...document.querySelectorAll(".unit-title span:first-child")].map(text),
  totals: [...document.querySelectorAll(".unit .queue-total")].map(text),
  segments: [...document.querySelectorAll(".bar .seg")].map(text),
  legends: Object.fromEntries(
    [...document.querySelectorAll(".legend [data-share]")].map((e) => [e.dataset.share, text(e)])),
  card: text(document.querySelector(".share-card")),
  jobs,
  jobOrder: [...document.querySelectorAll("table.jobs tr[data-job]")].map((row) => row.dataset.job),
  events: [...document.querySelectorAll("table.events tr[data-kind]")].map(cells),
  status: text(document.getElementById("status")),
};
"""


def shown(driver: WebDriver) -> dict[str, Any]:
    state: dict[str, Any] = driver.execute_script(SHOWN)
    return state


def showing(driver: WebDriver, what: str, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Wait until what the page shows satisfies ``condition``; return it."""

    def check(d: WebDriver) -> dict[str, Any] | None:
        state = shown(d)
        return state if condition(state) else None

    result: dict[str, Any] = wait_for(driver, check, what)
    return result


def end_the_session(browser: WebDriver) -> str:
    """Make the page's API answer 401 from now on (the session ended) and return the address of the "log in
    again" link the page then shows."""
    browser.execute_script(
        "window.fetch = async () => new Response('{}', {status: 401, statusText: 'Unauthorized'})"
    )
    return str(
        wait_for(
            browser,
            lambda d: d.find_element(By.CSS_SELECTOR, "#error a").get_attribute("href"),
            "the session-ended message",
        )
    )


def test_the_page_shows_usage_after_a_grant_and_then_a_preemption(
    api_server: ApiServer, browser: WebDriver
) -> None:
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.apply()
    vision_a = ledger.submit("vision-a", "vision", 3, priority=10)
    research_a = ledger.submit("research-a", "research", 2)
    urgent_a = ledger.submit("urgent-a", "urgent", 1, priority=5)
    ledger.cycle()
    for job_id in (vision_a, research_a, urgent_a):
        ledger.running(job_id)
    ledger.training_job(vision_a, "vision-a-2026-03-01")

    log_in(browser, api_server, "/quota/", "admin")
    page = showing(browser, "vision's usage", lambda page: "vision" in page["legends"])
    assert page["title"] == "GPU Quotas"
    # One bar for the queue's unit, laid out by owner: vision's 1 borrowed GPU sits in research's block.
    assert (page["units"], page["totals"]) == ([UNIT], ["8 total: 6 in use, 2 idle"])
    assert page["segments"] == [
        "research 2",
        "vision 1 borrowed",
        "research idle 1",
        "vision 2",
        "urgent 1",
        "urgent idle 1",
    ]
    assert page["legends"] == {
        "research": "research: 2 own of 4, 1 lent (1 to vision), 1 idle",
        "vision": "vision: 2 own of 2, 1 borrowed (1 from research), 0 idle",
        "urgent": "urgent: 1 own of 2, 1 idle",
    }
    # Links: the Airflow task instance (in the whole window, out of Airflow's frame) and the SageMaker job.
    job = page["jobs"][vision_a]
    assert (job["taskHref"], job["taskTarget"]) == (
        f"{api_server.url}/dags/train/runs/run-1/tasks/vision-a",
        "_top",
    )
    assert job["training"] == "vision-a-2026-03-01"
    assert job["trainingHref"].startswith("https://console.aws.amazon.com/sagemaker/home?region=us-west-2#")
    assert job["cells"][4] == "RUNNING" and "holds 3 (1 borrowed)" in job["cells"][5]
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-granted.png"))

    # research wants its own capacity back: the allocator preempts vision-a (cross-share reclaim).
    research_b = ledger.submit("research-b", "research", 2)
    ledger.cycle()
    page = showing(
        browser, "vision-a being preempted", lambda page: "Being" in page["jobs"][vision_a]["text"]
    )
    why = page["jobs"][vision_a]["cells"][6]
    assert why.startswith(f"Being preempted by {research_b} (decided ")
    assert "RECLAIM" in why
    assert page["jobs"][vision_a]["cells"][4] == "RUNNING stopping"
    assert page["events"][0][1:3] == ["PREEMPTED", "vision"]
    # research-b counts in research now; vision-a still holds its 3 until its training job has stopped.
    assert page["totals"] == ["8 total: 5 in use, 3 idle · 3 held by jobs being stopped, 2 free now"]
    assert page["legends"]["vision"] == "vision: 0 own of 2, 2 idle, 3 stopping"
    assert page["events"][0][3] == "train / vision-a\nrun run-1"  # the Job column
    assert page["events"][0][4].startswith(f"{vision_a} (vision) preempted by {research_b} (research)")
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-preempting.png"))

    # Its task stopped the training job: vision-a is RUNNABLE again and says by whom and when.
    ledger.stopped(vision_a)
    ledger.cycle()
    page = showing(browser, "vision-a requeued", lambda page: "Preempted" in page["jobs"][vision_a]["text"])
    cells = page["jobs"][vision_a]["cells"]
    assert (cells[0], cells[1], cells[3], cells[4]) == ("vision", "1", "10", "RUNNABLE")
    assert cells[6].startswith(
        f"Waiting for capacity to borrow: this job needs 3 {UNIT}, more than quota share vision has free "
        "of its own 2"
    )
    # What holds the capacity: research's own, urgent's; urgent's idle GPU is RESERVE, never lent.
    assert (
        f"{UNIT} in use: research 4, urgent 1; idle: 2 of vision, 1 of urgent (RESERVE: never lent)"
        in cells[6]
    )
    assert f"Preempted 1 time, last by {research_b} at 12:00:55" in cells[6]
    assert [event[1] for event in page["events"][:3]] == ["GRANTED", "REQUEUED", "PREEMPTED"]
    assert page["legends"]["research"] == "research: 4 own of 4, 0 idle"
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas.png"))


def test_the_share_page_focuses_on_one_share(api_server: ApiServer, browser: WebDriver) -> None:
    path = f"/quota/shares/{QUEUE}/vision"
    browser.get(api_server.url + path)  # still logged in from the test above
    page = showing(browser, "the share's card", lambda page: page["card"] is not None)
    assert page["title"] == "GPU Quotas: vision"
    assert "LEND_AND_BORROW" in page["card"] and "100%" in page["card"]
    assert (
        f"{UNIT}\nlimit 2, ceiling 4: 0 in use (0 own, 0 borrowed), 0 lent, 2 idle; 0 RUNNING, 1 RUNNABLE"
        in page["card"]
    )
    assert page["jobOrder"] == ["train/run-1/vision-a/-1/1"]
    assert {event[2] for event in page["events"]} == {"vision"}
    # Its timeline fades the other shares' bars (research and urgent hold the GPUs) and shows vision's waits.
    drawn = wait_for(browser, lambda d: timeline(d) or None, "the share's timeline")
    bars = [item for item in drawn if item["kind"] == "bar"]
    assert {item["share"] for item in bars} == {"research", "urgent"} and all(item["dim"] for item in bars)
    waits = {(item["jobId"], item["dim"]) for item in drawn if item["kind"] == "wait"}
    assert waits == {("train/run-1/vision-a/-1/1", False)}
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-share.png"))


def timeline(driver: WebDriver) -> list[dict[str, Any]]:
    return drawn_timeline(driver, QUEUE)


def click_at(driver: WebDriver, x: float, y: float) -> None:
    """Move the mouse to a point of the page (a bar of the chart) and click there, as a user would."""
    actions = ActionBuilder(driver)
    actions.pointer_action.move_to_location(int(x), int(y))
    actions.pointer_action.click()
    actions.perform()


def test_the_timeline_shows_a_borrower_stopped_for_its_preemptor_then_resuming(
    api_server: ApiServer, browser: WebDriver
) -> None:
    """The demo's story: vision-a borrows, research-b reclaims (vision-a stops, its bar's stop phase links to
    research-b), research-b runs and ends, vision-a resumes; on a window the user picks."""
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.now = datetime.now(UTC) - timedelta(minutes=3)  # a story of the last few minutes
    ledger.apply()
    vision_a = ledger.submit("vision-a", "vision", 3, priority=10)
    ledger.submit("research-a", "research", 2)
    ledger.submit("urgent-a", "urgent", 1, priority=5)
    ledger.cycle()  # vision-a borrows 1 of research's idle GPUs
    ledger.running(vision_a)
    research_b = ledger.submit("research-b", "research", 2)
    ledger.cycle()  # research reclaims: vision-a is preempted, and stops
    ledger.stopped(vision_a)
    ledger.cycle()  # research-b gets the GPUs once vision-a has stopped
    ledger.running(research_b)
    ledger.succeeded(research_b)
    ledger.cycle()  # vision-a resumes on research's idle GPUs again
    log_in(browser, api_server, "/quota/", "viewer")
    console_errors(browser)
    pick_window(browser, "15m")
    items = wait_for(
        browser,
        lambda d: (
            [item for item in timeline(d) if item["jobId"] == vision_a and item["kind"] == "bar"] or None
        ),
        "vision-a's bars on the timeline",
    )
    story = sorted({(item["start"], item["phase"]) for item in items})
    assert [phase for _, phase in story] == ["RUNNING", "STOPPING", "RUNNING"]
    first, stopping, resumed = (
        [item for item in items if (item["start"], item["phase"]) == step] for step in story
    )
    assert len(first) == len(stopping) == len(resumed) == 3  # three units each time
    assert sorted(item["borrowed"] for item in first) == [False, False, True]
    assert {item["preemptedBy"] for item in stopping} == {research_b}
    research = [item for item in timeline(browser) if item["jobId"] == research_b and item["kind"] == "bar"]
    assert len(research) == 2
    assert min(item["start"] for item in research) >= max(item["end"] for item in stopping)
    assert resumed[0]["start"] >= max(item["end"] for item in research)
    waits = [item for item in timeline(browser) if item["jobId"] == vision_a and item["kind"] == "wait"]
    assert len(waits) == 2  # before its first grant, and from its requeue to its resume

    # Hover the stop phase: a tooltip; click it: its details say for whom it stops, with a link to it.
    # The window slides with the clock, so the bar moves a little at each refresh: aim at it again each try.
    browser.execute_script("document.querySelector('.timeline-chart').scrollIntoView()")

    def stop_phase(d: WebDriver) -> dict[str, Any]:
        return next(item for item in timeline(d) if item["jobId"] == vision_a and item["phase"] == "STOPPING")

    def hovered(d: WebDriver) -> bool:
        bar = stop_phase(d)
        hover = ActionBuilder(d)
        hover.pointer_action.move_to_location(int(bar["x"]), int(bar["y"]))
        hover.perform()
        return "Stopping for " + research_b in text(d)

    def clicked(d: WebDriver) -> WebElement | None:
        bar = stop_phase(d)
        click_at(d, bar["x"], bar["y"])
        found = d.find_elements(By.CSS_SELECTOR, ".timeline-details[data-phase=STOPPING]")
        return found[0] if found else None

    def read(details: WebElement) -> tuple[str | None, str]:
        return details.get_attribute("data-job"), details.text

    wait_for(browser, hovered, "the bar's tooltip")
    wait_for(browser, clicked, "the stop phase's details")
    # The page refreshes every 5 s and may replace the details between two reads: read them, and click their
    # link, each in one try that is repeated if it met a replaced element.
    job, details = wait_for(
        browser,
        lambda d: read(d.find_element(By.CSS_SELECTOR, ".timeline-details[data-phase=STOPPING]")),
        "the stop phase's details",
    )
    assert job == vision_a
    assert "Stopping for research-b (RECLAIM)" in details
    assert "Share\nvision" in details and "Priority\n10" in details
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-timeline.png"))
    click(browser, ".timeline-details[data-phase=STOPPING] a.preemptor", "the link to the preemptor")
    preemptor = wait_for(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, f'.timeline-details[data-job="{research_b}"]'),
        "the preemptor's details",
    )
    assert "Share\nresearch" in preemptor.text and "ended by SUCCEEDED" in preemptor.text
    assert console_errors(browser) == []


def test_a_task_instance_has_a_quota_view_with_its_own_story(
    api_server: ApiServer, browser: WebDriver
) -> None:
    """The view Airflow shows as a "Quota" tab of every task instance: vision-a's own timeline and story."""
    plugins = api_server.get("/api/v2/plugins", user="admin").json()["plugins"]
    (plugin,) = [plugin for plugin in plugins if plugin["name"] == "airflow_quota"]
    views = {view["destination"]: view for view in plugin["external_views"]}
    assert views["task_instance"]["name"] == "Quota"
    href = views["task_instance"]["href"]
    # Airflow fills in the placeholders; {MAP_INDEX} only for a mapped task, so it stays for vision-a.
    path = "/" + href.replace("{DAG_ID}", "train").replace("{RUN_ID}", "run-1").replace(
        "{TASK_ID}", "vision-a"
    )
    browser.get(api_server.url + path)
    story = wait_for(
        browser,
        lambda d: (
            [
                row.get_attribute("data-kind")
                for row in d.find_elements(By.CSS_SELECTOR, "table.story tr[data-kind]")
            ]
            or None
        ),
        "the task instance's story",
    )
    assert story == ["WAITING", "GRANTED", "PREEMPTED", "REQUEUED", "WAITING", "GRANTED"]
    rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table.story tr[data-kind]")]
    assert "Granted 3 ml.p4d.24xlarge (1 borrowed)" in rows[1]
    assert "Preempted by train/run-1/research-b/-1/1 (RECLAIM)" in rows[2]
    assert "attempt 2: resumed from its checkpoint" in rows[5]
    items = wait_for(browser, lambda d: timeline(d) or None, "its timeline")
    assert {item["jobId"] for item in items} == {"train/run-1/vision-a/-1/1"}
    assert browser.title == "Quota: vision-a"
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-task-instance.png"))
    assert console_errors(browser) == []

    # The session ends (the view's API answers 401): as on the GPU Quotas page, a "log in again" link to
    # Airflow's login page with next= the view's address (Airflow's, when the view is in its frame).
    here = str(browser.execute_script("return window.location.href"))
    link = end_the_session(browser)
    assert "Your session has ended" in browser.find_element(By.ID, "error").text
    assert link == f"{api_server.url}/auth/login?" + urlencode({"next": here})
    click(browser, "#error a", "log in again")
    wait_for(browser, lambda d: d.current_url == link, "Airflow's login page")
    wait_for(browser, lambda d: d.find_element(By.NAME, "username"), "the login form")


def choose(driver: WebDriver, name: str, value: str) -> None:
    """Pick ``value`` in the decisions' ``name`` filter (the page redraws its filters at each refresh: pick
    again in the new one when it replaced the old one in between), and wait until the page shows it."""

    def chosen(d: WebDriver) -> bool:
        select = Select(d.find_element(By.CSS_SELECTOR, f"select[name={name}]"))
        if select.first_selected_option.get_attribute("value") != value:
            select.select_by_value(value)
        return False

    def shows(d: WebDriver) -> bool:
        select = Select(d.find_element(By.CSS_SELECTOR, f"select[name={name}]"))
        return select.first_selected_option.get_attribute("value") == value

    wait_for(driver, lambda d: chosen(d) or shows(d), f"the {name} filter set to {value!r}")


def test_recent_decisions_name_the_job_and_filter(api_server: ApiServer, browser: WebDriver) -> None:
    vision_a = "train/run-1/vision-a/-1/1"
    # A job of another DAG run, in urgent: the DAG run and share filters tell it apart.
    eval_b = Ledger(api_server.engine).submit("eval-b", "urgent", 1, run_id="run-2")
    browser.get(api_server.url + "/quota/")
    wait_for(browser, lambda d: Select(d.find_element(By.CSS_SELECTOR, "select[name=kind]")), "filters")
    choose(browser, "kind", "PREEMPTED")
    page = showing(
        browser, "only preemptions", lambda page: {event[1] for event in page["events"]} == {"PREEMPTED"}
    )
    assert [event[3].split("\n")[0] for event in page["events"]] == ["train / vision-a"]
    # The filter stays through the page's refreshes.
    status = text(browser).split("Updated ")[1][:8]
    wait_for(browser, lambda d: status not in d.find_element(By.ID, "status").text, "a refresh", seconds=15)
    assert {event[1] for event in shown(browser)["events"]} == {"PREEMPTED"}
    choose(browser, "kind", "")
    choose(browser, "job", vision_a)
    # The condition is the filtered page itself: the select shows the job at once, before its page arrives.
    page = showing(
        browser,
        "vision-a's decisions alone",
        lambda page: (
            len(page["events"]) >= 5
            and all(vision_a in " ".join(event) or "vision-a" in event[3] for event in page["events"])
        ),
    )
    assert {event[1] for event in page["events"]} >= {"SUBMITTED", "GRANTED", "PREEMPTED", "REQUEUED"}
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-decisions.png"))
    choose(browser, "job", "")
    # The share filter: urgent's decisions only, its two jobs' (of two DAG runs).
    choose(browser, "share", "urgent")
    page = showing(
        browser,
        "urgent's decisions",
        lambda page: (
            {event[2] for event in page["events"]} == {"urgent"}
            and "train / eval-b" in {event[3].split("\n")[0] for event in page["events"]}
        ),
    )
    jobs = {event[3].split("\n")[0] for event in page["events"]} - {""}  # "": the share's configuration
    assert jobs == {"train / urgent-a", "train / eval-b"}
    choose(browser, "share", "")
    # The DAG run filter: run-2's one decision, eval-b's submission.
    choose(browser, "run", "train / run-2")
    page = showing(browser, "run-2's decisions", lambda page: len(page["events"]) == 1)
    assert [(event[1], event[3]) for event in page["events"]] == [("SUBMITTED", "train / eval-b\nrun run-2")]
    assert eval_b == "train/run-2/eval-b/-1/1"
    choose(browser, "run", "")
    assert console_errors(browser) == []


def test_the_page_follows_airflows_dark_theme(api_server: ApiServer, browser: WebDriver) -> None:
    browser.get(api_server.url + "/quota/")
    browser.execute_script("localStorage.setItem('theme', 'dark')")  # Airflow's UI remembers it so
    try:
        browser.refresh()
        pick_window(browser, "all")
        wait_for(browser, lambda d: timeline(d) or None, "the timeline")
        background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        assert browser.execute_script("return document.documentElement.classList.contains('dark')")
        browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-timeline-dark.png"))
    finally:
        browser.execute_script(
            "localStorage.removeItem('theme'); localStorage.removeItem('quota-timeline-window')"
        )
    assert console_errors(browser) == []


def test_the_page_is_in_airflow_navigation_and_a_viewer_can_read_it(
    api_server: ApiServer, browser: WebDriver
) -> None:
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.apply()
    vision_a = ledger.submit("vision-a", "vision", 1)
    ledger.training_job(vision_a, "vision-a-2026-03-01")
    log_in(browser, api_server, "/", "viewer")
    nav = wait_for(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, 'a[aria-label="GPU Quotas"]'),
        "GPU Quotas in Airflow's navigation",
    )[0]
    nav.click()
    frame = wait_for(
        browser, lambda d: d.find_elements(By.TAG_NAME, "iframe"), "the page's frame in Airflow"
    )[0]
    assert browser.current_url.startswith(f"{api_server.url}/plugin/gpu-quotas")
    assert str(frame.get_attribute("src")).endswith("/quota/")
    browser.switch_to.frame(frame)
    wait_for(browser, lambda d: "Job queue gpu-training" in text(d), "the page inside Airflow's UI")
    assert browser.find_element(By.ID, "status").text.endswith("· viewer")
    browser.switch_to.default_content()
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-in-airflow.png"))
    # Airflow's UI turns dark (its theme switch sets its <html> class): the page follows at once.
    is_dark = "return document.documentElement.classList.contains('dark')"
    browser.switch_to.frame(frame)
    assert not browser.execute_script(is_dark)
    browser.switch_to.default_content()
    browser.execute_script(
        "document.documentElement.classList.remove('light'); document.documentElement.classList.add('dark')"
    )
    browser.switch_to.frame(frame)
    wait_for(browser, lambda d: d.execute_script(is_dark), "the page turning dark with Airflow")
    browser.switch_to.default_content()
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-in-airflow-dark.png"))
    browser.execute_script(
        "document.documentElement.classList.remove('dark'); document.documentElement.classList.add('light')"
    )
    # A link to the AWS console opens in a new tab (the frame may not open popups itself).
    browser.switch_to.frame(frame)
    console = "table.jobs td:last-child a[target=_blank]"
    click(browser, console, "the SageMaker link")
    browser.switch_to.default_content()
    wait_for(browser, lambda d: len(d.window_handles) == 2, "the AWS console's tab")
    airflow_tab = browser.current_window_handle
    browser.switch_to.window(next(h for h in browser.window_handles if h != airflow_tab))
    assert "console.aws.amazon.com/sagemaker" in wait_for(browser, lambda d: d.current_url, "its address")
    browser.close()
    browser.switch_to.window(airflow_tab)
    # A link to Airflow's own pages opens in Airflow, in the same window (the frame may not navigate it).
    browser.switch_to.frame(frame)
    click(browser, "table.jobs td a[target=_top]", "a task link")
    browser.switch_to.default_content()
    wait_for(
        browser,
        lambda d: d.current_url == f"{api_server.url}/dags/train/runs/run-1/tasks/vision-a",
        "Airflow's task instance page",
    )
    assert len(browser.window_handles) == 1

    # The session ends (the page's API answers 401): its "log in again" link loads Airflow's login page in
    # Airflow's window (not /quota/ pushed into Airflow's router, which draws its not-found page), with
    # next= Airflow's page that holds the frame.
    holder = f"{api_server.url}/plugin/gpu-quotas"
    browser.get(holder)
    frame = wait_for(browser, lambda d: d.find_elements(By.TAG_NAME, "iframe"), "the page's frame")[0]
    browser.switch_to.frame(frame)
    wait_for(browser, lambda d: "Job queue gpu-training" in text(d), "the page inside Airflow's UI")
    # Airflow's address for the page in its frame (it adds the frame's path to its own).
    top = str(browser.execute_script("return window.top.location.href"))
    assert top.startswith(holder)
    link = end_the_session(browser)
    assert link == f"{api_server.url}/auth/login?" + urlencode({"next": top})
    click(browser, "#error a", "log in again")
    browser.switch_to.default_content()
    wait_for(browser, lambda d: d.current_url == link, "Airflow's login page in Airflow's window")
    wait_for(browser, lambda d: d.find_element(By.NAME, "username"), "the login form")


def test_the_page_shows_a_page_of_jobs_with_a_long_history(api_server: ApiServer, browser: WebDriver) -> None:
    """20,000 jobs, 1,001 of them waiting: it lists the newest 1000 waiting, says so, and 10 finished."""
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.apply()
    rows = list(finished_jobs(20_000))
    for row in rows[-1001:]:
        row |= {"status": "RUNNABLE", "status_reason": "Waiting for capacity"}
    with api_server.engine.begin() as connection:
        connection.execute(sa.insert(JobRow), rows)
    log_in(browser, api_server, "/quota/", "viewer")
    state = showing(browser, "the jobs", lambda state: len(state["jobOrder"]) > 1000)
    assert len(state["jobOrder"]) == 1000 + 10
    assert state["jobOrder"][0] == rows[-1000]["job_id"] and state["jobOrder"][999] == rows[-1]["job_id"]
    assert "The newest 1000 of 1001 unfinished jobs" in browser.find_element(By.ID, "jobs-cut").text
    # Its GPU timeline replays the newest 500 jobs of the window (more than 1000 wait in it), and says so.
    notice = wait_for(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, f'.timeline-truncated[data-queue="{QUEUE}"]').text,
        "the timeline's notice that it left jobs out",
    )
    assert notice.startswith("Only the newest 500 jobs of this window are drawn: older jobs"), notice
    assert "/timeline?since=...&until=..." in notice


def test_a_job_running_for_days_says_on_which_day_it_started_in_its_tooltip(
    api_server: ApiServer, browser: WebDriver
) -> None:
    """A job running for two days: its tooltip gives the date it started, on the "since the first job"
    window and on the last 15 minutes (whose bar is clipped, not its story); a job granted a minute ago
    gives its clock time alone."""
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.now = datetime.now(UTC) - timedelta(days=2)
    ledger.apply()
    long_job = ledger.submit("long-run", "research", 2)
    ledger.cycle()
    started = ledger.now
    ledger.running(long_job)
    ledger.now = datetime.now(UTC) - timedelta(minutes=1)
    recent_job = ledger.submit("recent-run", "research", 1)
    ledger.cycle()
    log_in(browser, api_server, "/quota/", "viewer")
    console_errors(browser)

    def when(job_id: str) -> Callable[[WebDriver], str | None]:
        """Hover the job's bar; its tooltip's When line."""

        def hovered(d: WebDriver) -> str | None:
            bar = next(
                (item for item in timeline(d) if item["jobId"] == job_id and item["kind"] == "bar"), None
            )
            if bar is None:
                return None
            hover = ActionBuilder(d)
            hover.pointer_action.move_to_location(int(bar["x"]), int(bar["y"]))
            hover.perform()
            task = job_id.split("/")[2]
            for tip in d.find_elements(By.CSS_SELECTOR, ".tl-tip"):
                lines = tip.text.split("\n")
                if lines[0] == task:
                    return next((line[4:].strip() for line in lines if line.startswith("When")), None)
            return None

        return hovered

    def date_of(at: datetime) -> str:
        return str(
            browser.execute_script(
                "return new Date(arguments[0]).toLocaleDateString([], {month: 'short', day: 'numeric'})",
                int(at.timestamp() * 1000),
            )
        )

    pick_window(browser, "all")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".timeline-chart"), "the timeline")
    browser.execute_script("document.querySelector('.timeline-chart').scrollIntoView()")
    shown = wait_for(browser, when(long_job), "the long job's tooltip")
    assert shown.startswith(date_of(started) + ", ") and shown.endswith("now (48.0 h)"), shown
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-timeline-days.png"))
    pick_window(browser, "15m")
    shown = wait_for(browser, when(long_job), "the long job's tooltip on the last 15 minutes")
    assert shown.startswith(date_of(started) + ", ") and shown.endswith("now (48.0 h)"), shown
    recent = wait_for(browser, when(recent_job), "the recent job's tooltip")
    assert recent[0].isdigit() and " s)" in recent and date_of(datetime.now(UTC)) not in recent, recent
    assert console_errors(browser) == []
