"""A shared store is not a door into a user's machine (docs/SECURITY.md, "store peer"; issue 46).

One CPU demo session paused for manual approval on a real PostgreSQL store; a peer with write
access to the database then attacks it as a reviewer did, through LangGraph's own tables and
perfloop's (`Peer`, a connection of its own, the same serializer perfloop reads with):
- plants a copy of the paused session under a newer id, its launch command swapped for one that
  leaves a marker file: `last` still names the victim's own session, and `approve`, `reject`,
  `resume`, `fork`, `abandon` of the copy by its full id, and approving it on the page of `perfloop serve`
  (a real browser), are refused in one line; `show` prints the copy's whole launch command as
  not signed by this user's key; a right-to-left override in its stored name is shown escaped;
- rewrites the victim's own session's options (approve manual -> auto, max_iterations,
  the launch allowlist off, another python) and then its launch command: each command is refused
  naming the fields that changed;
- hides a command in a stored diff with terminal escapes: `perfloop show --diff` in a real
  terminal (tmux) prints them as escapes;
- adds a pending write to the victim's paused session (what LangGraph applies on resume): refused.
After each, no file was created or changed under the victim's $PERFLOOP_HOME or checkout, no
process was started, and the marker does not exist."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import BrowserContext

from agent.sessions.checkpoint import serializer
from tests.e2e.conftest import PERFLOOP, last_json, make_repo, perfloop, write_target
from tests.integration.test_hostile_patch import Tmux
from tests.procs import processes_in
from tests.web.conftest import Served

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
PLANTED = "29991231-235959-beef"
"""The peer's copy: newer than any real session."""


class Peer:
    """A store peer: writes perfloop's and LangGraph's tables directly."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.serde = serializer()

    def rewrite(self, sid: str, channel: str, change: Callable[[Any], Any]) -> int:
        """Every stored version of the session's `channel` rewritten by `change`."""
        rows = self.conn.execute(
            "SELECT version, type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = %s",
            (sid, channel),
        ).fetchall()
        for version, kind, blob in rows:
            if kind == "empty":
                continue
            kind2, blob2 = self.serde.dumps_typed(change(self.serde.loads_typed((kind, blob))))
            self.conn.execute(
                "UPDATE checkpoint_blobs SET type = %s, blob = %s "
                "WHERE thread_id = %s AND channel = %s AND version = %s",
                (kind2, blob2, sid, channel, version),
            )
        return len(rows)

    def add_write(self, sid: str, channel: str, value: Any) -> Callable[[], None]:
        """A pending write beside the paused task's interrupt (as LangGraph stores an approval's
        answer); returns what removes it again."""
        row = self.conn.execute(
            "SELECT checkpoint_ns, checkpoint_id, task_id, task_path FROM checkpoint_writes "
            "WHERE thread_id = %s AND channel = '__interrupt__' ORDER BY checkpoint_id DESC LIMIT 1",
            (sid,),
        ).fetchone()
        assert row is not None, "the victim's session is not paused at an interrupt"
        ns, cid, task, path = row
        self.conn.execute(
            "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
            "idx, channel, type, blob) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (sid, ns, cid, task, path, 7, channel, *self.serde.dumps_typed(value)),
        )
        where = "thread_id = %s AND checkpoint_id = %s AND task_id = %s AND idx = 7"

        def remove() -> None:
            self.conn.execute(f"DELETE FROM checkpoint_writes WHERE {where}", (sid, cid, task))

        return remove

    def plant_copy(self, sid: str, new: str, name: str) -> None:
        """The session's checkpoints, index row and inputs copied under the id `new`."""
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            cols = [r[0] for r in self.conn.execute(f"SELECT * FROM {table} LIMIT 0").description or []]
            picked = ", ".join("%s" if c == "thread_id" else c for c in cols)
            self.conn.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} FROM {table} WHERE thread_id = %s",
                (new, sid),
            )
        self.conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_values,session_id}', "
            "to_jsonb(%s::text)) WHERE thread_id = %s AND checkpoint->'channel_values' ? 'session_id'",
            (new, new),
        )
        (info,) = self.conn.execute("SELECT info FROM sessions WHERE id = %s", (sid,)).fetchone() or ("",)
        doc = json.loads(info) | {"id": new, "created_at": "2999-12-31T23:59:59Z", "target_name": name}
        self.conn.execute(
            "INSERT INTO sessions VALUES (%s, %s, %s)", (new, doc["created_at"], json.dumps(doc))
        )
        self.conn.execute(
            "INSERT INTO inputs SELECT %s, n, kind, value FROM inputs WHERE session_id = %s", (new, sid)
        )


def launch(argv: list[str]) -> Callable[[Any], Any]:
    return lambda t: t.model_copy(update={"launch": t.launch.model_copy(update={"argv": argv})})


class Victim:
    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.home, self.env = tmp, tmp / "home", {"PERFLOOP_STORE": url}
        self.repo = make_repo(tmp / "engine")
        target = write_target(tmp / "t.toml", self.repo, looks=1)
        run = self.cli("run", str(target), "--approve", "manual", "--json", "--max-iterations", "1")
        assert run.returncode == 0, run.stderr[-3000:]
        assert last_json(run)["status"] == "paused"
        self.sid = last_json(run)["session"]
        self.marker = tmp / "PWNED"
        self.evil = ["bash", "-c", f"touch {self.marker}; exec sleep 300"]

    def cli(self, *args: str) -> Any:
        return perfloop(self.home, *args, env=self.env)

    def world(self) -> dict:
        """What a refused command must leave as it was: every file of the home and the checkout."""
        return {
            str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for root in (self.home, self.repo)
            for p in sorted(root.rglob("*"))
        }

    def refused(self, *args: str, says: str) -> str:
        """Run a command that must be refused in one line naming `says`, changing nothing."""
        before, procs = self.world(), set(processes_in(self.tmp))
        out = self.cli(*args)
        err = out.stderr.strip()
        assert out.returncode == 2 and says in err and "\n" not in err, (args, out.stdout[-1500:], err)
        assert "nothing was run" in err, err
        assert self.world() == before and set(processes_in(self.tmp)) <= procs, args
        assert not self.marker.exists()
        return err


