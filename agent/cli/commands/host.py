"""`perfloop host setup ssh://HOST`: perfloop's own environment on an SSH host (tools/hosts/setup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.cli.options import Json, TrustNew
from agent.cli.output import console, emit
from agent.cli.running import run_command
from tools.errors import ConfigError

host_app = typer.Typer(no_args_is_help=True, help="Prepare SSH hosts for perfloop.")


@host_app.command("setup")
def setup(
    url: Annotated[str, typer.Argument(help="ssh://[user@]host[:port] or ssh://ALIAS from ~/.ssh/config.")],
    python: Annotated[
        str, typer.Option("--python", help="The host's interpreter to prepare (the target's host.python).")
    ] = "python3",
    wheels: Annotated[
        Path | None,
        typer.Option(help="A folder of wheels to upload instead of fetching them here with pip download."),
    ] = None,
    trust_new_host: TrustNew = False,
    as_json: Json = False,
) -> None:
    """Give the host's Python perfloop's own dependencies (pydantic, GitPython, msgspec): wheels
    fetched here for its version and platform, uploaded over SFTP, unpacked into
    ~/.cache/perfloop/env-cp<XY> there, used by perfloop's tools only (the engine's Python is untouched)."""

    def body() -> None:
        from pydantic import ValidationError

        from agent.sessions.remote import ssh_prompt
        from state.engines.ssh import SSHHostConfig
        from tools.hosts.connect import close_all, connect
        from tools.hosts.setup import setup as setup_env

        if wheels is not None and not wheels.is_dir():
            raise ConfigError(f"--wheels {wheels} is not a folder")
        try:
            cfg = SSHHostConfig(url=url, trust_new_host=trust_new_host, python=python)
        except ValidationError as exc:
            raise ConfigError(f"{exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
        try:
            site = setup_env(connect(cfg, ssh_prompt()), python, wheels)
        finally:
            close_all()
        console(as_json).print(f"{url}: perfloop's environment for {python} is in {site}", highlight=False)
        if as_json:
            emit({"host": url, "python": python, "site": str(site)})

    run_command(body)
