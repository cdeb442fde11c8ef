"""What runs is what was verified (issue 62; docs/SECURITY.md, "A store peer").

One CPU demo session paused for manual approval on a real PostgreSQL store. A store peer waits
for the user's `perfloop approve` (or `reject`) to mark the session `running` — after the
session was verified, before the graph runs — and then writes, driven deterministically:
- by trigger (in the same transaction as `running`): an unsigned copy of the paused checkpoint,
  newer, with its own launch command (a marker file), or the signed checkpoint's `target` blob
  rewritten in place to that command;
- by poll (a 2 ms loop of plain SELECT / INSERT on a connection of its own): the same copy.
Each is refused in one line naming what changed; the planted command never runs, nothing is
committed to the checkout, no file under the user's $PERFLOOP_HOME changes, no process starts,
no checkpoint after the planted one is signed, and the session row is left as it was. (On the
code before issue 62 each of these ran the planted command: `approve` read the latest
checkpoint again after the check, and read this key's checkpoints' state fields unchecked.)"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.e2e.conftest import make_repo, perfloop, write_target
from tests.e2e.test_store_graph import GraphPeer
from tests.procs import processes_in
from tests.web.test_store_peer import Victim, launch

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class RacePeer(GraphPeer):
    """A peer that writes when the session turns `running`: SQL it can run in a trigger or alone."""

    def evil_blob(self, sid: str, argv: list[str]) -> tuple[str, str]:
        """The session's `target` with its launch argv swapped, serialized as perfloop stores it (type, hex)."""
        _, cp, _ = self.latest(sid)
        version = cp["channel_versions"]["target"]
        row = self.conn.execute(
            "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'target' AND version = %s",
            (sid, version),
        ).fetchone()
        assert row is not None
        kind, data = self.serde.dumps_typed(launch(argv)(self.serde.loads_typed((row[0], row[1]))))
        return kind, data.hex()

    def copy_sql(self, sid: str, argv: list[str]) -> tuple[str, str]:
        """(the statements that plant an unsigned copy of the latest checkpoint, newer, whose
        target launches `argv`, with the paused task's writes; the copy's id)."""
        cid, cp, _ = self.latest(sid)
        new, version = cid[:-12] + "ffffffffffff", cp["channel_versions"]["target"] + ".9"
        kind, hexblob = self.evil_blob(sid, argv)
        return (
            f"INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
            f"VALUES ('{sid}', '', 'target', '{version}', '{kind}', decode('{hexblob}', 'hex'));"
            f"INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
            f"checkpoint, metadata) SELECT thread_id, checkpoint_ns, '{new}', parent_checkpoint_id, type, "
            f"jsonb_set(jsonb_set(checkpoint, '{{id}}', to_jsonb('{new}'::text)), "
            f"'{{channel_versions,target}}', to_jsonb('{version}'::text)), metadata - 'perfloop_signature' "
            f"FROM checkpoints WHERE thread_id = '{sid}' AND checkpoint_id = '{cid}';"
            f"INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, "
            f"channel, type, blob) SELECT thread_id, checkpoint_ns, '{new}', task_id, task_path, idx, channel, "
            f"type, blob FROM checkpoint_writes WHERE thread_id = '{sid}' AND checkpoint_id = '{cid}';",
            new,
        )

    def in_place_sql(self, sid: str, argv: list[str]) -> str:
        """The statement that rewrites the signed latest checkpoint's `target` blob to launch `argv`."""
        _, cp, _ = self.latest(sid)
        kind, hexblob = self.evil_blob(sid, argv)
        return (
            f"UPDATE checkpoint_blobs SET type = '{kind}', blob = decode('{hexblob}', 'hex') "
            f"WHERE thread_id = '{sid}' AND channel = 'target' AND version = '{cp['channel_versions']['target']}';"
        )

    def on_running(self, sid: str, sql: str) -> None:
        """A trigger that runs `sql` in the transaction that marks the session `running`."""
        self.conn.execute(
            "CREATE OR REPLACE FUNCTION peer_plant() RETURNS trigger AS $f$ BEGIN "
            f"IF NEW.id = '{sid}' AND NEW.info::jsonb->>'status' = 'running' THEN {sql} END IF; "
            "RETURN NEW; END $f$ LANGUAGE plpgsql"
        )
        self.conn.execute(
            "CREATE TRIGGER peer_plant AFTER INSERT OR UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION peer_plant()"
        )

    def poll(self, url: str, sid: str, sql: str) -> threading.Thread:
        """A 2 ms poll of the session row (its own connection): `sql` once it reads `running`."""

        def run() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                for _ in range(60_000):
                    (info,) = conn.execute("SELECT info FROM sessions WHERE id = %s", (sid,)).fetchone() or (
                        "{}",
                    )
                    if json.loads(info).get("status") == "running":
                        conn.execute(sql.encode())
                        return
                    time.sleep(0.002)

        poller = threading.Thread(target=run, daemon=True)
        poller.start()
        return poller


