"""The setup page in a real browser: headless Chromium (Debian's package) driven by Selenium.

A ``notes_setup`` round 1 over HTTP gives the link; Chromium opens it, signs in with alice's
token, enters the report service's credential and submits; the tool's retry on the other node
then answers ``configured: true``. Nothing is downloaded: the browser and its driver are the
system's (``/usr/bin/chromium``, ``/usr/bin/chromedriver``; ``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from nodes import http
from nodes.auth import TokenTable
from nodes.serving.demo import DEMO_TOKENS
from store.client_factory import redis_client
from store.notes import NoteStore
from tests import test_setup_url as setup
from tests.ci import in_ci
from tests.harness import make_nodes

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TOKENS = TokenTable.from_plain(DEMO_TOKENS)
WAIT_S = 20


def require_browser() -> None:
    if shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER):
        return
    if in_ci():
        pytest.fail("CI needs chromium and chromium-driver (apt-get install)")
    pytest.skip("chromium or chromedriver is not installed")


@pytest.fixture
async def served(embedded_url: str, nursery: trio.Nursery) -> AsyncIterator[setup.Served]:
    require_browser()
    client = redis_client(embedded_url)
    async with client:
        store = NoteStore(client, prefix="ncbrowser" + os.urandom(4).hex())
        nodes = make_nodes(store, 2)
        urls = [await nursery.start(partial(http.serve_node, node, TOKENS)) for node in nodes]
        async with httpx.AsyncClient(timeout=10) as http_client:
            yield setup.Served(nodes, urls, http_client)


def complete_in_browser(url: str, profile: Path, screenshot: Path) -> dict[str, object]:
    """Open ``url`` in headless Chromium, sign in, complete the form; return the cookie."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        wait = WebDriverWait(driver, WAIT_S)
        driver.get(url)
        assert driver.find_element(By.TAG_NAME, "h1").text == "Sign in"
        driver.find_element(By.NAME, "token").send_keys(setup.ALICE)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        field = wait.until(ec.presence_of_element_located((By.NAME, "api_key")))
        (cookie,) = driver.get_cookies()
        field.send_keys(setup.SECRET)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), "connected"))
        driver.save_screenshot(str(screenshot))
        assert setup.SECRET not in driver.page_source
        return dict(cookie)
    finally:
        driver.quit()


async def test_a_person_completes_the_setup_in_a_headless_browser(
    served: setup.Served, tmp_path: Path
) -> None:
    first = await setup.mcp(served, 0, {"name": setup.SETUP, "arguments": setup.ARGS}, 1)
    url = first["inputRequests"][setup.KEY]["params"]["url"]
    retry = {
        "name": setup.SETUP,
        "arguments": setup.ARGS,
        "requestState": first["requestState"],
        "inputResponses": {setup.KEY: {"action": "accept"}},
    }
    pending = await setup.mcp(served, 1, dict(retry), 2)
    assert pending["resultType"] == "input_required", "not completed before the browser"

    cookie = await trio.to_thread.run_sync(
        complete_in_browser, url, tmp_path / "profile", tmp_path / "done.png"
    )
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/setup/"

    final = await setup.mcp(served, 1, dict(retry), 3)
    assert final["resultType"] == "complete"
    assert final["structuredContent"] == {"configured": True}
