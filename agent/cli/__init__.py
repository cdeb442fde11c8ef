"""The `perfloop` command line (Typer): every command, listed once, by group.

Each group module (loop, calibrate, sessions, report, analysis, sglang, host, evaluate) holds its
commands as plain functions and a `COMMANDS` table of name -> function (the `playbook`, `host` and
`eval` sub-command groups are Typer apps); options.py holds the option types they share. Nothing
here is imported by a group module, so the package has no import cycle.

Start-up is light: a group module imports typer, rich, its option types and our small helpers at
its top, and the heavy parts (LangGraph and the session store, the loop's state, git, paramiko,
the trace readers with numpy) inside the commands that use them, so `--version`, `-h` and a bad
target file answer in a fraction of a second (tests/unit/test_cli_startup.py checks which modules
load; benchmarks/startup.py times it). `main()` (the `perfloop` script) builds an app of the
analysis group alone for `analyze`, `diagnose` and `diff` and leaves them without tearing the
interpreter down (`_leave`), and one of the sessions or report group alone (with the global
options) for theirs, so `show` or `report` imports and converts no other group's commands;
`app` (the full app, what tests and scripts import) is built on first use.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import Annotated, Any, NoReturn

import typer

ANALYSIS_COMMANDS = ("analyze", "diagnose", "diff")
"""Commands served by the analysis group alone (kept equal to analysis.COMMANDS by a test)."""
ALONE = {
    "sessions": ("sessions", "show", "replay", "export", "import", "fork", "abandon"),
    "report": ("report", "serve"),
}
"""Groups whose commands a `perfloop` run builds alone, by the command named first (kept equal to
each group's COMMANDS by a test)."""


def print_version(value: bool) -> None:
    """`--version`: print it and exit, whatever else the command line says."""
    if value:
        from importlib.metadata import version

        print(f"perfloop {version('perfloop')}")
        raise typer.Exit(0)


def store_option(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Session store: a postgresql://USER:PASSWORD@HOST:PORT/DB URL shared by many "
            "machines (default $PERFLOOP_STORE, else SQLite under $PERFLOOP_HOME).",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            is_eager=True,
            callback=print_version,
            help="Print perfloop's version and exit.",
        ),
    ] = False,
) -> None:
    """The global options: `--store` (the tools that open the store, aa.record, read it from the
    environment too) and `--version`."""
    if store is not None:
        from urllib.parse import urlsplit

        try:
            url = urlsplit(store)
            password = url.password if url.scheme.startswith("postgres") else None  # else refused anyway
        except ValueError:
            password = None
        if password:
            print(
                "perfloop: warning: --store holds a password, visible to other users in `ps`; prefer "
                "$PERFLOOP_STORE (or a ~/.pgpass file)",
                file=sys.stderr,
                flush=True,
            )
        os.environ["PERFLOOP_STORE"] = store


def build(*, analysis_only: bool = False, alone: str | None = None) -> typer.Typer:
    """The `perfloop` app: each group's commands, then the `playbook` and `host` sub-command groups;
    with `analysis_only`, the analysis commands alone; with `alone` (a key of ALONE), that group's
    commands and the global options alone."""
    from importlib import import_module

    cli = typer.Typer(
        add_completion=False,
        rich_markup_mode=None,  # help is plain text: `[search]`, `([slots, 1, 576])` shown as written
        context_settings={"help_option_names": ["-h", "--help"]},
        no_args_is_help=True,
        help="Profile, diagnose, patch and measure an LLM inference server, in a loop.",
    )
    if analysis_only:
        groups: tuple[Any, ...] = (import_module("agent.cli.commands.analysis"),)
    elif alone is not None:
        groups = (import_module(f"agent.cli.commands.{alone}"),)
        cli.callback()(store_option)
    else:
        from agent.cli.commands import analysis, calibrate, evaluate, host, loop, report, sessions, sglang
        from tools.store.db import STORE_ENV

        groups = (loop, calibrate, sessions, report, analysis, sglang)

        cli.callback()(store_option)
        assert STORE_ENV == "PERFLOOP_STORE", "keep store_option's help and variable in step"

    for group in groups:
        for name, fn in group.COMMANDS.items():
            cli.command(name)(fn)
    if not analysis_only and alone is None:
        cli.add_typer(sglang.playbook_app, name="playbook")
        cli.add_typer(host.host_app, name="host")
        cli.add_typer(evaluate.eval_app, name="eval")
    return cli


def main() -> None:
    """The `perfloop` script: the analysis commands without the loop's imports, else the full app.
    Everything perfloop writes (the store, logs, session folders, traces, and what its servers
    write) is for this user alone: umask 077, set here, the one place.

    However the command ends, what it allocated is frozen out of the cyclic garbage collector
    before the interpreter exits (`gc.freeze`): exit handlers, thread joins and module teardown run
    as usual, but the collections at shutdown no longer walk every object LangGraph, pydantic and
    the store left, 0.3 s of CPU a command (benchmarks/startup.py)."""
    try:
        _command()
    finally:
        gc.freeze()


def _command() -> None:
    os.umask(0o077)
    if sys.argv[1:2] == ["help"]:  # `perfloop help [COMMAND]`: the command's -h (the whole list without)
        sys.argv[1:] = [*sys.argv[2:], "-h"]
    if sys.argv[1:] in (["-V"], ["--version"]):  # the answer alone, without building the app
        from importlib.metadata import version

        print(f"perfloop {version('perfloop')}")
        return
    named = sys.argv[1] if len(sys.argv) > 1 else None
    if named not in ANALYSIS_COMMANDS:
        build(alone=next((group for group, names in ALONE.items() if named in names), None))()
        return
    try:
        build(analysis_only=True)()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    _leave(code)


def _leave(code: int) -> NoReturn:
    """End a read-only analysis command: run the exit handlers and flush the output as a normal
    exit would, then leave without tearing down every module and object the analysis left (numpy's,
    pydantic's: a fiftieth of `perfloop analyze` on a 640 MB trace). It wrote no file and leaves
    no process; `main()` alone does this, never the `app` that tests run in their own process."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the output had nowhere to go anyway
            pass
    os._exit(code)


_built: dict[str, typer.Typer] = {}


def __getattr__(name: str) -> typer.Typer:
    """`app`: the full app, built once on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "app" not in _built:
        _built["app"] = build()
    return _built["app"]