@pytest.fixture(scope="module")
def victim(tmp_path_factory, pg_server) -> Iterator[Victim]:
    tmp = tmp_path_factory.mktemp("race")
    v = Victim(tmp, pg_server.url(pg_server.new_db()))
    yield v
    for pid in processes_in(tmp):
        os.kill(pid, 9)


@pytest.fixture
def peer(victim: Victim) -> Iterator[RacePeer]:
    """The peer; the session's rows put back as they were after each test, its trigger dropped."""
    p = RacePeer(victim.env["PERFLOOP_STORE"])
    sid = victim.sid
    saved = {t: p.conn.execute(f"SELECT * FROM {t} WHERE thread_id = %s", (sid,)).fetchall() for t in TABLES}
    session = p.conn.execute("SELECT * FROM sessions WHERE id = %s", (sid,)).fetchall()
    inputs = p.conn.execute("SELECT * FROM inputs WHERE session_id = %s", (sid,)).fetchall()
    yield p
    p.conn.execute("DROP TRIGGER IF EXISTS peer_plant ON sessions")
    for table, rows in [*saved.items(), ("sessions", session), ("inputs", inputs)]:
        col = "id" if table == "sessions" else "session_id" if table == "inputs" else "thread_id"
        p.conn.execute(f"DELETE FROM {table} WHERE {col} = %s", (sid,))
        for w in rows:
            values = [Jsonb(v) if isinstance(v, dict | list) else v for v in w]
            p.conn.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(w))})", values)
    assert victim.cli("show", victim.sid, "--json").returncode == 0  # as it was


def refused_unrun(victim: Victim, peer: RacePeer, args: list[str], says: str) -> str:
    """`args` refused in one line naming `says`: the planted command never ran, the checkout and
    the home unchanged, no process started, nothing signed after what the peer wrote, the
    session's row as it was."""
    before = peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (victim.sid,)).fetchone()
    signed_before = _signed(peer, victim.sid)
    err = victim.refused(*args, says=says)  # also: the marker does not exist, nothing changed
    assert peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (victim.sid,)).fetchone() == before
    assert _signed(peer, victim.sid) == signed_before, "this process signed after the peer's write"
    return err


def _signed(peer: RacePeer, sid: str) -> set[str]:
    rows = peer.conn.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND metadata ? 'perfloop_signature'",
        (sid,),
    ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize("command", [["approve"], ["reject", "--reason", "dangerous"]])
def test_a_newer_unsigned_copy_planted_by_trigger_is_refused(
    victim: Victim, peer: RacePeer, command: list[str]
) -> None:
    sql, new = peer.copy_sql(victim.sid, victim.evil)
    peer.on_running(victim.sid, sql)
    head = victim.repo.joinpath(".git", "HEAD").read_text()
    err = refused_unrun(
        victim, peer, [command[0], victim.sid, *command[1:]], says=f"its latest checkpoint is {new}"
    )
    assert "(not signed by this user's key)" in err and "the one verified" in err, err
    assert victim.repo.joinpath(".git", "HEAD").read_text() == head


def test_the_signed_checkpoint_rewritten_in_place_by_trigger_is_refused_naming_the_field(
    victim: Victim, peer: RacePeer
) -> None:
    peer.on_running(victim.sid, peer.in_place_sql(victim.sid, victim.evil))
    err = refused_unrun(victim, peer, ["approve", victim.sid], says="target.launch changed")
    assert f"session {victim.sid} changed in the store since this user last ran it" in err, err


