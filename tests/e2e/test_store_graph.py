"""A store peer cannot steer the graph (issue 56; docs/SECURITY.md, "A store peer").

One CPU demo session paused for manual approval on a real PostgreSQL store; a peer with write
access to the database (`Peer` of tests/web/test_store_peer.py plus the edits below) then:
- edits LangGraph's own control state of the paused checkpoint (`branch:to:cleanup` set,
  `channel_versions`, `versions_seen`, `updated_channels`) and deletes its interrupt write, so
  that the graph would go on to `cleanup` and `apply` with no approval;
- plants a trial task (a `Send` in `__pregel_tasks` carrying a whole target and diff);
- copies the session under a new id and signs it with the empty key, for a machine with no key;
- signs a rewritten launch with the key the victim's key file holds when that file is empty, or
  is readable by others (0644);
- after the user rejects a patch, rolls the session back to its signed paused checkpoint
  (deleting the later ones and the rejection's answer).
Each is refused in one line naming what was wrong and what to do; nothing under the victim's
$PERFLOOP_HOME or checkout changes, no process starts, the planted command never runs."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Send

from agent.sessions.checkpoint import open_checkpointer
from agent.sessions.runner import thread
from agent.sessions.trust.signing import GRAPH, SEQ, SIGNATURE, WRITES, digests, graph_digest, seal
from state.sessions.loop import LoopState
from tests.procs import processes_in
from tests.web.test_store_peer import PLANTED, Peer, Victim, launch

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


class GraphPeer(Peer):
    """A peer that also edits LangGraph's checkpoint rows and signs what it wrote under a key it
    knows (the empty key, a key file it could read), exactly as perfloop signs."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url

    def latest(self, sid: str) -> tuple[str, dict, dict]:
        row = self.conn.execute(
            "SELECT checkpoint_id, checkpoint, metadata FROM checkpoints WHERE thread_id = %s "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            (sid,),
        ).fetchone()
        assert row is not None
        return row[0], row[1], row[2]

    def put_checkpoint(self, sid: str, cid: str, checkpoint: dict, metadata: dict | None = None) -> None:
        self.conn.execute(
            "UPDATE checkpoints SET checkpoint = %s::jsonb WHERE thread_id = %s AND checkpoint_id = %s",
            (json.dumps(checkpoint), sid, cid),
        )
        if metadata is not None:
            self.conn.execute(
                "UPDATE checkpoints SET metadata = %s::jsonb WHERE thread_id = %s AND checkpoint_id = %s",
                (json.dumps(metadata), sid, cid),
            )

    def blob(self, sid: str, channel: str, version: str, value: Any) -> None:
        kind, data = self.serde.dumps_typed(value)
        self.conn.execute(
            "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
            "VALUES (%s, '', %s, %s, %s, %s)",
            (sid, channel, version, kind, data),
        )

    def sign(self, sid: str, key: bytes, scratch: Path) -> None:
        """The latest checkpoint's signature made again under `key`, every field as perfloop makes it."""
        saver: Any = open_checkpointer(scratch, self.url, None)
        saver.home = None  # a reader: no key of its own
        found = saver.get_tuple(thread(sid))
        assert found is not None
        values = {k: v for k, v in found.checkpoint["channel_values"].items() if k in LoopState.model_fields}
        fields = digests(LoopState.model_validate(values))
        old = dict(found.metadata)[SIGNATURE]["fields"]
        fields |= {WRITES: "signed", SEQ: old.get(SEQ, "1")}
        fields[GRAPH] = graph_digest(
            found.checkpoint, found.config, found.parent_config, saver.serde.dumps_typed
        )
        cid, checkpoint, metadata = self.latest(sid)
        self.put_checkpoint(sid, cid, checkpoint, {**metadata, SIGNATURE: seal(key, sid, fields)})


