"""The GPU Quotas page as a React app in Airflow's own UI (``react_apps``), in headless chromium on a real
api-server: registered for the navigation and the task instance's Quota tab, its bundle served and current,
then the demo's story (grants, a borrower preempted for its lender, its requeue and resume, jobs finishing)
in light and dark mode, what it shows compared with the REST API's answers at each step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
import sqlalchemy as sa
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from airflow_quota.ledger.models import JobRow
from tests.ui.browser import (
    ARTIFACTS,
    NEEDS_CHROMIUM,
    click,
    console_errors,
    drawn_timeline,
    hold_session,
    park,
    pick_window,
    wait_for,
    worker_chromium,
)
from tests.ui.conftest import PASSWORDS, QUEUE, UNIT, ApiServer, Ledger
from tests.ui.test_api_limits import finished_jobs, long_training_finishing_last

pytestmark = [pytest.mark.airflow, NEEDS_CHROMIUM]
PAGE = "/plugin/gpu-quotas"


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    """The worker's chromium (``worker_chromium``: tests/aws_batch/test_rest_on_aws_queues.py's too)."""
    driver = worker_chromium(request.session)
    yield driver
    park(driver)


#: What the page shows, read in one script run (it redraws itself every few seconds).
SHOWN = """
const text = (node) => (node ? node.innerText.trim() : null);
const cells = (row) => [...row.querySelectorAll(":scope > td")].map(text);
const page = document.querySelector("[data-quota-page]");
if (!page) return null;
const rows = (selector) => [...page.querySelectorAll(selector)];
const jobs = {};
for (const row of rows("table.jobs:not(.finished) tr[data-job]")) {
  const task = row.querySelector("a.task-link");
  jobs[row.dataset.job] = {
    cells: cells(row), text: text(row), taskHref: task && task.href, name: text(task) };
}
return {
  kind: page.dataset.quotaPage,
  title: text(page.querySelector("#title")),
  units: rows(".unit-title span:first-child").map(text),
  totals: rows(".unit .queue-total").map(text),
  segments: rows(".bar .seg").map(text),
  legends: Object.fromEntries(rows(".legend [data-share]").map((e) => [e.dataset.share, text(e)])),
  jobs,
  finished: rows("table.jobs.finished tr[data-job]").map((row) => row.dataset.job),
  finishedAt: rows("table.jobs.finished td.finished-at").map(text),
  // Work lost to preemptions: the queue's heading, per share its Preemptions and Lost GPU-h cells.
  queueLost: rows(".queue .queue-lost").map(text),
  sharesLost: Object.fromEntries(rows("table.shares tr[data-share]").map((row) => [row.dataset.share,
    [text(row.querySelector("td.preemptions")), text(row.querySelector("td.lost-work"))]])),
  events: rows("table.events tr[data-kind]").map(cells),
  eventsLost: rows("table.events tr[data-kind]").map((row) => text(row.querySelector(".lost-work"))),
  eventIds: rows("table.events tr[data-kind]").map((row) => row.dataset.job),
  // Each table, and whether the note under it says "Times in UTC".
  notes: rows("table").map((table) => {
    const holder = table.parentElement;
    const next = holder && holder.nextElementSibling;
    const kinds = ["jobs", "finished", "events", "shares", "story"];
    return [table.className.split(" ").filter((c) => kinds.includes(c)).join(" "),
      Boolean(next && next.classList.contains("utc-note"))];
  }),
  lanes: rows(".timeline-lanes .lane").map(
    (lane) => [lane.innerText, lane.title, lane.scrollWidth > lane.clientWidth]),
  status: text(page.querySelector("#status")),
};
"""


def shown(driver: WebDriver) -> dict[str, Any] | None:
    state: dict[str, Any] | None = driver.execute_script(SHOWN)
    return state


def showing(driver: WebDriver, what: str, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def check(d: WebDriver) -> dict[str, Any] | None:
        state = shown(d)
        return state if state is not None and condition(state) else None

    result: dict[str, Any] = wait_for(driver, check, what)
    return result


def api(server: ApiServer, path: str, **params: Any) -> Any:
    response = server.get(f"/quota/api{path}", **params)
    assert response.status_code == 200, response.text
    return response.json()


def clock(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%H:%M:%S")


def gpu_hours(unit_seconds: float) -> str:
    """How the page writes lost work: GPU-hours to two decimals, as JavaScript's toFixed rounds (the
    exact double, a tie up)."""
    return str(Decimal(unit_seconds / 3600).quantize(Decimal("0.01"), ROUND_HALF_UP))


def lost_text(unit_seconds: float, since: str | None) -> str:
    """How the page writes one preemption's lost work (format.ts lostText; Math.round rounds half up)."""
    words = {"checkpoint": " since its last checkpoint", "start": " since its start"}.get(since or "", "")
    return f"lost {gpu_hours(unit_seconds)} GPU-h ({int(unit_seconds + 0.5):,} GPU-seconds){words}"