def test_a_newer_unsigned_copy_planted_by_a_2ms_poll_is_refused(victim: Victim, peer: RacePeer) -> None:
    sql, new = peer.copy_sql(victim.sid, victim.evil)
    row = peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (victim.sid,)).fetchone()
    head = victim.repo.joinpath(".git", "HEAD").read_text()
    poller = peer.poll(victim.env["PERFLOOP_STORE"], victim.sid, sql)
    out = victim.cli("approve", victim.sid)
    poller.join(timeout=30)
    err = out.stderr.strip()
    assert not victim.marker.exists(), "the planted command ran"
    assert out.returncode == 2 and f"its latest checkpoint is {new}" in err and "\n" not in err, err
    assert (
        not (_signed(peer, victim.sid) & {new})
        and not peer.conn.execute(
            "SELECT 1 FROM checkpoints WHERE thread_id = %s AND parent_checkpoint_id = %s", (victim.sid, new)
        ).fetchall()
    ), "a checkpoint after the planted one"
    assert peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (victim.sid,)).fetchone() == row
    assert victim.repo.joinpath(".git", "HEAD").read_text() == head


def test_show_prints_what_runs_next_and_trust_covers_a_send_planted_after_it(
    victim: Victim, peer: RacePeer, tmp_path
) -> None:
    """A session signed before the graph was (issue 56's older signature, no `~graph`: continued
    only with `--trust`): `show` prints its next node and pending writes; a trial `Send` carrying
    its own launch planted after `show` is printed by the next `show`, with its argv, and the
    digest shown before no longer runs it."""
    from langgraph.types import Send

    from agent.sessions.trust.signing import GRAPH, SIGNATURE, seal

    sid = victim.sid
    cid, cp, meta = peer.latest(sid)
    key = (victim.home / "signing.key").read_bytes().strip()
    fields = {k: v for k, v in meta[SIGNATURE]["fields"].items() if k != GRAPH}
    peer.put_checkpoint(sid, cid, cp, {**meta, SIGNATURE: seal(key, sid, fields)})  # as before issue 56
    shown = json.loads(victim.cli("show", sid, "--json").stdout)["runs"]
    assert shown["signed"] is False and "before perfloop signed the graph" in shown["unsigned_because"], shown
    assert shown["next"] == ["approve"] and [w["channel"] for w in shown["writes"]] == ["__interrupt__"], (
        shown
    )
    assert shown["tasks"] == [], shown
    row = peer.conn.execute(
        "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'target' LIMIT 1", (sid,)
    ).fetchone()
    assert row is not None
    target = launch(victim.evil)(peer.serde.loads_typed((row[0], row[1])))
    task = {"session_id": sid, "iteration": 1, "target": target.model_dump(mode="json"), "diff": "+x\n"}
    version = "99999999999999999999999999999999.0.5"
    peer.blob(sid, "__pregel_tasks", version, [Send("trial", task)])
    cp["channel_versions"]["__pregel_tasks"] = version
    peer.put_checkpoint(sid, cid, cp)
    again = json.loads(victim.cli("show", sid, "--json").stdout)["runs"]
    assert again["tasks"] == [{"node": "trial", "argv": victim.evil, "diff": "+x\n"}], again
    assert again["digest"] != shown["digest"]
    text = victim.cli("show", sid).stdout
    assert "pending task trial: runs bash -c" in text and "runs next: trial, approve" in text, text[-1500:]
    err = refused_unrun(
        victim, peer, ["approve", sid, "--trust", shown["digest"]], says="is not its digest now"
    )
    assert f"--trust {again['digest']}" in err, err


def test_a_done_row_beside_a_signed_waiting_checkpoint_is_shown_as_paused(
    victim: Victim, peer: RacePeer
) -> None:
    """The `sessions` row is not signed: a peer's "done" for a session whose signed checkpoint
    waits for approval is shown as what it is (paused), the row's word named as unsigned."""
    peer.conn.execute(
        "UPDATE sessions SET info = jsonb_set(info::jsonb, '{status}', '\"done\"')::text WHERE id = %s",
        (victim.sid,),
    )
    shown = json.loads(victim.cli("show", victim.sid, "--json").stdout)
    assert shown["session"]["status"] == "paused" and shown["runs"]["signed"] is True, shown["session"]
    assert (
        shown["store_row"]
        == "the store's row says 'done' (not signed): its signed checkpoint waits for approval"
    )
    assert "the store's row says 'done' (not signed)" in victim.cli("show", victim.sid).stdout


