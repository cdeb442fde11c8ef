"""The approval page for a batch of candidates for `[[hosts]]`, in a real browser: each candidate
is shown with its own diff and a tick box; an edited patch is not offered (and a forged edit is
refused before anything is claimed); nothing ticked is refused; unticking one approves only the
others (`perfloop approve --only`), and the session finishes in the background having tried only
those. Two local hosts, the real CLI and servers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext

from tests.e2e.conftest import git, kept_unless_drifted, last_json, make_repo, perfloop, write_target
from tests.e2e.test_parallel_resume import noop_books, with_local_hosts
from tests.procs import processes_in
from tests.web.conftest import Served, shot
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
KV = "kv-cache-full-pool-cast"


class Batch:
    def __init__(self, home: Path, repos: dict[str, Path], sid: str, served: Served) -> None:
        self.home, self.repos, self.sid, self.served = home, repos, sid, served

    def answers(self) -> list[dict]:
        return SessionStore(self.home / "sessions.sqlite").inputs(self.sid, "answer")


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Iterator[Batch]:
    """A session paused on a batch of two candidates (the built-in fix, a comment-only patch)."""
    root = tmp_path_factory.mktemp("batch")
    home, repo = root / "home", make_repo(root / "engine")
    repos = {"here": repo, "a": make_repo(root / "a" / "engine"), "b": make_repo(root / "b" / "engine")}
    books = noop_books(root, repo)
    target = with_local_hosts(
        write_target(root / "t.toml", repo, looks=1), {"a": repos["a"], "b": repos["b"]}
    )
    args = ("run", str(target), "--playbooks", str(books), "--approve", "manual", "--max-iterations", "1")
    run = perfloop(home, *args, "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    assert last_json(run)["status"] == "paused"
    served = Served(home)
    try:
        yield Batch(home, repos, last_json(run)["session"], served)
    finally:
        served.stop()
        for pid in processes_in(root):
            os.kill(pid, 9)


@pytest.mark.timeout(600)
def test_a_batch_is_shown_per_candidate_and_approved_with_one_unticked(
    context: BrowserContext, batch: Batch
) -> None:
    page = batch.served.open(context, f"/sessions/{batch.sid}")
    page.wait_for_selector("#candidates")
    boxes = page.locator("#candidates input[type=checkbox]")
    assert [boxes.nth(i).get_attribute("value") for i in range(boxes.count())] == [KV, "noop-comment"]
    assert all(boxes.nth(i).is_checked() for i in range(boxes.count()))
    noop = page.locator("#candidate-noop-comment .pending-diff").inner_text()
    assert "+# a comment" in noop and "get_key_buffer" not in noop  # its own diff, not the batch's
    assert "get_key_buffer" in page.locator(f"#candidate-{KV} .pending-diff").inner_text()
    assert page.locator("#edit-panel").count() == 0  # a batch takes no edited patch
    shot(page, "serve-batch-waiting")

    # A forged edit of the batch is refused before anything is claimed; so is nothing ticked.
    forged = page.request.post(
        f"{batch.served.url}/sessions/{batch.sid}/edit",
        form={
            "csrf": page.locator("input[name=csrf]").first.get_attribute("value") or "",
            "number": "0",
            "patch": "x",
        },
        headers=batch.served.bearer(),
    )
    assert forged.status == 400 and "waits on a batch of 2 candidates" in forged.text()
    for i in range(boxes.count()):
        boxes.nth(i).uncheck()
    page.click("#approve")
    page.wait_for_selector("#error")
    assert "no candidate ticked" in page.locator("#error").inner_text()
    assert batch.answers() == []

    page.locator("#candidates input[value='kv-cache-full-pool-cast']").check()
    page.click("#approve")
    page.wait_for_selector("#status.status-done", timeout=500_000)  # the page follows the session
    shot(page, "serve-batch-done")
    assert batch.answers() == [{"approved": True, "by": "human", "playbooks": [KV]}]
    shown = last_json(perfloop(batch.home, "show", batch.sid, "--json"))
    assert [(t["playbook"], t["host"]) for t in shown["trials"]] == [(KV, "a")]  # only the ticked one
    verdicts = [(d["playbook"], d["verdict"], d["reason"]) for d in shown["decisions"]]
    assert ("noop-comment", "rejected", "rejected by human: not chosen for trial") in verdicts, verdicts
    [(verdict, reason)] = [(v, r) for pb, v, r in verdicts if pb == KV]  # judged: tried, not dropped
    kept_unless_drifted(verdict == "accepted", reason)
    assert last_json(perfloop(batch.home, "sessions", "--json"))[0]["status"] == "done"
    assert git(batch.repos["b"], "branch", "--list", "perfloop/*").strip() == ""  # host b never touched
    assert [processes_in(r) for r in batch.repos.values()] == [[], [], []]
