"""Session ids as typed: unique prefixes, `last`, `last~N`, one-line errors; tables that never cut
an id, at 80 columns and piped."""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import render
from agent.cli.ids import resolve
from state.sessions.session import SessionInfo
from tools.errors import ToolError

IDS = ["20261201-101500-a1b2", "20261202-093000-c3d4", "20261202-093012-e5f6"]


def test_prefixes_and_last() -> None:
    assert resolve(IDS, "20261201") == IDS[0] and resolve(IDS, "20261202-093012") == IDS[2]
    assert resolve(IDS, IDS[1]) == IDS[1]
    assert (
        resolve(IDS, "last") == IDS[2]
        and resolve(IDS, "last~1") == IDS[1]
        and resolve(IDS, "last~2") == IDS[0]
    )
    with pytest.raises(ToolError, match=r"'20261202-0930' is the start of several sessions: 20261202-093000"):
        resolve(IDS, "20261202-0930")
    with pytest.raises(ToolError, match=r"no session 'zz' of this machine in the store \(perfloop sessions"):
        resolve(IDS, "zz")
    with pytest.raises(ToolError, match="last~3: the store holds 3 session"):
        resolve(IDS, "last~3")


def test_shorthands_name_only_this_machines_sessions() -> None:
    """`last` and prefixes skip another machine's (or a planted) session; its full id still names it."""
    mine = {IDS[0], IDS[1]}
    assert resolve(IDS, "last", mine) == IDS[1] and resolve(IDS, "last~1", mine) == IDS[0]
    assert resolve(IDS, "20261202-0930", mine) == IDS[1]  # IDS[2] shares the prefix but is not ours
    assert resolve(IDS, IDS[2], mine) == IDS[2]
    with pytest.raises(ToolError, match="last~2: the store holds 2 session.s. of this machine"):
        resolve(IDS, "last~2", mine)


def test_the_sessions_table_never_cuts_an_id() -> None:
    infos = [
        SessionInfo(
            id=i,
            created_at=datetime(2026, 12, 2, 9, 30),
            target_name="a long target name that must wrap rather than push the id out",
            status="done",
            host="gpu-box-01.example.org",
            target_path=Path("t.toml"),
            repo=Path("/srv/repo"),
        )
        for i in IDS
    ]
    out = io.StringIO()
    render.sessions(Console(file=out, width=80, color_system=None), infos, {})  # as piped: 80 columns
    text = out.getvalue()
    assert all(i in text for i in IDS), text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_last_orders_this_machines_sessions_by_local_data_not_the_stores_created_at(tmp_path) -> None:
    """Issue 56: a store peer rewrites `created_at` so that an older session of this machine comes
    last in the store's order (`list_sessions`); `last` still names the newest made here."""
    from agent.cli.ids import local_order

    old, new = "20261201-101500-a1b2", "20261203-090000-c3d4"
    for i in (old, new):
        (tmp_path / "sessions" / i).mkdir(parents=True)
    store_order = [new, old]  # the peer made `old` the newest by created_at
    assert resolve(store_order, "last", {old, new}) == old  # what ordering by the store gives
    ordered = local_order(store_order, tmp_path)
    assert ordered == [old, new] and resolve(ordered, "last", {old, new}) == new
