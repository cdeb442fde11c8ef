"""The approval page of `perfloop serve` in a real browser, on a CPU demo session paused for manual
approval: an edited bad patch is refused with nothing applied, a reject needs a reason, two tabs
approving at once get one approval and one 409, the session then finishes accepted in the
background; a forked session is rejected with a reason; a non-loopback bind needs its token."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

from tests.e2e.conftest import git, last_json, make_repo, perfloop, write_target
from tests.procs import processes_in
from tests.web.conftest import Served, shot, signed_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
FINISH_S = 300


class Paused:
    def __init__(self, home: Path, repo: Path, sid: str, served: Served) -> None:
        self.home, self.repo, self.sid, self.served = home, repo, sid, served
        self.hold = held_launches(repo)

    @property
    def page_url(self) -> str:
        return f"{self.served.url}/sessions/{self.sid}"

    def answers(self, sid: str | None = None) -> list[dict]:
        return SessionStore(self.home / "sessions.sqlite").inputs(sid or self.sid, "answer")


@pytest.fixture(scope="module")
def paused(tmp_path_factory) -> Iterator[Paused]:
    """One CPU demo session that waits for approval, and `perfloop serve` on its home."""
    root = tmp_path_factory.mktemp("approval")
    home, repo = root / "home", make_repo(root / "engine")
    held_launches(repo)
    target = write_target(root / "t.toml", repo, looks=1)
    run = perfloop(home, "run", str(target), "--approve", "manual", "--json", "--max-iterations", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    state = last_json(run)
    assert state["status"] == "paused"
    served = Served(home)
    try:
        yield Paused(home, repo, state["session"], served)
    finally:
        served.stop()
        for pid in processes_in(root):
            os.kill(pid, 9)


def held_launches(repo: Path) -> Path:
    """Make the engine's start wait while the returned file exists, as a real one loading weights
    takes a while: the demo server starts in about a second, shorter than the page's poll, so the
    relaunch's progress line would come and go unseen; a test holds it until the page showed it."""
    hold = repo.parent / "hold-launch"
    launch = repo / "launch.sh"
    if f'"{hold}"' not in launch.read_text():
        text = launch.read_text().replace("exec ", f'while [ -e "{hold}" ]; do sleep 0.1; done\nexec ', 1)
        assert text != launch.read_text()
        launch.write_text(text)
        git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "waits to load")
    return hold


def open_session(context: BrowserContext, p: Paused) -> Page:
    page = p.served.open(context, f"/sessions/{p.sid}")
    page.wait_for_selector("#approval")
    return page


def test_edit_with_a_bad_patch_shows_the_error_and_applies_nothing(
    context: BrowserContext, paused: Paused
) -> None:
    head = git(paused.repo, "rev-parse", "HEAD")
    status = git(paused.repo, "status", "--porcelain")
    page = open_session(context, paused)
    assert page.locator("#pending-diff .diff .gi").count() >= 4  # the proposed diff, highlighted
    assert "aten::copy_" in page.locator("#approval table.evidence").inner_text()
    page.click("#edit-panel summary")
    page.fill("#patch", "this is not a patch\n")
    page.click("#edit")
    page.wait_for_selector("#error")
    error = page.locator("#error").inner_text()
    assert error.startswith("--patch ") and "edit-0.diff" in error, error
    shot(page, "serve-edit-refused")
    assert git(paused.repo, "rev-parse", "HEAD") == head
    assert git(paused.repo, "status", "--porcelain") == status
    assert paused.answers() == []
    assert page.locator("#approve").count() == 1  # still waiting, the buttons still there
    href = page.locator("#traces a").first.get_attribute("href")  # the profile's trace, served
    assert href is not None and href.startswith(f"/sessions/{paused.sid}/files/")
    trace = page.request.get(paused.served.url + href, headers=paused.served.bearer())
    assert trace.status == 200 and trace.body()[:2] == b"\x1f\x8b"  # the .json.gz itself


def test_reject_needs_a_reason(context: BrowserContext, paused: Paused) -> None:
    page = open_session(context, paused)
    page.click("#reject")
    page.wait_for_selector("#error")
    assert "a reason is required" in page.locator("#error").inner_text()
    assert paused.answers() == []


