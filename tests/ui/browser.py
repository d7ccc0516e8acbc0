"""Headless Debian chromium (through selenium) for the tests that look at the GPU Quotas page, and what the
page's GPU timeline draws. Used by tests/ui and by the demo's end-to-end test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tests.once_a_session import once_a_session

T = TypeVar("T")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
#: Skips a test without chromium, saying why; under CI (CI=true) they must be there: ``chromium`` fails.
NEEDS_CHROMIUM = pytest.mark.skipif(
    (CHROMIUM is None or CHROMEDRIVER is None) and os.environ.get("CI") != "true",
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless chromium, 1500 x 1200, that keeps its console log (``console_errors``)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.fail("chromium and chromedriver are missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1200"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


#: This worker's chromium for the pages of tests/ui's SQLite api-server (``worker_chromium``).
_WORKER_CHROMIUM = pytest.StashKey[WebDriver]()


def worker_chromium(session: pytest.Session) -> WebDriver:
    """This worker's one chromium for the pages of tests/ui's SQLite api-server, started by the first module
    that asks, quit at the session's end: tests/ui/test_react_page.py's and
    tests/aws_batch/test_rest_on_aws_queues.py's, which run on one worker (``ONE_WORKER_FILES``) and so start
    one chromium and log in once (``hold_session``). Each module ``park``s it when it is done with it."""
    return once_a_session(session, _WORKER_CHROMIUM, chromium)


def park(driver: WebDriver) -> None:
    """Leave the page for the api-server's health answer, on the same site: an Airflow page left open goes on
    asking its API (about 2.6 CPU-s a minute), and there the browser still holds the session's cookies for
    the next ``hold_session``."""
    site = urlsplit(driver.current_url)
    if site.scheme in ("http", "https"):
        driver.get(f"{site.scheme}://{site.netloc}/api/v2/monitor/health")
    else:
        driver.get("about:blank")


def text(driver: WebDriver) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").text)


def wait_for(driver: WebDriver, condition: Callable[[WebDriver], T], what: str, seconds: float = 25) -> T:
    """Wait for ``condition`` (the page refreshes itself every 5 s); fail saying what never appeared."""
    try:
        wait = WebDriverWait(
            driver,
            seconds,
            poll_frequency=0.25,
            ignored_exceptions=(StaleElementReferenceException, KeyError),
        )
        return wait.until(condition)
    except TimeoutException:
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "gpu-quotas-failure.png"))
        pytest.fail(f"{what} did not appear within {seconds} s; page text:\n{text(driver)[:3000]}")


def click(driver: WebDriver, selector: str, what: str) -> None:
    """Find ``selector`` and click it, again if the page's refresh replaced the element in between."""

    def clicked(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, selector).click()
        return True

    wait_for(driver, clicked, what)


def log_in(driver: WebDriver, base_url: str, path: str, user: str, password: str) -> None:
    """Open ``path`` without a session: Airflow's login page comes first, then the page itself."""
    driver.delete_all_cookies()  # the current page's site's cookies: before leaving it
    # Then leave the last test's page: an Airflow page still open polls its API, and once the cookies are
    # gone it sends itself to the login page with next=<its own address>, racing this test's own login (CI
    # once logged in and landed back on the last test's task instance page).
    driver.get("about:blank")
    driver.get(base_url + path)
    username = wait_for(driver, lambda d: d.find_element(By.NAME, "username"), "the login form")
    assert "/auth/login" in driver.current_url
    username.send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # Back at ``path``, or where it redirects: the page's old addresses (/quota/, /quota/task-instance?...)
    # lead to its routes in Airflow's UI (/plugin/gpu-quotas, .../plugin/quota).
    wait_for(
        driver,
        lambda d: (
            d.current_url == base_url + path
            or (
                d.current_url.startswith(base_url)
                and "/auth/login" not in d.current_url
                and path.startswith("/quota/")
            )
        ),
        f"the redirect back to {path}",
    )


#: Each browser's last log-in (by its WebDriver session): the server, the user and the cookies it was given.
_logged_in: dict[str, tuple[str, str, dict[str, str]]] = {}


def hold_session(driver: WebDriver, base_url: str, user: str, password: str) -> None:
    """Make sure this browser holds ``user``'s session on ``base_url``: ``log_in`` (landing on Airflow's home
    page) unless it still holds the session its last ``log_in`` there gave that user (the same cookies, read
    on the page it is on). Airflow's login and home page cost the browser and the api-server more than the
    quota page itself: a module's tests log in once. The caller opens its page next."""
    cookies = _cookies(driver)
    if cookies and _logged_in.get(driver.session_id) == (base_url, user, cookies):
        return
    log_in(driver, base_url, "/", user, password)
    _logged_in[driver.session_id] = (base_url, user, _cookies(driver))


def _cookies(driver: WebDriver) -> dict[str, str]:
    """The cookies of the site the browser is on, by name."""
    return {cookie["name"]: cookie["value"] for cookie in driver.get_cookies()}


def drawn_timeline(driver: WebDriver, queue: str) -> list[dict[str, Any]]:
    """What the job queue's GPU timeline draws (QuotaTimeline.drawn), one entry per bar or wait: its job,
    kind (bar or wait), phase (RUNNING, STOPPING, WAITING), lane, borrowed, preemptor, start and end (ms), and
    where it is on the screen (x, y)."""
    items: list[dict[str, Any]] = driver.execute_script(
        "return QuotaTimeline.drawn(document.querySelector(`.timeline[data-queue='${arguments[0]}']`))", queue
    )
    return items


def pick_window(driver: WebDriver, window: str) -> None:
    """Click the timeline's window button (15m, 1h, 1d, all) and wait until the page has redrawn with it."""
    picker = f"button[data-window='{window}']"
    wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, picker), "the window picker").click()
    wait_for(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, picker).get_attribute("aria-pressed") == "true",
        f"the timeline's {window} window",
    )


def console_errors(driver: WebDriver) -> list[str]:
    """The browser console's errors since the last call (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
