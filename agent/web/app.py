"""`perfloop serve`: the sessions under $PERFLOOP_HOME in a browser, and their approvals.

Pages: `/` lists the sessions; `/sessions/ID` is the session's report (agent/report) with, while it
waits for approval, the diff and evidence and the Approve / Reject / Edit forms; the page polls
`/api/sessions/ID` and reloads when the session moves. An answer runs `perfloop approve|reject`
(agent/web/answers.py), so it is the same code path and recording as the shell's. Files are served
from the session's own folder only (`/sessions/ID/files/...`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from agent.report.data import gather
from agent.report.html import context, environment
from agent.sessions.approving import approval_number, batch_refusal, edited_patch
from agent.sessions.runner import Sessions
from agent.web import answers
from agent.web.auth import Guard, TokenMiddleware
from tools import progress
from tools.errors import ToolError
from tools.paths import inside
from tools.paths import session_id as checked_id


class Web:
    """The app's state: the sessions, the guard, and one lock (matplotlib and the store's shared
    connection are used by one request at a time)."""

    def __init__(self, guard: Guard, sessions: Sessions | None = None) -> None:
        self.sessions = sessions or Sessions()
        self.guard = guard
        self.lock = threading.Lock()
        self.env = environment("agent.web")

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(csrf=self.guard.csrf(), **values)
        return HTMLResponse(html, status_code=status)

    def index(self, request: Request) -> Response:
        with self.lock:
            return self.page("index.html.j2", infos=self.sessions.store.list_sessions()[::-1])

    def session(
        self, request: Request, error: str | None = None, status: int = 200, ticked: list[str] | None = None
    ) -> Response:
        """A session's page; after a refused answer, its error and the candidates as they were ticked."""
        sid = _sid(request)
        with self.lock:
            data = gather(self.sessions, sid)
            number = approval_number(self.sessions, sid)
            ctx = context(data, lambda p: _file_href(self.sessions, sid, p))
            return self.page(
                "session.html.j2",
                status,
                **ctx,
                number=number,
                claimed=number is not None and answers.claimed(self.sessions, sid, number),
                seq=self.sessions.store.next_seq(sid),
                progress=progress.read_latest(self.sessions.session_dir(sid)),
                answer_log=answers.last_answer_log(self.sessions, sid),
                error=error,
                ticked=ticked,
            )

    def state(self, request: Request) -> Response:
        sid = _sid(request)
        answers.reap()
        with self.lock:
            info = self.sessions.info(sid)
            return JSONResponse(
                {
                    "session": sid,
                    "status": info.status,
                    "approval": approval_number(self.sessions, sid),
                    "tool_calls": self.sessions.store.next_seq(sid),
                    "progress": progress.read_latest(self.sessions.session_dir(sid)),
                }
            )

    def report(self, request: Request) -> Response:
        from agent.report.html import render_report

        with self.lock:
            return HTMLResponse(render_report(gather(self.sessions, _sid(request))))

    def file(self, request: Request) -> Response:
        sid = _sid(request)
        folder = self.sessions.session_dir(sid)
        try:
            path = inside(folder / request.path_params["path"], [folder], "file")
        except ToolError:
            return Response("404: not a file of this session", status_code=404)
        if not path.is_file():
            return Response("404: not a file of this session", status_code=404)
        return FileResponse(path)

    async def answer(self, request: Request) -> Response:
        form = await request.form()
        return await run_in_threadpool(self._answer, request, form)

    def _answer(self, request: Request, form: FormData) -> Response:
        sid, action = _sid(request), request.path_params["action"]
        if not self.guard.csrf_ok(_text(form.get("csrf"))):
            return Response(
                "403: the form's CSRF value is missing or wrong; reload the page", status_code=403
            )
        try:
            number = int(_text(form.get("number")) or "")
        except ValueError:
            return Response("400: the form names no proposal; reload the page", status_code=400)
        reason = (_text(form.get("reason")) or "").strip()
        chosen = [v for v in map(_text, form.getlist("only")) if v]
        with self.lock:
            try:
                args = self._answer_args(sid, action, number, reason, _text(form.get("patch")) or "", chosen)
                answers.claim(self.sessions, sid, number)
            except answers.Conflict as exc:
                return self.page("message.html.j2", 409, sid=sid, message=f"409: {exc}")
            except ToolError as exc:
                error = str(exc)
            else:
                answers.run_cli(self.sessions, sid, number, args)
                return RedirectResponse(f"/sessions/{sid}", 303)
        return self.session(request, error=error, status=400, ticked=chosen if action == "approve" else None)

    def _answer_args(
        self, sid: str, action: str, number: int, reason: str, patch: str, chosen: list[str]
    ) -> list[str]:
        """The `perfloop` command that answers; bad input raises ToolError (nothing claimed yet).
        For a batch of candidates, `chosen` are the ones ticked (`approve --only`)."""
        answers.check(self.sessions, sid, number)
        if action == "approve":
            return ["approve", sid, *answers.only_args(self.sessions, sid, chosen)]
        if action == "reject":
            if not reason:
                raise ToolError("reject: a reason is required (it is recorded with the decision)")
            return ["reject", sid, "--reason", reason]
        if action == "edit":
            if not patch.strip():
                raise ToolError("edit: the edited patch is empty; paste a unified diff")
            refused = batch_refusal(sid, self.sessions.pending_approval(sid) or {}, {"diff": patch})
            if refused is not None:  # the CLI's own refusal, before anything is claimed
                raise ToolError(refused)
            path = answers.web_dir(self.sessions, sid) / f"edit-{number}.diff"
            path.write_text(patch if patch.endswith("\n") else patch + "\n")
            edited_patch(sid, path)  # the same check `perfloop approve --patch` makes
            return ["approve", sid, "--patch", str(path)]
        raise ToolError(f"unknown action {action!r}")


def _sid(request: Request) -> str:
    return checked_id(request.path_params["sid"])


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _file_href(sessions: Sessions, sid: str, path: Path) -> str | None:
    folder = sessions.session_dir(sid)
    try:
        rel = path.resolve().relative_to(folder)
    except ValueError:
        return None
    return f"/sessions/{sid}/files/{rel.as_posix()}" if path.is_file() else None


def create_app(token: str | None, sessions: Sessions | None = None) -> Starlette:
    """The app; `token` None serves without one (loopback binds only, which the CLI enforces)."""
    guard = Guard(token)
    web = Web(guard, sessions)
    routes = [
        Route("/", web.index),
        Route("/sessions/{sid}", web.session),
        Route("/sessions/{sid}/report.html", web.report),
        Route("/sessions/{sid}/files/{path:path}", web.file),
        Route("/api/sessions/{sid}", web.state),
        Route("/sessions/{sid}/{action}", web.answer, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={ToolError: _bad_input})
    app.add_middleware(TokenMiddleware, guard=guard)
    return app


async def _bad_input(request: Request, exc: Exception) -> Response:
    return Response(f"404: {exc}", status_code=404)
