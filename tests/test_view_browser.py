"""``arena view`` in a real browser: Debian's chromium driven by Selenium through the system
chromium-driver (no browser download). Real runs of the ``reference`` and ``random`` policies through the
real eval runner fill the store; ``arena view`` serves it as a subprocess; the test clicks from the runs
page into a run and an episode, checks that the tool call and the verdict are visible, that a tool result
holding ``<script>`` is shown as text and never runs, and that no page loads anything from elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import ray
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from arena.cli.main import main
from arena.rollout.records import ToolCallRecord
from arena.store import Database, RunStore
from arena.view.app import episode_url
from tests.needs import free_port, missing

pytestmark = pytest.mark.slow

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
XSS = "<script>document.title='pwned';window.pwned=1</script>"
ROOT = Path(__file__).resolve().parents[1]


def _require_browser() -> None:
    if not (CHROMIUM and DRIVER):
        missing(
            "Debian's chromium and chromium-driver are not installed (infra/test.sh installs them as root)"
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """A store with real runs of the reference and random policies, and a copy of one real episode whose
    tool result holds a script (run ``xss``)."""
    _require_browser()
    home = tmp_path_factory.mktemp("view-home")
    url = f"sqlite:///{home / 'arena.db'}"
    previous = os.environ.get("ARENA_HOME")
    os.environ["ARENA_HOME"] = str(home)
    started_ray = not ray.is_initialized()
    try:
        args = ["eval", "--multirun", "policy=reference,random", "suite.envs=[library]", "tasks_per_env=2"]
        assert main([*args, f"store.url={url}"]) == 0
    finally:
        if started_ray:
            ray.shutdown()
        if previous is None:
            os.environ.pop("ARENA_HOME")
        else:
            os.environ["ARENA_HOME"] = previous
    db = Database(url)
    try:
        runs = RunStore(db)
        run_ids = [r.id for r in runs.list()]
        real = next(e for e in runs.episode_records(run_ids[0]) if e.tool_calls)
        first = real.turns[0]
        poisoned = replace(
            first, tool_calls=[ToolCallRecord("x1", first.tool_calls[0].name, {"q": XSS}, {"note": XSS})]
        )
        runs.start("xss", policy="reference", suite="core", config={}, git_revision=None, planned=1)
        runs.record("xss", replace(real, turns=[poisoned, *real.turns[1:]]), "education")
        runs.finish("xss", "finished", {})
    finally:
        db.close()
    yield url, run_ids


@pytest.fixture(scope="module")
def server(store: tuple[str, list[str]]) -> Iterator[str]:
    url, _runs = store
    port = free_port()
    command = [sys.executable, "-m", "arena.cli.main", "view", "--port", str(port), f"store.url={url}"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            try:
                httpx.get(f"{base}/static/view.css", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "arena view did not answer within 60 s"
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        out, _err = process.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/" in out


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    _require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def _resources(driver: WebDriver) -> list[str]:
    return list(driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"))


def test_click_from_runs_to_an_episode_and_see_the_call_and_verdict(
    server: str, store: tuple[str, list[str]], browser: WebDriver, tmp_path: Path
) -> None:
    driver = browser
    _url, run_ids = store
    reference = next(r for r in run_ids if r.startswith("reference"))
    driver.get(server + "/")
    driver.save_screenshot(str(tmp_path / "runs.png"))
    driver.find_element(By.LINK_TEXT, reference).click()
    assert driver.find_element(By.TAG_NAME, "h1").text == reference
    driver.save_screenshot(str(tmp_path / "run.png"))
    driver.find_element(By.CSS_SELECTOR, "table.episodes tbody tr td.id a").click()
    calls = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .tool-name")
    assert calls and all(call.is_displayed() and call.text for call in calls)
    results = driver.find_elements(By.CSS_SELECTOR, "details.result pre")
    assert results and results[0].is_displayed() and results[0].text.strip().startswith(("{", "["))
    verdict = driver.find_element(By.ID, "verdict")
    assert (
        verdict.is_displayed()
        and "Verdict: passed" in verdict.text
        and "failure mode: solved" in verdict.text
    )
    driver.save_screenshot(str(tmp_path / "episode.png"))
    assert all(name.startswith(server) for name in _resources(driver))
    assert "Not recorded" not in driver.page_source  # the real runner stored the episode's state diff
    assert (tmp_path / "episode.png").stat().st_size > 10_000


def test_a_script_in_a_tool_result_is_shown_as_text_and_never_runs(
    server: str, store: tuple[str, list[str]], browser: WebDriver, tmp_path: Path
) -> None:
    driver = browser
    db = Database(store[0])
    try:
        episode = RunStore(db).episodes("xss")[0]
    finally:
        db.close()
    driver.get(server + episode_url("xss", episode.task_id, episode.repeat))
    result = driver.find_element(By.CSS_SELECTOR, "details.result pre")
    assert json.loads(result.text) == {"note": XSS}
    assert XSS in driver.find_element(By.CSS_SELECTOR, ".msg.assistant pre.args").text
    assert driver.title != "pwned" and driver.execute_script("return window.pwned") is None
    driver.save_screenshot(str(tmp_path / "xss.png"))


def test_a_missing_episode_is_a_404_page_in_the_browser(server: str, browser: WebDriver) -> None:
    browser.get(server + "/runs/no-such-run")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not found"
    assert "no run 'no-such-run' in the store" in browser.find_element(By.CSS_SELECTOR, ".error").text