def lost_work_shown(server: ApiServer, window: str) -> tuple[list[str], dict[str, list[str]]]:
    """What the queue's heading and its shares' Preemptions and Lost GPU-h cells should say: the REST
    snapshot's lostWork over the timeline's window."""
    (unit,) = api(server, f"/jobQueues/{QUEUE}/snapshot", window=window)["lostWork"]["units"]
    words = {
        "15m": "in the last 15 min",
        "1h": "in the last hour",
        "1d": "in the last day",
        "all": "since the first job",
    }
    preemptions = f"{unit['preemptions']} preemption{'' if unit['preemptions'] == 1 else 's'}"
    total = gpu_hours(unit["lostUnitSeconds"])
    heading = f"· work lost to preemptions {words[window]}: {total} GPU-h in {preemptions}"
    shares = {
        share["quotaShareName"]: [str(share["preemptions"]), gpu_hours(share["lostUnitSeconds"])]
        for share in unit["quotaShares"]
    }
    return [heading], shares


def test_the_plugin_registers_react_apps_and_serves_a_current_bundle(api_server: ApiServer) -> None:
    plugins = api_server.get("/api/v2/plugins", user="admin").json()["plugins"]
    (plugin,) = [plugin for plugin in plugins if plugin["name"] == "airflow_quota"]
    assert plugin["external_views"] == []  # react_apps go everywhere the iframe went
    apps = {app["destination"]: app for app in plugin["react_apps"]}
    assert set(apps) == {"nav", "task_instance"}
    assert (apps["nav"]["name"], apps["nav"]["url_route"]) == ("GPU Quotas", "gpu-quotas")
    assert (apps["task_instance"]["name"], apps["task_instance"]["url_route"]) == ("Quota", "quota")
    for app in apps.values():
        # Relative to the UI's base URL (the UI resolves it against document.baseURI).
        assert app["bundle_url"].startswith("quota/static/app/main.umd.cjs?v=")
        bundle = requests.get(f"{api_server.url}/{app['bundle_url']}", timeout=30)
        assert bundle.status_code == 200
        assert bundle.headers["content-type"].startswith("text/javascript")
        assert "AirflowPlugin" in bundle.text
    assert apps["nav"]["bundle_url"] != apps["task_instance"]["bundle_url"]  # each imported on its own


def seed_story(api_server: ApiServer) -> tuple[Ledger, dict[str, str]]:
    """The demo's story on the test queue: vision borrows research's idle GPU, research wants it back."""
    ledger = Ledger(api_server.engine)
    ledger.now = datetime.now(UTC) - timedelta(minutes=5)  # a live story: the last minutes
    ledger.empty()
    ledger.apply()
    jobs = {
        "vision_a": ledger.submit("vision-a", "vision", 3, priority=10),
        "research_a": ledger.submit("research-a", "research", 2),
        "urgent_a": ledger.submit("urgent-a", "urgent", 1, priority=5),
    }
    ledger.cycle()
    for job_id in jobs.values():
        ledger.running(job_id)
    return ledger, jobs


