"""`perfloop` starts without the loop's heavy modules (LangGraph and the session store, the loop's
state, openai, paramiko, git, torch, numpy): `--version`, `-h` and a bad target file answer at
once, and `analyze | diagnose | diff` read a trace without paying for the loop; `sessions`, and
`show` and `report` of an imported recording, read the store without LangGraph, and `replay` loads
the graph alone (issue 63). Checked by the modules a fresh interpreter loaded, not by timing, so it
holds on a slow machine too (benchmarks/startup.py times it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.cli import ALONE, ANALYSIS_COMMANDS
from agent.cli.commands import analysis, report, sessions

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests/data/traces/full_pool_cast_cuda.json.gz"
RECORDING = ROOT / "tests/data/sessions/demo-session.json.gz"
HEAVY = (
    "langgraph",
    "langchain_core",
    "openai",
    "paramiko",
    "git",
    "torch",
    "agent.sessions.runner",
    "agent.graph",
)
PROBE = """
import atexit, json, sys
heavy = {heavy!r}
atexit.register(lambda: print("LOADED " + json.dumps(sorted(m for m in sys.modules if m.startswith(heavy)))))
sys.argv = ["perfloop", *{argv!r}]
from agent.cli import main
main()
"""


def loaded(*argv: str) -> tuple[list[str], str]:
    """(heavy modules loaded, stdout before them) after running `perfloop ARGV` in a fresh interpreter."""
    code = PROBE.format(heavy=HEAVY, argv=list(argv))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    head, _, tail = out.stdout.rpartition("LOADED ")
    return json.loads(tail), head


def test_analyze_and_diagnose_do_not_import_the_loop() -> None:
    mods, printed = loaded("analyze", str(TRACE), "--json", "--top", "3")
    assert mods == []
    assert json.loads(printed)["ops"][0]["name"] == "aten::copy_"  # and it really analyzed the trace
    mods, printed = loaded("diagnose", str(TRACE), "--json")
    assert mods == []
    assert json.loads(printed)["findings"]


START = (*HEAVY, "numpy", "state.sessions.loop", "agent.sessions", "tools.trace")
"""What a command line that runs nothing must not load: the loop, its state, the trace readers."""


STARTED = """
import atexit, json, os, sys
heavy = {heavy!r}
write = lambda: open(os.environ["LOADED_TO"], "w").write(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))
atexit.register(write)
sys.argv = ["perfloop", *{argv!r}]
from agent.cli import main
main()
"""


def started(
    tmp: Path, *argv: str, heavy: tuple[str, ...] = START
) -> tuple[list[str], subprocess.CompletedProcess]:
    """(the modules of `heavy` loaded, the process) after `perfloop ARGV` in a fresh interpreter,
    its store under `tmp`."""
    env = {**os.environ, "PERFLOOP_HOME": str(tmp / "home"), "LOADED_TO": str(tmp / "loaded.json")}
    env |= {"PERFLOOP_PROGRESS": "off"}
    code = STARTED.format(heavy=heavy, argv=list(argv))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env
    )
    return json.loads((tmp / "loaded.json").read_text()), out


def test_version_help_and_a_bad_target_file_load_nothing_of_the_loop(tmp_path: Path) -> None:
    for argv in (["--version"], ["-V"], ["-h"], ["run", "-h"], ["calibrate", "-h"], ["sessions", "--help"]):
        mods, proc = started(tmp_path, *argv)
        assert mods == [], f"perfloop {' '.join(argv)} loaded {mods}"
        assert proc.returncode == 0 and (proc.stdout.startswith("perfloop ") or "Usage:" in proc.stdout)
    bad = tmp_path / "t.toml"
    bad.write_text('name = "x"\nkind = "sglang"\nrepo = "."\nrepoo = 1\n', encoding="utf-8")
    for command in ("run", "calibrate"):
        mods, proc = started(tmp_path, command, str(bad))
        assert mods == [], f"perfloop {command} with a bad target file loaded {mods}"
        assert proc.returncode == 2 and "unknown key `repoo`; did you mean `repo`?" in proc.stderr, (
            proc.stderr
        )


def test_listing_sessions_reads_the_index_alone(tmp_path: Path) -> None:
    """Issue 63: `sessions --json` imported the runner, LangGraph, the graph, langchain's tracers
    and langsmith to list sessions (4.8-6.9 s); it reads the store's index alone now."""
    mods, proc = started(tmp_path, "sessions", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    assert (tmp_path / "home").is_dir()  # it did open the store
    assert mods == [], f"perfloop sessions --json loaded {mods}"


LOOP = (*HEAVY, "langsmith", "agent.sessions.reading.replaying", "agent.sessions.checkpoint", "psycopg")
"""What reading a session's states without replaying it must not load: LangGraph, the graph, the
checkpointers and their database drivers, the SSH and git layers."""
REPLAY = (
    "agent.sessions.runner",
    "agent.sessions.checkpoint",
    "psycopg",
    "paramiko",
    "git",
    "openai",
    "torch",
)
"""What a replay in memory must not load besides LangGraph and the graph (agent/sessions/reading/replaying.py)."""


def test_show_and_report_of_an_imported_recording_read_its_kept_replay(tmp_path: Path) -> None:
    """Issue 63: `show` and `report` of an imported recording replayed it, LangGraph and the whole
    graph loaded (3-5 s); they read the states its import kept (agent/sessions/reading/replayed.py), the
    same as a replay gives, and `replay` loads the graph without the checkpointers, the database
    drivers, the SSH or git layers (its one unavoidable cost: LangGraph)."""
    mods, proc = started(tmp_path, "import", str(RECORDING), heavy=LOOP)
    assert proc.returncode == 0 and "imported session" in proc.stdout, proc.stderr
    for argv in (["sessions"], ["sessions", "--json"]):  # rows beside their signatures: no state read
        mods, proc = started(tmp_path, *argv, heavy=(*LOOP, "state.sessions.loop"))
        assert proc.returncode == 0 and mods == [], (mods, proc.stderr)
    for argv in (
        ["show", "last"],
        ["show", "last", "--json"],
        ["report", "last", "-o", str(tmp_path / "r.html")],
    ):
        mods, proc = started(tmp_path, *argv, heavy=LOOP)
        assert proc.returncode == 0, proc.stderr
        assert mods == [], f"perfloop {' '.join(argv)} loaded {mods}"
    kept = json.loads(started(tmp_path, "show", "last", "--json", heavy=LOOP)[1].stdout)
    for states in (tmp_path / "home" / "replayed").iterdir():  # none kept: `show` replays it again
        states.unlink()
    mods, proc = started(tmp_path, "show", "last", "--json", heavy=LOOP)
    assert "agent.graph" in mods and "agent.sessions.runner" not in mods, mods
    replayed = json.loads(proc.stdout)
    for shown in (kept, replayed):  # a transition's time is its replay's, not the session's
        shown["transitions"] = [{**t, "at": None} for t in shown["transitions"]]
    assert kept == replayed and kept["decisions"]
    assert [p.name for p in (tmp_path / "home" / "replayed").iterdir()] == [
        f"{kept['session']['id']}.jsonl.gz"
    ]
    mods, proc = started(tmp_path, "replay", "last", heavy=REPLAY)
    assert proc.returncode == 0 and "transitions: same" in proc.stderr, proc.stderr
    assert mods == [], f"perfloop replay loaded {mods}"


def test_the_light_commands_are_the_analysis_group() -> None:
    assert tuple(analysis.COMMANDS) == ANALYSIS_COMMANDS
    assert {"sessions": tuple(sessions.COMMANDS), "report": tuple(report.COMMANDS)} == ALONE


def test_an_analysis_command_leaves_with_its_exit_code_and_its_output_flushed(tmp_path: Path) -> None:
    """`main()` ends the analysis commands with os._exit after the exit handlers (test above) and a
    flush: an error keeps typer's exit code and line; a large JSON document reaches the pipe whole."""
    code = "import sys; sys.argv = ['perfloop', *sys.argv[1:]]; from agent.cli import main; main()"
    bad = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert bad.returncode == 2 and "none.json: cannot read the trace" in bad.stderr
    good = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(TRACE), "--json", "--top", "1000", "--by", "op"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert good.returncode == 0 and len(json.loads(good.stdout)["ops"]) >= 5  # parsed: it came whole
