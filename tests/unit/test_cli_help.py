"""Help is plain text with real metavars: square brackets shown as written (Rich markup once ate
`[search]`), choices instead of `<str>` / `<list[Path]>`, `-h` as `--help`, and `--version`."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from agent.cli import app


def test_help_is_plain_text_with_choices() -> None:
    out = CliRunner().invoke(app, ["run", "-h"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # help is wrapped at 80 columns
    assert "the launch options of the target's [search]" in text and "the target's [proposer] mode" in text
    assert "--approve auto|manual" in text and "--playbooks DIR" in text and "TARGET.toml" in text
    assert "--proposer playbook|llm|auto|search" in text
    assert "<list[Path]>" not in text and "<bool>" not in text
    demo = " ".join(CliRunner().invoke(app, ["demo", "-h"]).output.split())
    assert "--device cpu|cuda" in demo and "--preset cpu|glm5" in demo


def test_version() -> None:
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output == f"perfloop {version('perfloop')}\n"


def test_dash_v_and_help_as_a_command() -> None:
    """`perfloop -V` and `perfloop help [COMMAND]` (both once errors), through the script's `main`."""
    import subprocess
    import sys

    def script(*argv: str) -> subprocess.CompletedProcess:
        code = f"import sys; sys.argv = ['perfloop', *{list(argv)!r}]; from agent.cli import main; main()"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)

    short = script("-V")
    assert short.returncode == 0 and short.stdout == f"perfloop {version('perfloop')}\n", short.stderr
    listed = script("help")
    assert listed.returncode == 0 and "calibrate" in listed.stdout and "Usage: perfloop" in listed.stdout
    run_help = script("help", "run")
    assert run_help.returncode == 0 and "TARGET.toml" in run_help.stdout and "--approve" in run_help.stdout