def test_the_page_tells_the_story_as_the_rest_api_does_in_both_themes(
    api_server: ApiServer, browser: WebDriver
) -> None:
    ledger, jobs = seed_story(api_server)
    vision_a = jobs["vision_a"]
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    browser.get(api_server.url + PAGE)
    page = showing(browser, "vision's usage", lambda page: "vision" in page["legends"])
    console_errors(browser)  # from here on: none (before: Airflow's own /ui/config 401 at its login)
    assert page["kind"] == "queues" and page["title"] == "GPU Quotas"
    assert page["status"].startswith("Updated ") and " UTC · refreshes every 5 s" in page["status"]
    snapshot = api(api_server, f"/jobQueues/{QUEUE}/snapshot")
    (unit,) = snapshot["capacity"]
    in_use = sum(share["used"] for share in unit["quotaShares"])
    idle = sum(share["idle"] for share in unit["quotaShares"]) + unit["unownedIdle"]
    assert (page["units"], page["totals"]) == (
        [UNIT],
        [f"{unit['capacity']} total: {in_use} in use, {idle} idle"],
    )
    assert page["segments"] == [
        "research 2",
        "vision 1 borrowed",
        "research idle 1",
        "vision 2",
        "urgent 1",
        "urgent idle 1",
    ]
    assert page["legends"]["vision"] == "vision: 2 own of 2, 1 borrowed (1 from research), 0 idle"
    rest_jobs = api(api_server, "/jobs", finished="false")["jobs"]
    assert set(page["jobs"]) == {job["jobId"] for job in rest_jobs}
    for job in rest_jobs:
        cells = page["jobs"][job["jobId"]]["cells"]
        assert (cells[0], cells[3], cells[4]) == (
            job["quotaShareName"],
            str(job["schedulingPriority"]),
            job["status"],
        )
    # Jobs are named "dag / task" (one run: no run needed), linked to their task instance in Airflow.
    assert page["jobs"][vision_a]["name"] == "train / vision-a"
    assert page["jobs"][vision_a]["taskHref"] == f"{api_server.url}/dags/train/runs/run-1/tasks/vision-a"
    # The jobs table shows no time: no "Times in UTC" under it; the decisions show times, and say so.
    assert (
        ["jobs", False] in page["notes"]
        and ["events", True] in page["notes"]
        and ["shares", False] in page["notes"]
    )

    # The timeline draws what the REST API's timeline says, in a window fitted to its jobs (not 15 minutes).
    items = wait_for(browser, lambda d: drawn_timeline(d, QUEUE) or None, "the timeline")
    timeline = api(api_server, f"/jobQueues/{QUEUE}/timeline", window="1h")
    bars = [bar for unit in timeline["units"] for bar in unit["bars"]]
    assert sorted((i["jobId"], i["lane"], i["phase"]) for i in items if i["kind"] == "bar") == sorted(
        (b["jobId"], b["row"], b["phase"]) for b in bars
    )
    first = datetime.fromisoformat(timeline["firstSubmittedAt"]).timestamp() * 1000
    starts = [item["start"] for item in items]
    assert min(starts) >= first - 60_000  # the story fills the chart: it opens near the first job
    # Lane names are whole, or whole in their tooltip.
    for lane, title, cut in page["lanes"]:
        assert title == lane and (not cut or title)

    # research wants its own capacity back: vision-a is preempted (reclaim), stops, and waits again.
    research_b = ledger.submit("research-b", "research", 2)
    ledger.cycle()
    ledger.stopped(vision_a)
    ledger.cycle()
    page = showing(
        browser,
        "vision-a requeued, its lost work in the shares table",
        lambda page: "Preempted" in page["jobs"][vision_a]["text"] and page["sharesLost"]["vision"][0] == "1",
    )
    cells = page["jobs"][vision_a]["cells"]
    assert cells[4] == "RUNNABLE"
    # The preemptor is named the way the page names jobs, not by its id; and what its preemptions lost.
    (attempt,) = api(api_server, f"/jobs/{vision_a}")["preemptionSummary"]["recentPreemptedAttempts"]
    lost = attempt["lostUnitSeconds"]
    assert lost > 0
    assert "Preempted 1 time, last by train / research-b at " in cells[6]
    assert f"; {gpu_hours(lost)} GPU-h of work lost" in cells[6]
    assert research_b not in cells[6]
    events = api(api_server, "/events", limit=50)["events"][::-1]
    assert [row[1] for row in page["events"]] == [event["kind"] for event in events][: len(page["events"])]
    assert page["eventIds"] == [event["jobId"] or "" for event in events][: len(page["events"])]
    assert page["events"][0][0].endswith(clock(events[0]["at"]))
    # Lost work: each preemption in the decisions, the queue's heading and the shares' cells, as the REST
    # API's snapshot says over the timeline's window (fitted: the last hour).
    assert page["eventsLost"] == [
        f"Work {lost_text(event['details']['lostUnitSeconds'], event['details']['lostSince'])}"
        if event["kind"] == "PREEMPTED"
        else None
        for event in events[: len(page["events"])]
    ]
    assert "PREEMPTED" in [row[1] for row in page["events"]]
    heading, shares_lost = lost_work_shown(api_server, "1h")
    assert (page["queueLost"], page["sharesLost"]) == (heading, shares_lost)
    assert shares_lost["vision"] == ["1", gpu_hours(lost)] and shares_lost["research"] == ["0", "0.00"]

    # A click on the running part of vision-a's preempted bar names its preemptor and the preemption's reason.
    pick = [
        item
        for item in drawn_timeline(browser, QUEUE)
        if item["jobId"] == vision_a and item["phase"] == "RUNNING"
    ]
    first_run = min(pick, key=lambda item: item["start"])
    stop = next(b for b in bars_of(api_server) if b["jobId"] == vision_a and b["phase"] == "STOPPING")
    click_at(browser, first_run["x"], first_run["y"])
    details = wait_for(
        browser, lambda d: d.find_element(By.CSS_SELECTOR, ".timeline-details[data-job]"), "pinned"
    )
    assert details.get_attribute("data-phase") == "RUNNING"
    # Its reason in the page's names of jobs, not their ids, and the work the preemption lost.
    reason = stop["reason"].replace(research_b, "train / research-b").replace(vision_a, "train / vision-a")
    assert stop["lostUnitSeconds"] == lost
    assert (
        f"Preempted by train / research-b (RECLAIM), {lost_text(lost, stop['lostSince'])}: {reason}"
        in details.text
    )
    assert f"Work lost\n{lost_text(lost, stop['lostSince'])}" in details.text
    assert "ended by its preemption for train / research-b" in details.text
    click(browser, ".timeline-details a.preemptor", "the preemptor's link")
    wait_for(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, ".timeline-details[data-job]").get_attribute("data-job")
            == research_b
        ),
        "the preemptor pinned",
    )
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-light.png"))

    # Jobs finish: "Recently finished" lists them by finish time, the latest first, with the time.
    ledger.succeeded(jobs["urgent_a"])
    ledger.succeeded(jobs["research_a"])
    page = showing(browser, "two finished jobs", lambda page: len(page["finished"]) == 2)
    assert page["finished"] == [jobs["research_a"], jobs["urgent_a"]]
    finished = {job["jobId"]: job for job in api(api_server, "/jobs", finished="true")["jobs"]}
    assert page["finishedAt"][0].endswith(clock(finished[jobs["research_a"]]["stoppedAt"]))
    assert ["jobs finished", True] in page["notes"]

    # Dark mode, as Airflow's UI remembers it: the page draws on Airflow's dark theme, the same content.
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    try:
        browser.refresh()
        dark = showing(browser, "the page in dark mode", lambda page: len(page["finished"]) == 2)
        assert browser.execute_script("return document.documentElement.classList.contains('dark')")
        same = ("segments", "legends", "finished", "totals", "queueLost", "sharesLost", "eventsLost")
        assert {k: dark[k] for k in same} == {k: page[k] for k in same}
        assert dark["sharesLost"]["vision"] == ["1", gpu_hours(lost)]
        colors = browser.execute_script(
            "const t = document.querySelector('table.jobs');"
            "return [getComputedStyle(t).color, getComputedStyle(document.body).backgroundColor]"
        )
        assert luminance(colors[0]) > 0.6 > luminance(colors[1])  # light text on a dark background
        wait_for(browser, lambda d: drawn_timeline(d, QUEUE) or None, "the timeline in dark mode")
        browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-dark.png"))
    finally:
        browser.execute_script("localStorage.removeItem('theme')")
    browser.refresh()
    showing(browser, "the page in light mode", lambda page: len(page["finished"]) == 2)
    light = browser.execute_script("return getComputedStyle(document.querySelector('table.jobs')).color")
    assert luminance(light) < 0.4
    assert console_errors(browser) == []


