"""`perfloop report` of the shipped demo recording (imported: no checkpoints) in a real browser:
it renders offline, its plots are in the DOM, and the browser fetches nothing but the file."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext

from agent.sessions.runner import Sessions
from tests.e2e.conftest import PERFLOOP
from tests.web.conftest import DEMO_RECORDING, Served, shot

PLOTS = ("plot-tpot", "plot-dist", "plot-ops-1", "plot-timeline")


def requests_of(context: BrowserContext) -> list[str]:
    """Every URL the browser asks for; anything not file:// is refused (no network)."""
    seen: list[str] = []
    context.on("request", lambda r: seen.append(r.url))
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(("file:", "http://127.0.0.1"))
            else route.abort()
        ),
    )
    return seen


def test_report_of_an_imported_recording_renders_offline_with_its_plots(
    tmp_path: Path, recorded_home: tuple[Path, str], context: BrowserContext
) -> None:
    home, sid = recorded_home
    out = tmp_path / "report.html"
    made = subprocess.run(
        [str(PERFLOOP), "report", sid, "-o", str(out)],
        env={**os.environ, "PERFLOOP_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    assert 20_000 < out.stat().st_size < 1_000_000  # self-contained, and a sensible size
    seen = requests_of(context)
    page = context.new_page()
    page.goto(out.as_uri())
    assert seen == [out.as_uri()], f"the report fetched more than itself: {seen}"
    for fid in PLOTS:
        svg = page.locator(f"#{fid} svg")
        assert svg.count() == 1, f"plot {fid} missing"
        box = svg.bounding_box()
        assert box is not None and box["width"] > 300  # drawn, not empty
    assert "baseline" in (page.locator("#plot-tpot svg").text_content() or "")  # axis text kept as text
    assert "aten::copy_" in (page.locator("#plot-ops-1 svg").text_content() or "")
    summary = Sessions(home).info(sid).summary  # the stored summary's speedup, not a copied number
    assert summary is not None and summary.speedup is not None and summary.speedup > 3
    assert f"{summary.speedup:.2f}x" in page.locator("#summary").inner_text()
    proposal = page.locator("#proposal-1")
    assert "kv-cache-full-pool-cast" in proposal.inner_text() and "accepted" in proposal.inner_text()
    assert proposal.locator(".diff .gi").count() >= 4  # added lines, highlighted by Pygments
    assert proposal.locator("table.evidence").inner_text().count("aten::") >= 1
    assert page.locator("#transitions tr").count() == 18  # header + the 17 transitions replayed
    shot(page, "report-demo-recording")


def test_missing_session_and_unwritable_output_are_one_line_errors(
    tmp_path: Path, recorded_home: tuple[Path, str]
) -> None:
    home, sid = recorded_home
    env = {**os.environ, "PERFLOOP_HOME": str(home)}
    nope = subprocess.run([str(PERFLOOP), "report", "nope-1"], env=env, capture_output=True, text=True)
    assert nope.returncode == 2 and nope.stderr.count("\n") == 1 and "no session 'nope-1'" in nope.stderr
    bad = subprocess.run(
        [str(PERFLOOP), "report", sid, "-o", str(tmp_path / "no" / "dir" / "r.html")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--output: cannot write" in bad.stderr, bad.stderr


def test_served_pages_list_the_session_and_fetch_nothing_outside(
    recorded_home: tuple[Path, str], context: BrowserContext
) -> None:
    home, sid = recorded_home
    served = Served(home)
    try:
        seen = requests_of(context)
        page = served.open(context, "/")
        assert page.locator(f"#sessions a[href='/sessions/{sid}']").count() == 1
        page.click(f"#sessions a[href='/sessions/{sid}']")
        page.wait_for_selector("#plot-tpot svg")
        assert page.locator("#status").inner_text() == "done"
        # the page follows the session: it polls its state (every 1.5 s; waited for, with a bound)
        with page.expect_request(lambda r: r.url == f"{served.url}/api/sessions/{sid}", timeout=15_000):
            pass
        assert all(u.startswith(served.url) for u in seen), seen
        outside = page.request.get(
            served.url + f"/sessions/{sid}/files/..%2F..%2Fsessions.sqlite", headers=served.bearer()
        )
        assert outside.status == 404
        shot(page, "serve-session-done")
    finally:
        served.stop()


def test_a_label_with_dollar_signs_renders_in_the_report_and_on_the_page(
    tmp_path: Path, context: BrowserContext
) -> None:
    """matplotlib would read `$...$` as TeX (and `\\nosuchcmd` makes it raise): an op renamed so in
    the demo recording is drawn as written, in `perfloop report` and on the served page."""
    label = "kernel$\\nosuchcmd$x"
    text = gzip.decompress(DEMO_RECORDING.read_bytes()).decode()
    assert text.count('"aten::mm"') > 2
    recording = tmp_path / "dollar.json.gz"
    recording.write_bytes(gzip.compress(text.replace('"aten::mm"', json.dumps(label)).encode()))
    home = tmp_path / "home"
    env = {**os.environ, "PERFLOOP_HOME": str(home)}
    imported = subprocess.run(
        [str(PERFLOOP), "import", str(recording)], env=env, capture_output=True, text=True, check=True
    )
    sid = imported.stdout.split("imported session ")[1].split(";")[0]
    out = tmp_path / "report.html"
    made = subprocess.run(
        [str(PERFLOOP), "report", sid, "-o", str(out)], env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    page = context.new_page()
    page.goto(out.as_uri())
    assert label in (page.locator("#plot-ops-1 svg").text_content() or "")
    assert "mathdefault" not in page.content()  # no axis left in math text either
    served = Served(home)
    try:
        page = served.open(context, f"/sessions/{sid}")
        assert label in (page.locator("#plot-ops-1 svg").text_content() or "")
        assert label in page.locator("#transitions").inner_text()  # escaped text, as written
    finally:
        served.stop()


def test_serve_takes_its_token_from_perfloop_serve_token(recorded_home: tuple[Path, str]) -> None:
    """`$PERFLOOP_SERVE_TOKEN` is the token: printed with the address, every request without it
    refused."""
    home, sid = recorded_home
    token = "t0ken-" + os.urandom(8).hex()
    served = Served(home, token=token)
    try:
        assert served.token == token
        api = f"{served.url}/api/sessions/{sid}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(api, timeout=30)
        assert refused.value.code == 401
        asked = urllib.request.Request(api, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(asked, timeout=30) as ok:
            assert ok.status == 200 and json.loads(ok.read())["status"] == "done"
    finally:
        served.stop()