@pytest.fixture(scope="module")
def victim(tmp_path_factory, pg_server) -> Iterator[Victim]:
    tmp = tmp_path_factory.mktemp("graph-peer")
    v = Victim(tmp, pg_server.url(pg_server.new_db()))
    yield v
    for pid in processes_in(tmp):
        os.kill(pid, 9)


@pytest.fixture
def peer(victim: Victim) -> Iterator[GraphPeer]:
    """The peer; what it changed in the latest checkpoint and its writes is put back after each test."""
    p = GraphPeer(victim.env["PERFLOOP_STORE"])
    cid, checkpoint, metadata = p.latest(victim.sid)
    saved = {
        table: p.conn.execute(f"SELECT * FROM {table} WHERE thread_id = %s", (victim.sid,)).fetchall()
        for table in ("checkpoint_writes", "checkpoint_blobs")
    }
    yield p
    p.put_checkpoint(victim.sid, cid, checkpoint, metadata)
    for table, rows in saved.items():
        p.conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (victim.sid,))
        for w in rows:
            p.conn.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(w))})", w)
    assert victim.cli("show", victim.sid, "--json").returncode == 0  # as it was


def test_an_edited_control_state_with_its_interrupt_deleted_reaches_no_step(
    victim: Victim, peer: GraphPeer
) -> None:
    """The paused checkpoint told to run `cleanup` next (then `apply`, relaunch, commit) instead
    of waiting on its approval, its interrupt write deleted: `resume last` refuses it."""
    sid = victim.sid
    cid, cp, _ = peer.latest(sid)
    version = cp["channel_versions"]["branch:to:approve"]
    cp["channel_values"]["branch:to:cleanup"] = None
    cp["channel_versions"]["branch:to:cleanup"] = version
    cp["versions_seen"].setdefault("approve", {})["branch:to:approve"] = version
    cp["updated_channels"] = ["branch:to:cleanup"]
    peer.put_checkpoint(sid, cid, cp)
    gone = peer.conn.execute(
        "DELETE FROM checkpoint_writes WHERE thread_id = %s AND channel = '__interrupt__'", (sid,)
    ).rowcount
    assert gone == 1
    head = victim.repo.joinpath(".git", "HEAD").read_text()
    err = victim.refused(
        "resume", "last", says=f"session {sid} changed in the store since this user last ran it"
    )
    assert "its graph state (the step that runs next" in err and "start a new session" in err, err
    victim.refused("approve", sid, says="its graph state")
    assert victim.repo.joinpath(".git", "HEAD").read_text() == head


def test_the_interrupt_deleted_alone_is_noticed(victim: Victim, peer: GraphPeer) -> None:
    """A pending write this machine wrote (the interrupt) deleted, the checkpoint untouched: refused."""
    sid = victim.sid
    peer.conn.execute(
        "DELETE FROM checkpoint_writes WHERE thread_id = %s AND channel = '__interrupt__'", (sid,)
    )
    err = victim.refused("resume", sid, says="pending write __interrupt__ (task ")
    assert "that this machine wrote was deleted" in err, err


def test_a_trial_task_the_peer_plants_is_refused(victim: Victim, peer: GraphPeer) -> None:
    """A `Send` to `trial` carrying a whole target (its launch a planted command) and a diff."""
    sid = victim.sid
    cid, cp, _ = peer.latest(sid)
    row = peer.conn.execute(
        "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'target' LIMIT 1", (sid,)
    ).fetchone()
    assert row is not None
    target = launch(victim.evil)(peer.serde.loads_typed((row[0], row[1])))
    task = {"session_id": sid, "iteration": 1, "target": target.model_dump(mode="json"), "diff": "+x\n"}
    version = "99999999999999999999999999999999.0.5"
    peer.blob(sid, "__pregel_tasks", version, [Send("trial", task)])
    cp["channel_versions"]["__pregel_tasks"] = version
    cp["updated_channels"] = ["__pregel_tasks"]
    peer.put_checkpoint(sid, cid, cp)
    for args in (["resume", sid], ["approve", sid]):
        victim.refused(
            *args, says="its graph state (the step that runs next, channel versions, pending tasks)"
        )