def test_recently_finished_lists_a_long_training_that_finished_last_first(
    api_server: ApiServer, browser: WebDriver
) -> None:
    """53 finished jobs, the earliest submitted (a long training) finished last: Recently finished lists it
    first, then the others by when they finished: the 10 the REST API lists by finish time, in both themes
    (the page once read the newest 50 by submission, which left the long training out)."""
    ledger = Ledger(api_server.engine)
    ledger.now = datetime.now(UTC) - timedelta(minutes=20)
    long, short = long_training_finishing_last(ledger)
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    console_errors(browser)
    browser.get(api_server.url + PAGE)
    page = showing(browser, "the latest finished", lambda page: len(page["finished"]) == 10)
    latest = api(api_server, "/jobs", orderBy="stoppedAt", limit=10)["jobs"]
    assert page["finished"] == [job["jobId"] for job in latest] == [long, *short[::-1][:9]]
    assert [shown[-8:] for shown in page["finishedAt"]] == [clock(job["stoppedAt"]) for job in latest]
    assert long not in [job["jobId"] for job in api(api_server, "/jobs", finished="true", limit=50)["jobs"]]
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    try:
        browser.refresh()
        dark = showing(browser, "the latest finished in dark mode", lambda page: len(page["finished"]) == 10)
        assert browser.execute_script("return document.documentElement.classList.contains('dark')")
        assert (dark["finished"], dark["finishedAt"]) == (page["finished"], page["finishedAt"])
    finally:
        browser.execute_script("localStorage.removeItem('theme')")
    assert console_errors(browser) == []