def forge_row(peer: RacePeer, sid: str, **update: object) -> None:
    """The peer rewrites the session's `sessions` row: its summary (the one written at the pause)
    claims a kept fix, a commit and a speedup, and `update` sets the row's own fields."""
    (info,) = peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (sid,)).fetchone() or (None,)
    row = json.loads(info)
    claims = {
        "accepted": ["peer-fix"],
        "commits": ["deadbeef00"],
        "speedup": 987.65,
        "speedup_judged": 987.65,
    }
    row["summary"] = {**row["summary"], **claims, "speedup_ci": [9.5, 10.25], "status": "done"}
    peer.conn.execute("UPDATE sessions SET info = %s WHERE id = %s", (json.dumps(row | update), sid))


def info_of(peer: RacePeer, sid: str) -> dict:
    """The session's `sessions` row as stored."""
    (info,) = peer.conn.execute("SELECT info FROM sessions WHERE id = %s", (sid,)).fetchone() or ("{}",)
    return json.loads(info)


def listed(victim: Victim, sid: str | None = None) -> tuple[dict, str]:
    """(the session's entry in `perfloop sessions --json`, `perfloop sessions`'s text)."""
    out, text = victim.cli("sessions", "--json"), victim.cli("sessions")
    assert out.returncode == 0 and text.returncode == 0, (out.stderr, text.stderr)
    (entry,) = [e for e in json.loads(out.stdout) if e["id"] == (sid or victim.sid)]
    return entry, text.stdout


def test_the_sessions_list_shows_a_forged_done_row_as_its_signed_checkpoint_says(
    victim: Victim, peer: RacePeer
) -> None:
    """`perfloop sessions` (and `--json`): a peer's "done / accepted / commits deadbeef00" row for
    a session whose signed checkpoint waits for approval is listed as paused, with none of the
    peer's summary, the row's word named as unsigned; so is a forged summary alone beside the
    row's `paused` (commits the signed state has none of)."""
    forge_row(peer, victim.sid, status="done")
    entry, text = listed(victim)
    assert entry["status"] == "paused" and entry["summary"] is None and entry["signed"] is True, entry
    said = "the store's row says 'done' (not signed): its signed checkpoint waits for approval"
    assert entry["store_row"] == said, entry
    assert not {"deadbeef00", "peer-fix", "987.65"} & set(json.dumps(entry).replace('"', " ").split()), entry
    (line,) = [x for x in text.splitlines() if x.startswith(victim.sid) and "  " in x]
    assert "paused" in line and "done" not in line, text
    assert f"{victim.sid}: {said}\n" in text, text
    assert not any(x in text for x in ("deadbeef00", "peer-fix", "987.65")), text

    forge_row(peer, victim.sid, status="paused")
    entry, text = listed(victim)
    assert entry["status"] == "paused" and entry["summary"] is None and entry["signed"] is True, entry
    assert entry["store_row"] == (
        "the store's row's summary (not signed) names commits deadbeef00: its signed checkpoint has none"
    )
    assert not any(x in text for x in ("peer-fix", "987.65")), text


def shown(victim: Victim, sid: str | None = None) -> tuple[dict, str]:
    """(`perfloop show SESSION --json`, `perfloop show SESSION`'s text)."""
    sid = sid or victim.sid
    out, text = victim.cli("show", sid, "--json"), victim.cli("show", sid)
    assert out.returncode == 0 and text.returncode == 0, (out.stderr, text.stderr)
    return json.loads(out.stdout), text.stdout


FORGED = ("deadbeef00", "peer-fix")
"""The peer's words; its figures (987.65x) are in the summary, which is not shown at all."""
TABLE = "stopped because"
"""A row of the summary's table (`render.summary`): printed only with a summary."""


