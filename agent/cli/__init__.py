"""The `perfloop` command line (Typer): every command, listed once, by group.

Each group module (loop, sessions, analysis, sglang) holds its commands as plain functions and a
`COMMANDS` table of name -> function; common.py holds what they share. Nothing here is imported by
a group module, so the package has no import cycle.
"""

from __future__ import annotations

import typer

from agent.cli import analysis, calibrate, host, loop, sessions, sglang

GROUPS = (loop, calibrate, sessions, analysis, sglang)


def build() -> typer.Typer:
    """The `perfloop` app: each group's commands, then the `playbook` and `host` sub-command groups."""
    cli = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        help="Profile, diagnose, patch and measure an LLM inference server, in a loop.",
    )
    for group in GROUPS:
        for name, fn in group.COMMANDS.items():
            cli.command(name)(fn)
    cli.add_typer(sglang.playbook_app, name="playbook")
    cli.add_typer(host.host_app, name="host")
    return cli


app = build()