def bars_of(api_server: ApiServer) -> list[dict[str, Any]]:
    timeline = api(api_server, f"/jobQueues/{QUEUE}/timeline", window="1h")
    return [bar for unit in timeline["units"] for bar in unit["bars"]]


def click_at(driver: WebDriver, x: float, y: float) -> None:
    driver.execute_script(
        "const [x, y] = arguments; const target = document.elementFromPoint(x, y);"
        "for (const type of ['mousedown', 'mouseup', 'click'])"
        "  target.dispatchEvent(new MouseEvent(type, {bubbles: true, clientX: x, clientY: y}));",
        x,
        y,
    )


def luminance(css: str) -> float:
    """0 (black) .. 1 (white) of an rgb()/rgba()/oklch()/color() colour as getComputedStyle writes it."""
    inside = css[css.index("(") + 1 : css.rindex(")")].replace(",", " ").replace("/", " ").split()
    if css.startswith("oklch"):
        value = inside[0]
        return float(value[:-1]) / 100 if value.endswith("%") else float(value)
    if css.startswith("color("):
        return sum(float(v) for v in inside[1:4]) / 3
    return sum(float(v) for v in inside[:3]) / 3 / 255


def test_the_task_instance_quota_tab_is_the_react_view(api_server: ApiServer, browser: WebDriver) -> None:
    ledger, jobs = seed_story(api_server)
    vision_a = jobs["vision_a"]
    research_b = ledger.submit("research-b", "research", 2)
    ledger.cycle()
    ledger.stopped(vision_a)
    ledger.cycle()
    browser.get(f"{api_server.url}/dags/train/runs/run-1/tasks/vision-a/plugin/quota")
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
    assert story == ["WAITING", "GRANTED", "PREEMPTED", "REQUEUED", "WAITING"]
    rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table.story tr[data-kind]")]
    assert "Granted 3 ml.p4d.24xlarge (1 borrowed)" in rows[1]
    assert "Preempted by train / research-b (RECLAIM)" in rows[2] and research_b not in rows[2]
    # The work its preemption lost, as its task instance's timeline (the REST API) has it.
    (own,) = api(api_server, "/taskInstances/timeline", dagId="train", runId="run-1", taskId="vision-a")[
        "timelines"
    ]
    stop = next(bar for bar in own["units"][0]["bars"] if bar["phase"] == "STOPPING")
    assert rows[2].endswith(f"; it {lost_text(stop['lostUnitSeconds'], stop['lostSince'])}")
    summary = browser.find_element(By.CSS_SELECTOR, "[data-quota-page=task] .task-lost").text
    assert summary == f"Preempted 1 time: {gpu_hours(stop['lostUnitSeconds'])} GPU-h of work lost"
    items = wait_for(browser, lambda d: drawn_timeline(d, QUEUE) or None, "its timeline")
    assert {item["jobId"] for item in items} == {vision_a}
    assert browser.find_element(By.CSS_SELECTOR, "[data-quota-page=task] #title").text == "Quota: vision-a"
    assert browser.find_elements(By.CSS_SELECTOR, "table.story + .utc-note, .utc-note")
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-task.png"))


def test_the_old_addresses_lead_to_the_page_in_airflows_ui(api_server: ApiServer) -> None:
    def location(path: str) -> str:
        response = requests.get(f"{api_server.url}{path}", allow_redirects=False, timeout=30)
        assert response.status_code in (302, 303, 307), response.text
        return str(response.headers["location"])

    assert location("/quota/") == "/plugin/gpu-quotas"
    assert location(f"/quota/shares/{QUEUE}/vision") == f"/plugin/gpu-quotas/shares/{QUEUE}/vision"
    assert (
        location("/quota/task-instance?dagId=train&runId=run-1&taskId=vision-a&mapIndex={MAP_INDEX}")
        == "/dags/train/runs/run-1/tasks/vision-a/plugin/quota"
    )
    assert (
        location("/quota/task-instance?dagId=train&runId=run%2F1&taskId=t&mapIndex=3")
        == "/dags/train/runs/run%2F1/tasks/t/mapped/3/plugin/quota"
    )


# The old page's checks (tests/ui/test_page.py before 101f1be), on the React page.