ATTACK = """<!doctype html><html><body><script>
window.result = (async () => {
  const out = {};
  try { const r = await fetch("/sessions/SID"); out.read = [r.status, (await r.text()).includes("csrf")]; }
  catch (e) { out.read = String(e); }
  try {
    const body = new URLSearchParams({number: "0", csrf: "guessed", patch: "x"});
    out.post = (await fetch("/sessions/SID/edit", {method: "POST", body})).status;
  } catch (e) { out.post = String(e); }
  return out;
})();
</script></body></html>"""


def test_a_rebinding_page_can_neither_read_nor_answer_and_the_page_cannot_be_framed(
    context: BrowserContext, paused: Paused
) -> None:
    """The victim is signed in. A page at http://rebind.test:PORT, a name that resolves to this
    server (the browser's host rules, as DNS rebinding makes it), fetches the session page and
    posts an answer same-origin: both refused on the Host. A page on another port of 127.0.0.1
    frames the approval page: not shown (and it is only the sign-in shell: no cookie, no token in
    that frame). A page of another site auto-submits an Approve form: refused. Nothing is answered."""
    served, sid = paused.served, paused.sid
    open_session(context, paused).close()
    rebind = f"http://rebind.test:{served.port}/attack"
    context.route(
        rebind, lambda route: route.fulfill(body=ATTACK.replace("SID", sid), content_type="text/html")
    )
    page = context.new_page()
    page.goto(rebind)
    result = page.evaluate("window.result")
    assert result == {"read": [403, False], "post": 403}, result

    framing = "http://127.0.0.1:9/frame"
    frame_html = f'<iframe id="f" src="{served.url}/sessions/{sid}" width="800" height="600"></iframe>'
    context.route(framing, lambda route: route.fulfill(body=frame_html, content_type="text/html"))
    framed = context.new_page()
    with framed.expect_response(f"{served.url}/sessions/{sid}") as answered:
        framed.goto(framing)
    assert answered.value.status == 401  # the shell, no credential: and the browser refused to frame it
    assert "frame-ancestors 'none'" in answered.value.headers["content-security-policy"]
    framed.wait_for_timeout(1000)
    assert all(f.locator("#approve").count() == 0 for f in framed.frames)
    shot(framed, "serve-framing-refused")

    other_site = "http://attacker.test:9/approve"
    form = (
        f'<form id="f" method="post" action="{served.url}/sessions/{sid}/approve">'
        '<input name="number" value="0"></form><script>document.getElementById("f").submit()</script>'
    )
    context.route(other_site, lambda route: route.fulfill(body=form, content_type="text/html"))
    forged = context.new_page()
    with forged.expect_navigation(url=f"{served.url}/sessions/{sid}/approve") as landed:
        forged.goto(other_site)
    assert landed.value is not None and landed.value.status == 401  # no cookie, no header: no token
    assert paused.answers() == []
    assert open_session(context, paused).locator("#approve").count() == 1  # still waiting


def test_two_tabs_approve_at_once_one_wins_and_the_session_finishes_accepted(
    browser: Browser, paused: Paused
) -> None:
    tabs = [browser.new_context(viewport={"width": 1200, "height": 900}) for _ in range(2)]
    try:
        pages = [open_session(ctx, paused) for ctx in tabs]
        shot(pages[0], "serve-waiting-for-approval")
        paused.hold.touch()  # the relaunch waits until the page has shown it
        # Both forms are submitted (by the page's script, with the token header) before either
        # answer comes back.
        with (
            pages[0].expect_response(lambda r: r.request.method == "POST") as first,
            pages[1].expect_response(lambda r: r.request.method == "POST") as second,
        ):
            for page in pages:
                page.evaluate("document.getElementById('approve').form.requestSubmit()")
        assert sorted(r.value.status for r in (first, second)) == [303, 409]  # one redirected, one refused
        loser = pages[[first.value.status, second.value.status].index(409)]
        loser.wait_for_selector("#message")
        assert (
            "409" in loser.locator("#message").inner_text()
            and "answered already" in loser.locator("#message").inner_text()
        )
        winner = next(p for p in pages if p is not loser)
        # While the answer's process runs the session, the page shows the step and its progress line.
        winner.wait_for_function(
            # a function, not an expression: the page's CSP runs no eval
            "() => (document.getElementById('progress-line') || {}).textContent?.includes('launch #2')",
            timeout=60_000,
        )
        shot(winner, "serve-running-progress")
        paused.hold.unlink()
        winner.wait_for_selector("#status.status-done", timeout=FINISH_S * 1000)  # the page follows it
        shot(winner, "serve-approved-done")
        assert "kv-cache-full-pool-cast: accepted" in winner.locator("#summary").inner_text()
        assert "approved by human" in winner.locator("#proposal-1 .answer").inner_text()
    finally:
        paused.hold.unlink(missing_ok=True)
        for ctx in tabs:
            ctx.close()
    assert paused.answers() == [{"approved": True, "by": "human"}]  # the CLI's answer, recorded once
    summary = json.loads(perfloop(paused.home, "sessions", "--json").stdout)[0]["summary"]
    assert summary["accepted"] == ["kv-cache-full-pool-cast"] and summary["commits"]
    kept = git(paused.repo, "log", "-1", "--format=%H", summary["branch"]).strip()  # the checkout given back
    assert kept == summary["commits"][0]


