"""The `perfloop` command line (Typer): every command, listed once, by group.

Each group module (loop, calibrate, sessions, report, analysis, sglang) holds its commands as plain functions and a
`COMMANDS` table of name -> function; common.py holds what they share. Nothing here is imported by
a group module, so the package has no import cycle.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from agent.cli import analysis, calibrate, host, loop, report, sessions, sglang
from tools.door.db import STORE_ENV

GROUPS = (loop, calibrate, sessions, report, analysis, sglang)


def build() -> typer.Typer:
    """The `perfloop` app: each group's commands, then the `playbook` and `host` sub-command groups."""
    cli = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        help="Profile, diagnose, patch and measure an LLM inference server, in a loop.",
    )

    @cli.callback()
    def main(
        store: Annotated[
            str | None,
            typer.Option(
                "--store",
                help="Session store: a postgresql://USER:PASSWORD@HOST:PORT/DB URL shared by many "
                f"machines (default ${STORE_ENV}, else SQLite under $PERFLOOP_HOME).",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        if store is not None:  # the tools that open the store (aa.record) read it from there too
            os.environ[STORE_ENV] = store

    for group in GROUPS:
        for name, fn in group.COMMANDS.items():
            cli.command(name)(fn)
    cli.add_typer(sglang.playbook_app, name="playbook")
    cli.add_typer(host.host_app, name="host")
    return cli


app = build()