def test_a_copy_signed_with_the_empty_key_is_not_this_users_on_a_machine_with_no_key(
    victim: Victim, peer: GraphPeer, tmp_path: Path
) -> None:
    peer.plant_copy(victim.sid, PLANTED, "copy")
    assert peer.rewrite(PLANTED, "target", launch(victim.evil)) >= 1
    peer.sign(PLANTED, b"", tmp_path / "scratch")
    fresh = Victim.__new__(Victim)  # a machine that never started a session: no signing.key
    fresh.tmp, fresh.home, fresh.env = victim.tmp, tmp_path / "fresh-home", victim.env
    fresh.repo, fresh.marker, fresh.evil = victim.repo, victim.marker, victim.evil
    fresh.home.mkdir(mode=0o700)
    err = fresh.refused("approve", PLANTED, says=f"session {PLANTED} is not signed by this user's key")
    assert "this machine has no key" in err and "--trust" in err, err
    shown = json.loads(fresh.cli("show", PLANTED, "--json").stdout)["runs"]
    assert shown["signed"] is False and "this machine has no key" in shown["unsigned_because"]
    assert not (fresh.home / "signing.key").exists()


@pytest.mark.parametrize("spoil", ["empty", "0644"])
def test_an_empty_or_public_key_file_is_refused_not_used(
    victim: Victim, peer: GraphPeer, spoil: str, tmp_path: Path
) -> None:
    """The victim's key file emptied (the peer then signs with the empty key) or left readable by
    others (a local user read it; the peer signs with it): the rewritten launch is refused."""
    key_file = victim.home / "signing.key"
    saved = key_file.read_bytes()
    try:
        if spoil == "empty":
            key_file.write_bytes(b"")
            forged_with, says = b"", "is empty: remove it"
        else:
            key_file.chmod(0o644)
            forged_with, says = saved.strip(), "is mode 0644, readable by others"
        assert peer.rewrite(victim.sid, "target", launch(victim.evil)) >= 1
        peer.sign(victim.sid, forged_with, tmp_path / "scratch")
        err = victim.refused(
            "approve", victim.sid, says=f"session {victim.sid} is not signed by this user's key"
        )
        assert says in err, err
    finally:
        key_file.write_bytes(saved)
        key_file.chmod(0o600)


def test_a_rollback_after_a_rejection_is_refused(tmp_path_factory, pg_server) -> None:
    """The user rejects the patch; the peer deletes every later checkpoint and the rejection's
    answer, leaving the signed paused checkpoint as the latest: `approve` and `resume` refuse."""
    tmp = tmp_path_factory.mktemp("rollback")
    v = Victim(tmp, pg_server.url(pg_server.new_db()))
    try:
        peer = GraphPeer(v.env["PERFLOOP_STORE"])
        paused, _, _ = peer.latest(v.sid)
        rejected = v.cli("reject", v.sid, "--reason", "no")
        assert rejected.returncode == 0, rejected.stderr[-2000:]
        later = peer.conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id > %s", (v.sid, paused)
        ).rowcount
        assert later >= 1
        peer.conn.execute(
            "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id > %s", (v.sid, paused)
        )
        peer.conn.execute(
            "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_id = %s AND channel <> '__interrupt__'",
            (v.sid, paused),
        )
        peer.conn.execute(
            "UPDATE sessions SET info = jsonb_set(info::jsonb, '{status}', '\"paused\"')::text WHERE id = %s",
            (v.sid,),
        )
        for args in (["approve", v.sid], ["resume", "last"]):
            err = v.refused(*args, says=f"session {v.sid} was rolled back in the store")
            assert "a store peer deleted the later ones" in err, err
    finally:
        for pid in processes_in(tmp):
            os.kill(pid, 9)
        shutil.rmtree(tmp, ignore_errors=True)