def test_a_forked_session_is_rejected_with_its_reason(context: BrowserContext, paused: Paused) -> None:
    if perfloop(paused.home, "sessions", "--json").stdout.count('"paused"'):
        assert perfloop(paused.home, "approve", paused.sid).returncode == 0  # run alone: end it first
    fork = perfloop(paused.home, "fork", paused.sid, "--at", "approve", "--approve", "manual", "--json")
    assert fork.returncode == 0, fork.stderr[-2000:]
    sid = last_json(fork)["session"]
    page = paused.served.open(context, f"/sessions/{sid}")
    page.fill("#reason", "not this week: needs a review of the pool layout")
    page.click("#reject")
    page.wait_for_selector("#status.status-done", timeout=FINISH_S * 1000)
    text = page.locator("#proposal-1").inner_text()
    assert "rejected by human — not this week" in text
    assert paused.answers(sid) == [
        {"approved": False, "by": "human", "reason": "not this week: needs a review of the pool layout"}
    ]
    shot(page, "serve-rejected-done")


def test_a_non_loopback_bind_needs_its_token(browser: Browser, recorded_home: tuple[Path, str]) -> None:
    home, sid = recorded_home
    served = Served(home, "--host", "0.0.0.0")
    try:
        assert served.token and len(served.token) >= 20  # generated and printed
        ctx = browser.new_context()
        page = ctx.new_page()
        refused = page.goto(served.url + f"/sessions/{sid}")
        assert refused is not None and refused.status == 401  # the sign-in shell, nothing of the session
        page.wait_for_selector("#sign-in:not([hidden])")
        assert "needs its token" in page.inner_text("body") and sid not in page.content()
        shot(page, "serve-token-refused")
        page.fill("#token", "wrong-token-of-enough-length")
        page.click("#sign-in-button")
        page.wait_for_function("() => document.getElementById('message').textContent.includes('is wrong')")
        page.fill("#token", served.token)  # pasted: kept in sessionStorage, sent as a header
        page.click("#sign-in-button")
        signed_in(page)
        assert page.locator("#summary").count() == 1 and ctx.cookies() == []
        again = page.goto(served.url + "/")  # a link followed: the shell again, signed in from sessionStorage
        assert again is not None and again.status == 401
        signed_in(page)
        assert page.locator(f'a[href="/sessions/{sid}"]').count() == 1
        api = page.request.get(
            served.url + f"/api/sessions/{sid}", headers={"Authorization": "Bearer " + served.token}
        )
        assert api.status == 200
        no_csrf = page.request.post(
            served.url + f"/sessions/{sid}/approve", form={"number": "0"}, headers=served.bearer()
        )
        assert no_csrf.status == 403 and "CSRF" in no_csrf.text()
        elsewhere = page.request.post(
            served.url + f"/sessions/{sid}/approve",
            form={"number": "0"},
            headers={"Origin": "http://evil.example", **served.bearer()},
        )
        assert elsewhere.status == 403 and "another origin" in elsewhere.text()
        ctx.close()
        stranger = browser.new_context()
        bare = stranger.request.post(served.url + f"/sessions/{sid}/approve", form={"number": "0"})
        assert bare.status == 401
        stranger.close()
    finally:
        served.stop()
