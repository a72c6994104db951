"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per test session (per
xdist worker), reused by every test; each test gets its own page and its kernels are shut down after it.

Chromium is Debian's (``/usr/bin/chromium``, or the path in ``MHA_CHROMIUM``) driven by Python Playwright;
Playwright's own browser downloads are never used. Without Chromium or Playwright the tests skip with the reason;
``MHA_REQUIRE_BROWSER=1`` (set by ``.ci/run``) turns that skip into a failure.

On a failure the test's screenshot, the browser console and the server log are kept in
``build/browser-failures/<test>/``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from labserver import FAILURES, LabServer

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def _required():
    return os.environ.get("MHA_REQUIRE_BROWSER", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason):
    if _required():
        pytest.fail(f"{reason}; MHA_REQUIRE_BROWSER is set, so a missing browser is a failure, not a skip",
                    pytrace=False)
    pytest.skip(f"{reason} (install Debian's chromium and `pip install playwright`; set MHA_REQUIRE_BROWSER=1 "
                "to make this a failure)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def chromium_path():
    path = os.environ.get("MHA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        _unavailable(f"no Chromium at {path}")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the Python package playwright is not installed")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        # Playwright gives every launch a fresh, temporary --user-data-dir of its own.
        b = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001  a broken Chromium is the same as none
        pw.stop()
        _unavailable(f"Chromium at {chromium_path} does not start under Playwright: {exc}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="session")
def lab_home(tmp_path_factory):
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="session")
def lab_server(browser, lab_home):
    """One JupyterLab for the whole session, serving an empty folder the tests fill with notebooks."""
    root = lab_home / "root"
    root.mkdir()
    server = LabServer.start(root, lab_home / "home")
    yield server
    server.stop()


def _safe(nodeid):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1]).strip("_")[:120]


def keep_failure(request, page, server, console):
    """Screenshot, console and server log of a failed test, under build/browser-failures/<test>/."""
    folder = FAILURES / _safe(request.node.nodeid)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=str(folder / "screenshot.png"))
    except Exception as exc:  # noqa: BLE001  the page may be gone; keep the rest
        (folder / "screenshot-failed.txt").write_text(str(exc))
    (folder / "console.log").write_text("\n".join(console), encoding="utf-8")
    if server is not None and server.log.exists():
        shutil.copy(server.log, folder / "server.log")
    return folder


@pytest.fixture(scope="session")
def contexts(browser):
    """One browser context per server for the session: its HTTP cache spares reloading JupyterLab's scripts
    for every test. Each test still gets its own page and its own kernels."""
    made = {}
    yield made
    for context in made.values():
        context.close()


@pytest.fixture
def new_page(request, contexts, browser):
    """``new_page(server)`` opens a page on ``server``; on failure its evidence is kept."""
    opened = []

    def open_page(server):
        if server.url not in contexts:
            contexts[server.url] = browser.new_context(viewport={"width": 1400, "height": 1000})
            contexts[server.url].set_default_timeout(30_000)
        page = contexts[server.url].new_page()
        console = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        opened.append((page, server, console))
        return page

    yield open_page
    failed = any(getattr(getattr(request.node, f"report_{when}", None), "failed", False)
                 for when in ("setup", "call"))
    for page, server, console in opened:
        if failed:
            folder = keep_failure(request, page, server, console)
            print(f"browser failure evidence kept in {folder}")
        page.close()
        if server is not None:
            server.shutdown_kernels()

