"""Approval binds to what was shown (docs/SECURITY.md, finding 4), on a real PostgreSQL store shared
by two "machines" (two $PERFLOOP_HOMEs): a peer with write access to the database rewrites a paused
session's launch command in its checkpoint (LangGraph's own tables, through a connection of its
own). `perfloop show` displays what is stored now; `perfloop approve` on the machine that created
the session refuses in one line naming the field that changed (its checkpoints are signed with the
user's key, agent/sessions/trust/signing.py), and on the other machine (another key) `approve --digest D`
with the digest its view showed before the rewrite refuses too, as not signed by its user's key,
and so does `--trust` with the digest of what was reviewed before the rewrite. Nothing is run: no
answer recorded, the session still paused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import psycopg
import pytest

from agent.sessions.checkpoint import serializer
from state.config.target import TargetConfig
from tests.e2e.conftest import last_json, make_repo, perfloop, write_target
from tests.procs import processes_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def peer_rewrites_launch(url: str, sid: str, swap: list[str]) -> int:
    """A store peer: every stored version of the session's `target` channel gets launch argv
    `swap`, written back in place (the same serializer perfloop reads it with)."""
    serde, n = serializer(), 0
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        rows = conn.execute(
            "SELECT version, type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'target'",
            (sid,),
        ).fetchall()
        for version, kind, blob in rows:
            target = serde.loads_typed((kind, blob))
            assert isinstance(target, TargetConfig)
            swapped = target.model_copy(update={"launch": target.launch.model_copy(update={"argv": swap})})
            kind2, blob2 = serde.dumps_typed(swapped)
            conn.execute(
                "UPDATE checkpoint_blobs SET type = %s, blob = %s "
                "WHERE thread_id = %s AND channel = 'target' AND version = %s",
                (kind2, blob2, sid, version),
            )
            n += 1
    return n


def test_a_store_peer_cannot_swap_what_a_paused_session_runs(tmp_path: Path, pg_url: str) -> None:
    env = {"PERFLOOP_STORE": pg_url}
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    repo = make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    try:
        run = perfloop(
            home_a, "run", str(target), "--approve", "manual", "--json", "--max-iterations", "1", env=env
        )
        assert run.returncode == 0, run.stderr[-3000:]
        sid = last_json(run)["session"]
        assert last_json(run)["status"] == "paused"
        shown = re.search(
            rf"perfloop approve {sid} --digest ([0-9a-f]{{16}})", run.stderr
        )  # the view: stderr
        assert shown is not None, run.stderr[-2000:]
        view_b = perfloop(home_b, "show", sid, "--json", env=env)  # machine B reviews it
        digest_b = json.loads(view_b.stdout)["pending_approval"]["digest"]
        assert digest_b == shown[1]
        trust_b = json.loads(view_b.stdout)["runs"]["digest"]
        assert json.loads(view_b.stdout)["runs"]["signed"] is False

        argv = json.loads(view_b.stdout)["pending_approval"]["argv_now"]
        swap = [*argv, "--host", "0.0.0.0"]
        assert peer_rewrites_launch(pg_url, sid, swap) >= 1

        calls_before = json.loads(perfloop(home_a, "show", sid, "--json", env=env).stdout)["tool_calls"]
        show = perfloop(home_a, "show", sid, env=env)  # what is stored now, not the old summary
        assert show.returncode == 0, show.stderr[-2000:]
        assert "--host 0.0.0.0" in show.stdout.replace("\n", " ")
        assert f"--digest {digest_b}" not in show.stdout

        approve_a = perfloop(home_a, "approve", sid, env=env)
        assert approve_a.returncode == 2, (approve_a.stdout[-2000:], approve_a.stderr[-2000:])
        err = approve_a.stderr.strip()
        assert f"session {sid} changed in the store since this user last ran it: target.launch changed" in err
        assert "\n" not in err, err

        approve_b = perfloop(home_b, "approve", sid, "--digest", digest_b, env=env)
        assert approve_b.returncode == 2, (approve_b.stdout[-2000:], approve_b.stderr[-2000:])
        err = approve_b.stderr.strip()
        assert f"session {sid} is not signed by this user's key" in err and "\n" not in err, err
        trusted_b = perfloop(home_b, "approve", sid, "--trust", trust_b, env=env)  # reviewed before the swap
        assert trusted_b.returncode == 2 and f"--trust {trust_b} is not its digest now" in trusted_b.stderr

        listed = json.loads(perfloop(home_a, "sessions", "--json", env=env).stdout)
        assert [x["status"] for x in listed] == ["paused"]
        after = json.loads(perfloop(home_a, "show", sid, "--json", env=env).stdout)
        assert after["tool_calls"] == calls_before  # nothing ran: no tool call since the rewrite
        assert after["pending_approval"]["argv_now"] == swap  # stored, shown, never launched
    finally:
        for pid in processes_in(tmp_path):
            os.kill(pid, 9)
