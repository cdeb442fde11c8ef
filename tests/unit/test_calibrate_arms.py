"""`perfloop calibrate` with `[decide] arms = "auto"` resolves the arms as a session does (the target's
`two_servers_fit`, else `host.memory_fit` on its first launch) and calibrates for them, saying
which; servers, measurements and the fit from a script, the A/A store for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.decision.calibration.calibrate import calibrate, resolve_arms
from tests.unit.aa_door import ScriptedDoor, runtime_of, session


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))


def test_auto_where_two_servers_do_not_fit_calibrates_single_launches(tmp_path: Path) -> None:
    """1.1 GiB free beside a 1 GiB server (1.2 GiB needed with the margin): alternating; the launch the fit was measured on is the first A/A launch: two launches in all,
    one at a time, each measured and kept, none measured in pairs."""
    target = session(tmp_path, arms="auto").target
    door = ScriptedDoor({1: 10.0, 2: 10.5}, free_bytes=int(1.1 * (1 << 30)))
    lines: list[str] = []
    noise, arms = calibrate(door, target, "calibrate-1", tmp_path / "c", "python3", 2, lines.append)
    names = door.names()
    assert arms == "alternating" and names[:3] == ["repo.snapshot", "server.launch", "host.memory_fit"]
    assert names.count("server.launch") == 2 and names.count("bench.measure") == 2
    assert names.count("aa.record") == 2 and "bench.measure_pair" not in names and door.running == set()
    assert lines[0].startswith("arms auto -> alternating (two servers do not fit: host memory has 1.1 GiB")
    assert lines[0].endswith(": calibrating alternating arms (single launches)")
    assert lines[1].startswith("launch 1/2: median TPOT 10.0 ms") and lines[2].startswith("launch 2/2")
    assert not noise.paired and noise.launches == 2 and noise.df == 1


def test_auto_where_two_servers_fit_resolves_to_pairs_on_the_first_launch(tmp_path: Path) -> None:
    state = session(tmp_path, arms="auto")
    door = ScriptedDoor({1: 10.0}, free_bytes=8 << 30)
    lines: list[str] = []
    resolved = resolve_arms(state, runtime_of(door), lines.append)
    assert resolved.arms is not None and resolved.arms.arms == "interleaved"
    assert resolved.server is not None and resolved.server.launch_number == 1 and resolved.launches == 1
    assert door.names() == ["repo.snapshot", "server.launch", "host.memory_fit"] and door.running == {1}
    why = resolved.arms.why
    assert lines == [f"arms auto -> interleaved ({why}): calibrating interleaved arms (pairs of launches)"]


def test_the_target_file_decides_without_a_launch_and_named_arms_are_kept(tmp_path: Path) -> None:
    said = session(tmp_path, arms="auto", two_servers_fit=False)
    door = ScriptedDoor({})
    lines: list[str] = []
    resolved = resolve_arms(said, runtime_of(door), lines.append)
    assert resolved.arms is not None and resolved.arms.arms == "alternating" and resolved.server is None
    assert door.calls == [] and "([decide] two_servers_fit)" in lines[0]
    named = session(tmp_path, arms="sequential")
    assert resolve_arms(named, runtime_of(door), lines.append) is named and len(lines) == 1


def test_a_failed_fit_stops_the_launch_it_was_measured_on(tmp_path: Path) -> None:
    door = ScriptedDoor({}, fit_error=True)
    with pytest.raises(RuntimeError, match="nvidia-smi failed"):
        resolve_arms(session(tmp_path, arms="auto"), runtime_of(door), print)
    assert door.names()[-1] == "server.stop" and door.running == set()


def test_calibrate_says_what_it_will_launch_before_it_starts() -> None:
    """`calibrate --launches 2` once ran 4 launches in 240 s unannounced (interleaved: pairs)."""
    from agent.cli.commands.calibrate import plan

    assert plan("interleaved", 2, 300).startswith("calibrate: 4 server launches (2 A/A pairs side by side")
    assert "up to 300 s" in plan("interleaved", 2, 300)
    assert plan("sequential", 2, 60).startswith("calibrate: 2 server launches, one after another")
    assert "or 4 (2 A/A pairs side by side) if arms = auto resolves to interleaved" in plan("auto", 2, 60)


def test_run_says_what_a_session_will_cost_and_why_it_launches_again() -> None:
    from agent.cli.commands.loop import session_plan
    from agent.cli.target import load_target
    from tests.unit.test_target import DEMO_TOML

    target = load_target(DEMO_TOML)
    inter = target.model_copy(update={"decide": target.decide.model_copy(update={"arms": "interleaved"})})
    text = session_plan(inter, 3)
    assert text.startswith(
        "plan: the baseline's launch, then up to 3 round(s); each candidate costs 1 launch (+1"
    )
    assert "confirmed on a second pair" in text and f"up to {inter.decide.looks} look(s)" in text
    seq = target.model_copy(update={"decide": target.decide.model_copy(update={"arms": "sequential"})})
    assert "+1" not in session_plan(seq, 1) and "second pair" not in session_plan(seq, 1)


def test_calibrate_says_how_long_it_expects_from_the_launches_this_host_timed(tmp_path: Path) -> None:
    """Issue 57: 12 launches "up to 300 s each" and no expected time; issue 63: "at least 25 s" from
    a session's starts alone, 516 s taken (the measurement left out). A session's timed start, its
    baseline's measurement per request and its stop give each launch; the store's earlier
    calibration of the target on this host (2 launches over 150 s: 75 s a launch) gives it whole;
    nothing timed, a guess said as one."""
    from datetime import UTC, datetime, timedelta

    from agent.cli.commands.calibrate import Timed, expected, launch_count, timed
    from state.door.records import ToolCallRecord
    from state.measurement.aa import AASample
    from tools.store.sessions import SessionStore, perfloop_home

    store = SessionStore.open(perfloop_home())  # the autouse fixture's, made here
    t0 = datetime(2026, 12, 5, tzinfo=UTC)
    sent: dict[str, dict[str, list[dict]]] = {"measurement": {"requests": [{}] * 9}}  # in part

    def calls(sid: str, spans: list[tuple[str, float, float]], node: str = "calibrate") -> None:
        for seq, (name, at, took) in enumerate(spans):
            store.record(
                ToolCallRecord(
                    session_id=sid,
                    seq=seq,
                    node=node,
                    name=name,
                    input={"config": {"warmup_requests": 1}} if name == "bench.measure" else {},
                    output=sent if name == "bench.measure" else {},
                    error=None,
                    started_at=t0 + timedelta(seconds=at),
                    duration_s=took,
                )
            )
        store.add_aa(
            AASample(target_key="k", group="g", session_id=sid, launch_number=1, location_log=2.0, requests=6)
        )

    assert timed(store, "k") == Timed([], [], [], [])
    assert expected(launch_count("sequential", 6), Timed([], [], [], []), 10, 300) == (
        "expected: about 6 min at a guessed 60 s a launch (no launch of this target timed on this host "
        "yet); at most 30 min if every start took its 300 s",
        360.0,
    )
    assert expected(launch_count("interleaved", 6), Timed([], [50.0], [], []), 10, 300)[0].startswith(
        "expected: at least 10 min, 50 s a start (the median of 1 earlier start(s)"
    )
    session = [("server.launch", 0.0, 50.0), ("bench.measure", 50.0, 30.0), ("server.stop", 80.0, 4.0)]
    calls("20261205-000000-abcd", session, node="baseline")  # a session's baseline: 3 s a request
    t = timed(store, "k")
    assert t == Timed([], [50.0], [4.0], [3.0])
    said, seconds = expected(launch_count("sequential", 2), t, 10, 300)
    assert (
        said.startswith(
            "expected: about 2 min 48 s, 84 s a launch: a start 50 s, 10 requests at 3.00 s, a stop 4 s"
        )
        and seconds == 168.0
    ), said
    launches = [("server.launch", 0, 52.0), ("bench.measure", 52, 20.0), ("server.stop", 72, 3.0)]
    calls("calibrate-1", [*launches, *((n, at + 75, d) for n, at, d in launches)])
    t = timed(store, "k")
    assert t.per_launch == [75.0] and sorted(t.starts) == [50.0, 52.0, 52.0]
    said, seconds = expected(launch_count("auto", 6), t, 10, 300)
    assert (
        said.startswith(
            "expected: about 7 min 30 s (15 min if interleaved), 75 s a launch (start and measurement), "
            "the median of 1 earlier calibration(s) of this target on this host; at most 60 min"
        )
        and seconds == 450.0
    ), said
    store.close()


def test_a_ctrl_c_no_session_caught_is_one_line_not_silence(capsys: pytest.CaptureFixture[str]) -> None:
    """Typer turns a KeyboardInterrupt into exit 130 with nothing said (how `calibrate` ended on
    Ctrl-C, issue 57); a command body interrupted where no session caught the signal says so."""
    import typer

    from agent.cli.running import run_command

    def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as ended:
        run_command(body)
    assert ended.value.exit_code == 130
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted by SIGINT"]