#: A quota share's page, read in one script run: its card (term, value), its jobs and decisions.
SHARE_PAGE = """
const page = document.querySelector("[data-quota-page]");
const card = page && page.querySelector(".share-card");
if (!card) return null;
const text = (node) => node.innerText.trim();
return {
  title: text(page.querySelector("#title")),
  card: [...card.querySelectorAll("dt")].map((term) => [text(term), text(term.nextElementSibling)]),
  jobs: [...page.querySelectorAll("table.jobs:not(.finished) tr[data-job]")].map((row) => row.dataset.job),
  shares: [...page.querySelectorAll("table.events tr[data-kind] > td:nth-child(3)")].map(text),
};
"""


def seed_requeued_story(api_server: ApiServer) -> tuple[Ledger, dict[str, str]]:
    """The story up to vision-a's requeue: research-b reclaimed research's GPU from it."""
    ledger, jobs = seed_story(api_server)
    jobs["research_b"] = ledger.submit("research-b", "research", 2)
    ledger.cycle()
    ledger.stopped(jobs["vision_a"])
    ledger.cycle()
    return ledger, jobs


def test_the_share_page_focuses_on_one_share(api_server: ApiServer, browser: WebDriver) -> None:
    _, jobs = seed_requeued_story(api_server)
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    console_errors(browser)
    browser.get(f"{api_server.url}{PAGE}/shares/{QUEUE}/vision")
    page = wait_for(browser, lambda d: d.execute_script(SHARE_PAGE), "the share's card")
    assert page["title"] == "GPU Quotas: vision"
    # Its card says what the REST API says of the share.
    (vision,) = [
        share
        for share in api(api_server, "/quotaShares", jobQueueName=QUEUE)["quotaShares"]
        if share["quotaShareName"] == "vision"
    ]
    (usage,) = vision["usage"]
    assert page["card"] == [
        ["Job queue", QUEUE],
        ["Strategy", "LEND_AND_BORROW"],
        ["Borrow limit", "100%"],
        ["In-share preemption", vision["preemptionConfiguration"]["inSharePreemption"]],
        ["State", "ENABLED"],
        [
            UNIT,
            f"limit {usage['limit']}, ceiling {usage['ceiling']}: {usage['used']} in use ({usage['own']} own,"
            f" {usage['borrowed']} borrowed), {usage['lent']} lent, {usage['idle']} idle;"
            f" {usage['running']} RUNNING, {usage['runnable']} RUNNABLE",
        ],
    ]
    assert (usage["limit"], usage["ceiling"], usage["used"], usage["runnable"]) == (2, 4, 0, 1)
    # Only its jobs, and only its decisions.
    assert page["jobs"] == [jobs["vision_a"]]
    assert page["shares"] and set(page["shares"]) == {"vision"}
    # Its timeline fades the other shares' bars (research and urgent hold the GPUs) and shows its waits alone.
    drawn = wait_for(browser, lambda d: drawn_timeline(d, QUEUE) or None, "the share's timeline")
    bars = [item for item in drawn if item["kind"] == "bar"]
    assert {item["share"] for item in bars if item["dim"]} == {"research", "urgent"}
    assert all(item["dim"] == (item["share"] != "vision") for item in bars)
    assert {(item["jobId"], item["dim"]) for item in drawn if item["kind"] == "wait"} == {
        (jobs["vision_a"], False)
    }
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-share.png"))
    assert console_errors(browser) == []


#: The decisions' rows, each its cells (at, decision, share, job, what happened).
DECISIONS = """
return [...document.querySelectorAll("[data-quota-page] table.events tr[data-kind]")].map(
  (row) => [...row.querySelectorAll(":scope > td")].map((cell) => cell.innerText.trim()));
"""


def decisions(driver: WebDriver, what: str, condition: Callable[[list[list[str]]], bool]) -> list[list[str]]:
    def check(d: WebDriver) -> list[list[str]] | None:
        rows: list[list[str]] = d.execute_script(DECISIONS)
        return rows if rows and condition(rows) else None

    result: list[list[str]] = wait_for(driver, check, what)
    return result


def choose(driver: WebDriver, name: str, value: str) -> None:
    """Pick ``value`` in the decisions' ``name`` filter (again if a refresh replaced the select meanwhile)."""

    def chosen(d: WebDriver) -> bool:
        select = Select(d.find_element(By.CSS_SELECTOR, f"select[name={name}]"))
        if select.first_selected_option.get_attribute("value") != value:
            select.select_by_value(value)
        return select.first_selected_option.get_attribute("value") == value

    wait_for(driver, chosen, f"the {name} filter set to {value!r}")