def test_show_drops_a_forged_summary_beside_a_genuine_paused_row(victim: Victim, peer: RacePeer) -> None:
    """`perfloop show` (and `--json`), as the list: the row's status is the signed one (`paused`)
    but its summary, not signed, claims a kept fix, commit deadbeef00 and a 987.65x speedup the
    signed state has none of: none of it is shown, the summary named as unsigned (the one line
    that names the commit it claims)."""
    forge_row(peer, victim.sid, status="paused")
    out, text = shown(victim)
    said = "the store's row's summary (not signed) names commits deadbeef00: its signed checkpoint has none"
    assert out["session"]["status"] == "paused" and out["store_row"] == said, out["session"]
    assert out["session"]["summary"] is None and "987.65" not in json.dumps(out["session"]["headline"])
    rest = json.dumps({k: v for k, v in out.items() if k != "store_row"})  # that line names the commit
    assert not [x for x in FORGED if x in rest], out["session"]
    assert f"\n{said}\n" in text and not [x for x in FORGED if x in text.replace(said, "")], text[-2000:]
    assert "status paused" in text and TABLE not in text, text[-2000:]
    assert (listed(victim)[0]["status"], listed(victim)[0]["store_row"]) == ("paused", said)


def test_show_says_interrupted_for_a_done_row_of_a_signed_session_that_neither_ended_nor_waits(
    victim: Victim, peer: RacePeer, tmp_path: Path
) -> None:
    """A second session of this user, interrupted (SIGINT as `profile` starts): its latest
    checkpoint is signed, has not ended and no approval waits on it. A row forged to `done` with
    the peer's summary: `show` (and `--json`) says what the list says, `interrupted`, not done,
    without the row's summary, the row's word named as unsigned."""
    repo, faults = make_repo(tmp_path / "engine"), tmp_path / "faults"
    faults.write_text("node:profile INT\n")
    before = {e["id"] for e in json.loads(victim.cli("sessions", "--json").stdout)}
    run = perfloop(
        victim.home, "run", str(write_target(tmp_path / "t.toml", repo, looks=1)), "--approve", "manual",
        "--json", "--max-iterations", "1", env={**victim.env, "PERFLOOP_FAULTS_FILE": str(faults)},
    )  # fmt: skip
    assert run.returncode == 130 and faults.read_text() == "", run.stderr[-2000:]
    (sid,) = {e["id"] for e in json.loads(victim.cli("sessions", "--json").stdout)} - before
    row = info_of(peer, sid) | {"summary": info_of(peer, victim.sid)["summary"] | {"session": sid}}
    peer.conn.execute("UPDATE sessions SET info = %s WHERE id = %s", (json.dumps(row), sid))
    forge_row(peer, sid, status="done")
    out, text = shown(victim, sid)
    said = "the store's row says 'done' (not signed): its signed checkpoint has not ended"
    assert out["session"]["status"] == "interrupted" and out["pending_approval"] is None, out["session"]
    assert out["store_row"] == said and out["session"]["summary"] is None and out["runs"]["signed"], out
    assert not [x for x in FORGED if x in json.dumps(out)], out["session"]
    assert "987.65" not in json.dumps(out["session"]["headline"]), out["session"]
    assert "status interrupted" in text and "status done" not in text and f"\n{said}\n" in text, text[-2000:]
    assert not [x for x in FORGED if x in text] and TABLE not in text, text[-2000:]
    entry, _ = listed(victim, sid)
    assert (entry["status"], entry["store_row"]) == ("interrupted", said), entry


def test_a_rollback_to_the_first_unsigned_checkpoint_is_named_a_rollback(
    victim: Victim, peer: RacePeer
) -> None:
    """Every checkpoint deleted but the first (the input, before any step, which carries no
    signature): `approve` refuses it as rolled back, not with an internal error."""
    (first,) = peer.conn.execute(
        "SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = %s", (victim.sid,)
    ).fetchone() or (None,)
    peer.conn.execute(
        "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_id > %s", (victim.sid, first)
    )
    err = victim.refused("approve", victim.sid, says=f"session {victim.sid} was rolled back in the store")
    assert "its latest checkpoint is its first (before any step)" in err, err


def test_a_copy_of_this_users_session_is_named_as_one(victim: Victim, peer: RacePeer) -> None:
    """The user's own session copied under another id, its signature kept: refused as this key's
    signature for another session (named), not as another key's."""
    copy = "29991231-235958-cafe"
    peer.plant_copy(victim.sid, copy, "copy")
    err = victim.refused("approve", copy, says=f"session {copy} is not signed by this user's key")
    assert f"its signature is this user's key's for another session ({victim.sid})" in err, err
