"""`perfloop analyze | diagnose | diff` start without the loop's heavy modules (LangGraph and the
session store, openai, paramiko, git, torch): reading a trace should not pay for them."""

import json
import subprocess
import sys
from pathlib import Path

from agent.cli import ANALYSIS_COMMANDS
from agent.cli.commands import analysis

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests/data/traces/full_pool_cast_cuda.json.gz"
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


def test_other_commands_still_get_the_full_app() -> None:
    mods, printed = loaded("sessions", "--help")
    assert "langgraph" in {m.split(".")[0] for m in mods}
    assert "sessions" in printed.lower()


def test_the_light_commands_are_the_analysis_group() -> None:
    assert tuple(analysis.COMMANDS) == ANALYSIS_COMMANDS


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