def test_recent_decisions_name_the_job_and_filter_by_kind_job_share_and_dag_run(
    api_server: ApiServer, browser: WebDriver
) -> None:
    ledger, jobs = seed_requeued_story(api_server)
    vision_a = jobs["vision_a"]
    # A job of another DAG run, in urgent: the DAG run and share filters tell it apart.
    eval_b = ledger.submit("eval-b", "urgent", 1, run_id="run-2")
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    console_errors(browser)
    browser.get(api_server.url + PAGE)
    decisions(browser, "eval-b's submission", lambda rows: any("eval-b" in row[3] for row in rows))
    choose(browser, "kind", "PREEMPTED")
    rows = decisions(browser, "only preemptions", lambda rows: {row[1] for row in rows} == {"PREEMPTED"})
    # Jobs of two runs of train are shown: each named with its run (said once: no run line under the name).
    assert [row[3] for row in rows] == ["train / vision-a (run run-1)"]
    # The filter stays through the page's refreshes.
    status = browser.find_element(By.ID, "status").text
    wait_for(browser, lambda d: d.find_element(By.ID, "status").text != status, "a refresh", seconds=15)
    assert {row[1] for row in browser.execute_script(DECISIONS)} == {"PREEMPTED"}
    choose(browser, "kind", "")
    choose(browser, "job", vision_a)
    rows = decisions(
        browser,
        "vision-a's decisions alone",
        lambda rows: len(rows) >= 4 and all(job_of(row) == "train / vision-a (run run-1)" for row in rows),
    )
    assert [row[1] for row in rows] == [
        event["kind"] for event in api(api_server, "/events", jobId=vision_a, limit=50)["events"][::-1]
    ]
    assert {row[1] for row in rows} >= {"SUBMITTED", "GRANTED", "PREEMPTED", "REQUEUED"}
    browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-decisions.png"))
    choose(browser, "job", "")
    # The share filter: urgent's decisions only, its two jobs' (of two DAG runs).
    choose(browser, "share", "urgent")
    rows = decisions(
        browser,
        "urgent's decisions",
        lambda rows: {row[2] for row in rows} == {"urgent"} and any("eval-b" in row[3] for row in rows),
    )
    assert {job_of(row) for row in rows} - {""} == {
        "train / urgent-a (run run-1)",
        "train / eval-b (run run-2)",
    }
    choose(browser, "share", "")
    # The DAG run filter: run-2's one decision, eval-b's submission.
    choose(browser, "run", "train / run-2")
    rows = decisions(browser, "run-2's decisions", lambda rows: len(rows) == 1)
    assert [(row[1], row[3]) for row in rows] == [("SUBMITTED", "train / eval-b (run run-2)")]
    assert eval_b == "train/run-2/eval-b/-1/1"
    choose(browser, "run", "")
    assert console_errors(browser) == []


def job_of(row: list[str]) -> str:
    """The job a decision's row names (its Job cell's first line)."""
    return row[3].split("\n")[0]


def end_the_session(driver: WebDriver) -> str:
    """Make the page's API answer 401 from now on (the session ended); the "log in again" link's address."""
    driver.execute_script(
        "window.fetch = async () => new Response('{}', {status: 401, statusText: 'Unauthorized'})"
    )
    return str(
        wait_for(
            driver,
            lambda d: d.find_element(By.CSS_SELECTOR, "[data-quota-page] #error a").get_attribute("href"),
            "the session-ended message",
        )
    )


def test_an_ended_session_says_so_with_a_link_to_log_in_again(
    api_server: ApiServer, browser: WebDriver
) -> None:
    seed_requeued_story(api_server)
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    for path, ready in (
        (PAGE, "[data-quota-page=queues] table.jobs tr[data-job]"),
        ("/dags/train/runs/run-1/tasks/vision-a/plugin/quota", "[data-quota-page=task] table.story tr"),
    ):
        browser.get(api_server.url + path)
        wait_for(browser, lambda d, ready=ready: d.find_element(By.CSS_SELECTOR, ready), f"{path} drawn")
        here = browser.current_url
        # Airflow's own login, which comes back here (what Airflow's UI does on a 401).
        link = end_the_session(browser)
        assert "Your session has ended" in browser.find_element(By.ID, "error").text
        assert link == f"{api_server.url}/api/v2/auth/login?" + urlencode({"next": here})
        click(browser, "[data-quota-page] #error a", "log in again")
        wait_for(browser, lambda d: d.find_element(By.NAME, "username"), "the login form")
        assert "/auth/login" in browser.current_url and "next=" in browser.current_url


