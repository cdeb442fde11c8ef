"""What a user meets at the front door (issue 63): `show`, `sessions` and `replay` piped (`| cat`,
a log) at $COLUMNS unset and at 80 print no line over 80 columns and every id whole; on a terminal
a name is never folded mid-word; every `next:` line runs as written when perfloop is not on $PATH;
the spinner and the messages never share a line and no spinner frame is left above a table;
`--json` gives a session's headline in one shape across `sessions`, `show` and `replay`.
The real CLI on a real store holding imported shipped recordings, a real pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import render
from agent.report.headline import HEADLINE_KEYS
from tools.store.sessions import SessionStore

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [
    ROOT / "benchmarks" / "h200-2026-11-30-interleaved" / "interleaved-session.json.gz",
    ROOT / "tests" / "data" / "sessions" / "demo-session.json.gz",
]
BIN = Path(sys.executable).parent
PERFLOOP = BIN / "perfloop"


def perfloop(home: Path, *args: str, columns: str | None = None, **kw: object) -> subprocess.CompletedProcess:
    """The real CLI piped (not a terminal), $COLUMNS as given (else unset), perfloop not on $PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env |= {"PERFLOOP_HOME": str(home), "PERFLOOP_PROGRESS": "off", "PATH": "/usr/bin:/bin"}
    if columns is not None:
        env["COLUMNS"] = columns
    done = subprocess.run(
        [str(PERFLOOP), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        **kw,
    )  # type: ignore[call-overload]
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("door") / "home"
    for recording in RECORDINGS:
        perfloop(home, "import", str(recording))
    return home


SID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")


def infos(home: Path) -> list:
    store = SessionStore.open(home)
    try:
        return store.list_sessions()
    finally:
        store.close()


@pytest.mark.parametrize("columns", [None, "80"])
def test_piped_output_fits_80_columns_with_every_id_whole(home: Path, columns: str | None) -> None:
    """Issue 63: piped, `show` was 885 columns wide (57 of 63 lines over 80), `replay` 499,
    `sessions` 131; `| cat` on an 80-column terminal wrapped each row into lines of box drawing."""
    listed = perfloop(home, "sessions", columns=columns).stdout
    printed = {"sessions": listed}
    for i in infos(home):
        assert i.summary is not None and i.summary.commits and i.summary.accepted
        shown = printed[f"show {i.id}"] = perfloop(home, "show", i.id, columns=columns).stdout
        replayed = printed[f"replay {i.id}"] = perfloop(home, "replay", i.id, columns=columns).stdout
        for text, whole in (
            (listed, [i.id, i.created_at.strftime("%Y-%m-%d %H:%M"), *i.summary.accepted]),
            (shown, [i.id, *(c[:10] for c in i.summary.commits), *i.summary.accepted]),
            (replayed, [i.id, *(c[:10] for c in i.summary.commits), *i.summary.accepted]),
        ):  # each id, date and name appears whole, on one line
            for word in whole:
                assert any(word in line for line in text.splitlines()), (word, text)
        assert f"perfloop session {i.id} (done)" in shown.splitlines()
    for name, text in printed.items():
        lines = text.splitlines()
        assert len(lines) > 2, name
        wide = [line for line in lines if len(line) > 80]
        assert not wide, f"{name}: {len(wide)} line(s) over 80 columns: {wide[:3]}"
        assert not any(ch in text for ch in "┏┃│─━"), f"{name}: box drawing piped"
    rows = [line for line in listed.splitlines() if SID.match(line) and "  " in line]
    assert len(rows) == len(RECORDINGS), listed
    assert all(re.search(r"  \d{4}-\d\d-\d\d \d\d:\d\d  ", r) for r in rows), rows


@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_on_a_terminal_names_are_never_folded_mid_word(home: Path, width: int) -> None:
    """At a terminal's width a long name (`kv-cache-full-pool-cast`) was folded into `kv-cache-f`,
    `ull-pool-c`, `ast`: the table's columns are never narrower than their longest word now."""
    listed = infos(home)
    out = io.StringIO()
    render.sessions(Console(file=out, width=width, force_terminal=True, color_system=None), listed, {})
    text = out.getvalue()
    for word in [
        "kv-cache-full-pool-cast",
        *(i.id for i in listed),
        listed[0].created_at.strftime("%Y-%m-%d %H:%M"),
    ]:
        assert any(word in line for line in text.splitlines()), (width, word, text)
    assert max(map(len, text.splitlines())) <= width, text
    for info in listed:
        assert info.summary is not None
        out = io.StringIO()
        render.summary(Console(file=out, width=width, force_terminal=True, color_system=None), info.summary)
        lines = out.getvalue().splitlines()
        assert any("kv-cache-full-pool-cast" in line for line in lines) and info.id in lines[0]
        assert not lines[0].startswith(" "), "the title is left, not centred behind spaces"


def test_every_next_line_runs_as_written_without_perfloop_on_path(home: Path, tmp_path: Path) -> None:
    """`next: perfloop show ...` failed where perfloop is not on $PATH (a venv not activated): the
    lines name the perfloop that runs, relative to the current directory when under it."""
    sid = infos(home)[0].id
    project = tmp_path / "project"  # a checkout with its venv, perfloop run as `.venv/bin/perfloop`
    project.mkdir()
    (project / ".venv").symlink_to(BIN.parent)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env |= {"PERFLOOP_HOME": str(home), "PERFLOOP_PROGRESS": "off", "PATH": "/usr/bin:/bin"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs = [  # (where the user is, how they ran it, what the lines must say)
        (project, ".venv/bin/perfloop", ".venv/bin/perfloop"),
        (tmp_path, "project/.venv/bin/perfloop", "project/.venv/bin/perfloop"),
        (elsewhere, str(project / ".venv/bin/perfloop"), str(project / ".venv/bin/perfloop")),
    ]
    for cwd, argv0, said in runs:
        out = subprocess.run(
            [argv0, "show", sid], env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=True
        ).stdout
        lines = out.splitlines()
        at = next(n for n, line in enumerate(lines) if line.startswith("next: "))
        commands = [lines[at].removeprefix("next: ").strip(), lines[at + 1].strip()]
        assert all(c.startswith(said + " ") for c in commands), (argv0, commands)
        for command in commands:  # as a user pastes it, in the same directory, no perfloop on $PATH
            ran = subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True)
            assert ran.returncode == 0, (command, ran.stderr[-1000:])
        assert (cwd / "report.html").stat().st_size > 1000


def test_json_gives_one_headline_shape_across_sessions_show_and_replay(home: Path) -> None:
    """`--json` put the speedup in three shapes (`sessions[i].summary`, `show.session.summary`,
    `replay`); each has a `headline` object of the same keys now, with the same session and status."""
    listed = {s["id"]: s["headline"] for s in json.loads(perfloop(home, "sessions", "--json").stdout)}
    assert len(listed) == len(RECORDINGS)
    for sid, head in listed.items():
        shown = json.loads(perfloop(home, "show", sid, "--json").stdout)
        replayed = json.loads(perfloop(home, "replay", sid, "--json").stdout)
        for got in (head, shown["headline"], shown["session"]["headline"], replayed["headline"]):
            assert tuple(got) == HEADLINE_KEYS, got
            assert got["session"] == sid and got["status"] == "done" and got["accepted"]
            assert isinstance(got["said"], str) and got["said"]
        assert head == shown["headline"]
        env = {k: v for k, v in os.environ.items() if k != "PERFLOOP_PROGRESS"} | {"PERFLOOP_HOME": str(home)}
        quiet = subprocess.run(
            [str(PERFLOOP), "show", sid, "--json"], env=env, capture_output=True, text=True
        )
        assert quiet.returncode == 0 and quiet.stderr == "", (
            quiet.stderr
        )  # its replay to read it: no step line
        assert shown["session"]["summary"]["speedup"] == head["speedup"]  # the older key, kept


SPIN = """
import sys, time
from agent.cli.output import console, table
from agent.cli.running import run_command, status_line
from tools import progress

def body():
    progress.report("calibrate: launch 1/2")
    time.sleep(0.4)
    console().print("calibrate: a line printed by the command")
    progress.report("calibrate: launch 2/2")
    time.sleep(0.4)
    print("a plain line on stderr", file=sys.stderr)
    time.sleep(0.4)
    console().print(table("session", "status", rows=[("20261130-191508-c7d6", "done")]))
    status_line(False)  # as a command does before its question: the spinner stays off
    console().print("a question")
    time.sleep(0.4)

run_command(body)
"""


def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw` (carriage returns, line feeds, erase-line, cursor up)."""
    lines, row, col = [""], 0, 0
    for tok in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r\n|\r|\n)", raw):
        if tok in ("\r\n", "\n"):
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif tok == "\r":
            col = 0
        elif tok.startswith("\x1b["):
            if tok.endswith("K"):
                lines[row] = "" if tok == "\x1b[2K" else lines[row][:col]
            elif tok.endswith("A"):
                row = max(0, row - int(tok[2:-1] or 1))
        elif tok:
            lines[row] = lines[row][:col].ljust(col) + tok + lines[row][col + len(tok) :]
            col += len(tok)
    return [line.rstrip() for line in lines]


def test_the_spinner_and_messages_never_share_a_line(tmp_path: Path) -> None:
    """On a terminal a line printed while the spinner ran landed behind its text (`⠸ perfloop
    calibrate: ...`) and a spinner frame stayed above a table. Run in a real pseudo-terminal."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: the command's consoles see a terminal on stdout and stderr
        os.chdir(ROOT)
        os.environ.update({"PYTHONPATH": str(ROOT), "COLUMNS": "80", "PERFLOOP_HOME": str(tmp_path)})
        os.execv(sys.executable, [sys.executable, "-c", SPIN])
    raw = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        raw += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, raw[-2000:]
    text = raw.decode()
    assert "launch 1/2" in text and any(c in text for c in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), text  # it spun
    shown = [line for line in screen(text) if line]
    assert shown == [
        "calibrate: a line printed by the command",
        "a plain line on stderr",
        "session               status",
        "20261130-191508-c7d6  done",
        "a question",
    ], shown
    assert not any(c in text.rsplit("a question", 1)[1] for c in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), "the spinner came back"


def test_the_report_says_outputs_in_words_and_a_baseline_alone_once(home: Path) -> None:
    """The HTML report said `True` for identical outputs, and the page of a session paused before
    any candidate `TPOT 408.02 ms -> 408.02 ms` (the final figures are the baseline's own then)."""
    import html as escaping

    from agent.report.data import gather
    from agent.report.html import render_report
    from agent.sessions.runner import Sessions

    sid = infos(home)[0].id
    data = gather(Sessions(home), sid)

    def summary_text(page: str) -> str:
        table = re.search(r'<table id="summary">(.*?)</table>', page, flags=re.S)
        assert table is not None
        return escaping.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", table.group(1))))

    done = summary_text(render_report(data, link=lambda _p: None))
    assert "outputs identical to the baseline's" in done and "True" not in done, done
    s = data.summary
    paused = s.model_copy(
        update={"accepted": [], "rejected": [], "decision": None, "commits": [], "status": "paused"}
        | {"tpot_ms_after": s.tpot_ms_before, "ttft_ms_after": s.ttft_ms_before, "outputs_identical": None}
    )
    data.summary = paused
    shown = summary_text(render_report(data, link=lambda _p: None))
    before = f"{s.tpot_ms_before:.2f} ms"
    assert f"TPOT {before} (baseline; no candidate measured)" in shown, shown
    assert shown.count(before) == 1 and "→" not in shown.split("TTFT")[1].split("outputs")[0], shown
    assert "outputs not compared (no candidate kept)" in shown, shown
