"""The README's commands are the tests' commands: every command line in its ```bash blocks is read
here and checked against the real CLI (its sub-command exists, `-h` works, every option it uses is
one the command takes) and the Makefile (`make -n TARGET`), so the guide cannot drift from the tool.
The README stays a guide: at most ~250 lines."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from agent.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def commands() -> list[str]:
    """The command lines of the README's ```bash blocks, comments dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), flags=re.M | re.S)
    lines = [line.split("  #")[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_is_a_guide() -> None:
    assert len(README.read_text().splitlines()) <= 250
    cmds = commands()
    assert cmds[:2] == ["make demo", "make test"]  # CI and users start with these two
    assert sum(c.startswith("perfloop ") for c in cmds) >= 10


def test_every_make_target_exists() -> None:
    for line in commands():
        if line.startswith("make "):
            proc = subprocess.run(["make", "-n", *line.split()[1:]], cwd=ROOT, capture_output=True, text=True)
            assert proc.returncode == 0, (line, proc.stderr)


def test_every_perfloop_command_and_option_exists() -> None:
    root: Any = typer.main.get_command(app)  # typer vendors its own click: duck-typed groups
    for line in commands():
        if not line.startswith("perfloop "):
            continue
        words = shlex.split(line)[1:]
        cmd, path = root, []
        while hasattr(cmd, "commands") and words and words[0] in cmd.commands:
            path.append(words[0])
            cmd = cmd.commands[words.pop(0)]
        assert path and not hasattr(cmd, "commands"), f"{line}: no such command"
        out = CliRunner().invoke(app, [*path, "-h"])
        assert out.exit_code == 0, (line, out.output)
        takes = {name for p in cmd.params for name in p.opts if name.startswith("-")}
        used = {w.split("=")[0] for w in words if w.startswith("-")}
        assert used <= takes, f"{line}: {sorted(used - takes)} not options of perfloop {' '.join(path)}"


def test_make_demo_installs_no_test_tools() -> None:
    """`make demo` (a user's first command) installs perfloop alone; the test extras (pytest, ruff,
    mypy, playwright) come with the targets that lint or test."""

    def recipe(target: str) -> str:
        proc = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    demo = recipe("demo")
    assert "pip install -q -e .\n" in demo and ".[test]" not in demo, demo
    assert ".[test]" in recipe("lint")


def test_make_demo_and_the_readme_say_how_to_run_perfloop_after_it() -> None:
    """Issue 57: after `make demo`, `perfloop sessions` was "command not found" (perfloop is in
    .venv) and nothing said to use .venv/bin/perfloop or activate the venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", "demo"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    lines = [x for x in proc.stdout.strip().splitlines() if not x.startswith("make")]
    last = lines[-1]  # what `make demo` runs last, even when the demo fails
    assert "perfloop demo; status=$?; echo" in last and "exit $status" in last, last
    assert ".venv/bin/perfloop sessions" in last and "source .venv/bin/activate" in last, last
    text = README.read_text()
    assert "run `.venv/bin/perfloop\nsessions`" in text and "`source .venv/bin/activate`" in text