def test_the_page_shows_a_page_of_jobs_with_a_long_history(api_server: ApiServer, browser: WebDriver) -> None:
    """20,000 jobs, 1,001 of them waiting: it lists the newest 1000 waiting, says so, and 10 finished; its
    timeline draws the newest 500 jobs of its window, and says so."""
    ledger = Ledger(api_server.engine)
    ledger.empty()
    ledger.apply()
    rows = list(finished_jobs(20_000))
    for row in rows[-1001:]:
        row |= {"status": "RUNNABLE", "status_reason": "Waiting for capacity"}
    with api_server.engine.begin() as connection:
        connection.execute(sa.insert(JobRow), rows)
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    console_errors(browser)
    browser.get(api_server.url + PAGE)
    page = showing(browser, "the jobs", lambda page: (len(page["jobs"]), len(page["finished"])) == (1000, 10))
    order = list(page["jobs"])  # in the page's order
    assert order[0] == rows[-1000]["job_id"] and order[999] == rows[-1]["job_id"]
    assert "The newest 1000 of 1001 unfinished jobs" in browser.find_element(By.ID, "jobs-cut").text
    notice = wait_for(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, f'.timeline-truncated[data-queue="{QUEUE}"]').text,
        "the timeline's notice that it left jobs out",
    )
    assert notice.startswith("Only the newest 500 jobs of this window are drawn: older jobs"), notice
    assert f"/quota/api/jobQueues/{QUEUE}/timeline?since=...&until=..." in notice
    assert console_errors(browser) == []


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def last_15_minutes_cross_midnight() -> bool:
    """Whether the page's "last 15 minutes" window begins on the day before (UTC): it then dates every
    moment (format.ts, ``timeTextFor``)."""
    now = datetime.now(UTC)
    return (now - timedelta(minutes=15)).date() != now.date()


def test_a_job_running_for_days_says_on_which_day_it_started_in_its_tooltip(
    api_server: ApiServer, browser: WebDriver
) -> None:
    """A job running for two days: its tooltip gives the date it started (UTC), on the "since the first job"
    window and on the last 15 minutes (whose bar is clipped, not its story); a job granted a minute ago gives
    its clock time alone."""
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
    hold_session(browser, api_server.url, "viewer", PASSWORDS["viewer"])
    console_errors(browser)
    browser.get(api_server.url + PAGE)

    def when(job_id: str) -> Callable[[WebDriver], str | None]:
        """Hover the job's bar; its tooltip's When line."""

        def hovered(d: WebDriver) -> str | None:
            bar = next(
                (
                    item
                    for item in drawn_timeline(d, QUEUE)
                    if item["jobId"] == job_id and item["kind"] == "bar"
                ),
                None,
            )
            if bar is None:
                return None
            hover = ActionBuilder(d)
            hover.pointer_action.move_to_location(int(bar["x"]), int(bar["y"]))
            hover.perform()
            for tip in d.find_elements(By.CSS_SELECTOR, ".tl-tip"):
                lines = tip.text.split("\n")
                if lines[0] == bar["label"]:
                    return next((line[4:].strip() for line in lines if line.startswith("When")), None)
            return None

        return hovered

    day = f"{MONTHS[started.month - 1]} {started.day} "
    try:
        pick_window(browser, "all")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".timeline-chart"), "the timeline")
        browser.execute_script("document.querySelector('.timeline-chart').scrollIntoView()")
        shown = wait_for(browser, when(long_job), "the long job's tooltip")
        assert shown.startswith(day) and shown.endswith("now (48.0 h)"), shown
        browser.save_screenshot(str(ARTIFACTS / "gpu-quotas-react-timeline-days.png"))
        pick_window(browser, "15m")
        shown = wait_for(browser, when(long_job), "the long job's tooltip on the last 15 minutes")
        assert shown.startswith(day) and shown.endswith("now (48.0 h)"), shown
        crossed_before = last_15_minutes_cross_midnight()
        recent = wait_for(browser, when(recent_job), "the recent job's tooltip")
        crossed_after = last_15_minutes_cross_midnight()
        # Its clock alone, unless the 15 minutes began on the day before (00:00 to 00:15 UTC): then the day
        # too. Either is right when midnight's edge passed while the page was read.
        dated = recent.startswith(f"{MONTHS[ledger.now.month - 1]} {ledger.now.day} ")
        assert dated or recent[0].isdigit(), recent
        assert " s)" in recent, recent
        if crossed_before == crossed_after:
            assert dated == crossed_before, (recent, crossed_before)
    finally:
        browser.execute_script("localStorage.removeItem('quota-timeline-window')")
    assert console_errors(browser) == []
