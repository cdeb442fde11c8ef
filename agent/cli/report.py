"""Looking at sessions in a browser: `report` (one self-contained HTML file) and `serve` (the
sessions, their reports and their approvals as a small local web app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent.cli.common import fail, run_command
from agent.sessions.runner import Sessions
from tools.errors import ConfigError


def report(
    session: str,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="HTML file to write (default: perfloop-SESSION.html here)."),
    ] = None,
) -> None:
    """Write a session's report: summary, plots, each proposal's diff and decision, as one HTML
    file that works offline (also for an imported recording)."""

    def body() -> None:
        from agent.report.data import gather
        from agent.report.html import render_report

        html = render_report(gather(Sessions(), session))
        out = output or Path(f"perfloop-{session}.html")
        try:
            out.write_text(html, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--output: cannot write {out}: {exc.strerror or exc}") from exc
        Console().print(f"wrote the report of session {session} to {out} ({len(html) >> 10} KiB)")

    run_command(body)


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind (a non-loopback one needs a token).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            help="Token every request must carry (default on a non-loopback bind: a new one, printed).",
            envvar="PERFLOOP_SERVE_TOKEN",
        ),
    ] = None,
) -> None:
    """Serve the sessions, their reports and the approval page (Approve / Reject / Edit) until ^C."""
    import socket

    import uvicorn

    from agent.web.app import create_app
    from agent.web.auth import is_loopback, new_token

    tok = token if token or is_loopback(host) else new_token()
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise fail(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    where = f"[{host}]" if ":" in host else host
    print(
        f"perfloop serve: http://{where}:{sock.getsockname()[1]}/" + (f"?token={tok}" if tok else ""),
        flush=True,
    )
    config = uvicorn.Config(create_app(tok), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


COMMANDS = {"report": report, "serve": serve}
