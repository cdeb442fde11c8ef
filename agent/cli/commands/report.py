"""Looking at sessions in a browser: `report` (one self-contained HTML file) and `serve` (the
sessions, their reports and their approvals as a small local web app)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.ids import SessionArg
from agent.cli.output import console
from agent.cli.running import fail, run_command, stored_sessions
from tools.errors import ConfigError


def report(
    session: SessionArg,
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

        html = render_report(gather(stored_sessions(), session))  # LangGraph only for checkpoints
        out = output or Path(f"perfloop-{session}.html")
        try:
            out.write_text(html, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--output: cannot write {out}: {exc.strerror or exc}") from exc
        console().print(f"wrote the report of session {session} to {out} ({len(html) >> 10} KiB)")

    run_command(body)


def serve(
    host: Annotated[
        str,
        typer.Option(help="Address to bind (127.0.0.1: this machine only; see docs/usage.md for others)."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8765,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the token (first line); else $PERFLOOP_SERVE_TOKEN; else a new one."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="The token itself: discouraged, other users see it in `ps`; use --token-file."),
    ] = None,
    origin: Annotated[
        list[str] | None,
        typer.Option(
            help="Another address the page is opened at (an SSH tunnel's port, a TLS proxy); repeatable."
        ),
    ] = None,
) -> None:
    """Serve the sessions, their reports and the approval page (Approve / Reject / Edit) until ^C.
    Every request needs the token (printed with the address when it is a new one); only this
    server's own addresses are answered (DNS rebinding) and only its own pages may POST."""
    import os
    import socket

    import uvicorn

    from agent.web.app import create_app
    from agent.web.auth import Guard, allowed, checked_token, is_loopback, new_token
    from agent.web.hardening import server_options

    tok, source = _serve_token(token, token_file, os.environ.get("PERFLOOP_SERVE_TOKEN"))
    if token is not None:
        print(
            "perfloop serve: warning: --token is visible to other users in `ps`; prefer "
            "$PERFLOOP_SERVE_TOKEN or --token-file",
            file=sys.stderr,
            flush=True,
        )
    try:
        tok = checked_token(tok, source) if source != "new" else new_token()
    except ConfigError as exc:
        raise fail(str(exc)) from None
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise fail(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    try:
        hosts, origins = allowed(host, bound, origin or [])
    except ConfigError as exc:
        sock.close()
        raise fail(str(exc)) from None
    where = f"[{host}]" if ":" in host else host
    shown = f"#token={tok}" if source == "new" else f" (token from {source})"
    print(f"perfloop serve: http://{where}:{bound}/{shown}", flush=True)
    if not is_loopback(host):
        print(
            "perfloop serve: warning: plain HTTP on a network address: the token and the pages "
            "cross the network in clear; prefer 127.0.0.1 with an SSH tunnel, or a TLS proxy "
            "(docs/usage.md, `perfloop serve`)",
            file=sys.stderr,
            flush=True,
        )
    guard = Guard(tok, bound, hosts, origins)
    config = uvicorn.Config(create_app(guard), **server_options())
    uvicorn.Server(config).run(sockets=[sock])


def _serve_token(flag: str | None, file: Path | None, env: str | None) -> tuple[str, str]:
    """The token and where it came from: --token, --token-file, $PERFLOOP_SERVE_TOKEN, else `new`."""
    if flag is not None:
        return flag, "--token"
    if file is not None:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"--token-file: cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
        if file.stat().st_mode & 0o077:
            print(
                f"perfloop serve: warning: --token-file {file} is readable by other users (chmod 600 it)",
                file=sys.stderr,
                flush=True,
            )
        return (lines[0] if lines else ""), "--token-file"
    if env:
        return env, "$PERFLOOP_SERVE_TOKEN"
    return "", "new"


COMMANDS = {"report": report, "serve": serve}
