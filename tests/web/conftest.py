"""Browser tests: Debian's chromium driven by Playwright (its own browser download is never used),
a real `perfloop serve` process, and screenshots kept under test-artifacts/web/ for a person to
look at."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.e2e.conftest import PERFLOOP, ROOT

CHROMIUM = Path(os.environ.get("PERFLOOP_TEST_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Two more names for this machine, as DNS rebinding makes them: an attacker's page at
    # http://rebind.test:PORT resolves to the server it attacks (tests/web/test_attacks.py).
    "--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP attacker.test 127.0.0.1",
    # Chromium's own Local Network Access checks would stop such a page before it reaches the
    # server; off, as in browsers without them, so the tests see what the server itself refuses.
    "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks",
]
ARTIFACTS = ROOT / "test-artifacts" / "web"
DEMO_RECORDING = ROOT / "tests" / "data" / "sessions" / "demo-session.json.gz"


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make system-deps` installs Debian's chromium"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    yield ctx
    ctx.close()


def shot(page, name: str) -> Path:
    """Save a full-page screenshot as a test artifact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


class Served:
    """A running `perfloop serve` on a free port."""

    def __init__(self, home: Path, *args: str, token: str | None = None) -> None:
        """`token`: given as $PERFLOOP_SERVE_TOKEN (else the server makes one and prints it)."""
        env = {**os.environ, "PERFLOOP_HOME": str(home)}
        env.pop("PERFLOOP_SERVE_TOKEN", None)
        if token is not None:
            env["PERFLOOP_SERVE_TOKEN"] = token
        self.proc = subprocess.Popen(
            [str(PERFLOOP), "serve", "--port", "0", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=home,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"(http://\S+?:\d+)/(#token=(\S+))?", line)
        assert m, f"perfloop serve printed no address: {line!r}"
        self.url, self.token = m.group(1), m.group(3) or token
        self.port = int(self.url.rsplit(":", 1)[1])

    def open(self, context: BrowserContext, path: str) -> Page:
        """A page at `path`, signed in as a person is: the printed address's `#token=` fragment
        (the sign-in shell keeps it in sessionStorage, drops it from the address and fetches the
        page with it as a header)."""
        page = context.new_page()
        page.goto(f"{self.url}{path}#token={self.token}")
        signed_in(page)
        assert page.url == self.url + path, page.url
        return page

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def signed_in(page: Page) -> None:
    """Wait until the sign-in shell has written the page it fetched in its place."""
    page.wait_for_function("() => !document.getElementById('perfloop-shell')", timeout=60_000)


@pytest.fixture(scope="module")
def recorded_home(tmp_path_factory) -> tuple[Path, str]:
    """A $PERFLOOP_HOME holding the shipped demo recording, imported (no checkpoints)."""
    home = tmp_path_factory.mktemp("recorded") / "home"
    out = subprocess.run(
        [str(PERFLOOP), "import", str(DEMO_RECORDING)],
        env={**os.environ, "PERFLOOP_HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
    )
    sid = re.search(r"imported session (\S+);", out.stdout.replace("\n", " "))
    assert sid, out.stdout
    return home, sid.group(1)