@pytest.fixture(scope="module")
def victim(tmp_path_factory, pg_server) -> Iterator[Victim]:
    tmp = tmp_path_factory.mktemp("peer")
    v = Victim(tmp, pg_server.url(pg_server.new_db()))
    yield v
    for pid in processes_in(tmp):
        os.kill(pid, 9)


@pytest.fixture(scope="module")
def peer(victim: Victim) -> Peer:
    return Peer(victim.env["PERFLOOP_STORE"])


def test_a_planted_copy_is_not_last_and_is_refused_by_every_command(victim: Victim, peer: Peer) -> None:
    peer.plant_copy(victim.sid, PLANTED, "evil\u202etxt.exe")
    assert peer.rewrite(PLANTED, "target", launch(victim.evil)) >= 1
    shown = victim.cli("show", "last", "--json")
    assert json.loads(shown.stdout)["session"]["id"] == victim.sid  # the newest of this machine's
    show = victim.cli("show", PLANTED, "--json")
    runs = json.loads(show.stdout)["runs"]
    assert runs["argv"] == victim.evil and runs["signed"] is False, runs
    assert (
        f"its signature is this user's key's for another session ({victim.sid})" in runs["unsigned_because"]
    )
    says = f"session {PLANTED} is not signed by this user's key"
    for args in (
        ["approve", PLANTED],
        ["reject", PLANTED, "--reason", "no"],
        ["resume", PLANTED],
        ["fork", PLANTED, "--at", "propose"],
        ["abandon", PLANTED],
        ["approve", PLANTED, "--trust", "0123456789abcdef"],
    ):
        err = victim.refused(*args, says=says)
        assert f"--trust {runs['digest']}" in err


def test_the_approval_page_refuses_the_copy_and_shows_its_name_escaped(
    victim: Victim, context: BrowserContext, monkeypatch
) -> None:
    monkeypatch.setenv("PERFLOOP_STORE", victim.env["PERFLOOP_STORE"])
    served = Served(victim.home)
    try:
        before, procs = victim.world(), set(processes_in(victim.tmp))
        page = served.open(context, f"/sessions/{PLANTED}")
        html = page.content()
        assert "\u202e" not in html and "evil\\u202etxt.exe" in html
        assert "its signature is this user's key's for another session" in page.inner_text("#unsigned")
        page.click("#approve")
        page.wait_for_selector("#error", timeout=120_000)
        error = page.inner_text("#error")
        assert "not signed by this user's key" in error and "nothing was run" in error, error
        assert victim.world() == before and set(processes_in(victim.tmp)) - {served.proc.pid} <= procs
        assert not victim.marker.exists()
    finally:
        served.stop()


def test_a_hidden_command_in_a_stored_diff_shows_as_escapes_in_a_real_terminal(
    victim: Victim, peer: Peer, tmp_path: Path
) -> None:
    payload = "+import os; os.system('touch PWNED')  # \x1b[2K\r+import sys"
    hostile = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-import sys\n" + payload + "\n"
    assert peer.rewrite(PLANTED, "proposal", lambda p: p.model_copy(update={"diff": hostile})) >= 1
    tmux = Tmux({"PERFLOOP_HOME": str(victim.home), "TERM": "xterm-256color", **victim.env})
    try:
        pane = tmux.run(f"{PERFLOOP} show {PLANTED} --diff")
    finally:
        tmux.close()
    assert "os.system('touch PWNED')  # \\x1b[2K\\x0d+import sys" in pane, pane


def test_a_pending_write_the_peer_adds_is_refused_before_anything_runs(victim: Victim, peer: Peer) -> None:
    """A write LangGraph would apply on resume (an approval's answer, a finished parallel trial's
    result) added to the victim's own paused session: not signed by the victim's key, refused."""
    remove = peer.add_write(victim.sid, "proposal", None)
    try:
        for args in (
            ["approve", victim.sid],
            ["resume", victim.sid],
            ["reject", victim.sid, "--reason", "x"],
        ):
            victim.refused(*args, says="pending write proposal (task ")
    finally:
        remove()
    assert json.loads(victim.cli("show", victim.sid, "--json").stdout)["pending_approval"] is not None


def test_rewritten_options_or_launch_are_refused_naming_what_changed(victim: Victim, peer: Peer) -> None:
    sid = victim.sid
    digest = json.loads(victim.cli("show", sid, "--json").stdout)["pending_approval"]["digest"]
    python = str(victim.tmp / "evil" / "python")
    opts = {"approve": "auto", "max_iterations": 9, "launch_allowlist": False, "python": python}
    assert peer.rewrite(sid, "options", lambda o: o.model_copy(update=opts)) >= 1
    changed = "options.approve, options.launch_allowlist, options.max_iterations, options.python changed"
    for args in (["approve", sid], ["resume", sid], ["fork", sid, "--at", "propose"]):
        victim.refused(
            *args, says=f"session {sid} changed in the store since this user last ran it: {changed}"
        )
    victim.refused("approve", sid, "--digest", digest, says=f"session {sid} changed")
    assert peer.rewrite(sid, "target", launch(victim.evil)) >= 1
    err = victim.refused("approve", sid, says="target.launch")
    assert re.search(r"options\.python, target\.launch changed", err), err
    assert json.loads(victim.cli("sessions", "--json").stdout)[0]["status"] == "paused"
