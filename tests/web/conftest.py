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
from playwright.sync_api import Browser, BrowserContext, sync_playwright

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

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "PERFLOOP_HOME": str(home), **(env or {})}
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
        m = re.search(r"(http://\S+?:\d+)/(\?token=(\S+))?", line)
        assert m, f"perfloop serve printed no address: {line!r}"
        self.url, self.token = m.group(1), m.group(3)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


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
