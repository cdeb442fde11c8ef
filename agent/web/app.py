"""`perfloop serve`: the sessions under $PERFLOOP_HOME in a browser, and their approvals.

Pages: `/` lists the sessions; `/sessions/ID` is the session's report (agent/report) with, while it
waits for approval, the diff and evidence and the Approve / Reject / Edit forms; the page polls
`/api/sessions/ID` and reloads when the session moves. An answer runs `perfloop approve|reject`
(agent/web/answers.py), so it is the same code path and recording as the shell's. Files are served
from the session's own folder only (`/sessions/ID/files/...`)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from agent.report.data import ReportData, gather
from agent.report.html import KEPT, context, environment
from agent.sessions.approving import approval_number, batch_refusal, edited_patch
from agent.sessions.runner import Sessions
from agent.web import answers
from agent.web.auth import Guard, GuardMiddleware
from agent.web.forms import form_limit, read_form, refuse
from agent.web.forms import text as _text
from agent.web.hardening import FILE_CSP, Hardened, nonce_of
from tools import progress
from tools.errors import NotReplayable, ToolError, first_line
from tools.paths import inside
from tools.paths import session_id as checked_id

PER_PAGE = 50
MAX_FILE_PATH = 1024


class Web:
    """The app's state: the sessions, the guard, and one lock around reading a session's data
    (the store and its checkpoints); drawing and rendering run outside it, so pages do not wait
    on each other (plots are cached per session state: agent/report/html.py)."""

    def __init__(self, guard: Guard, sessions: Sessions | None = None) -> None:
        self.sessions = sessions or Sessions()
        self.guard = guard
        self.lock = threading.Lock()
        self.env = environment("agent.web")
        self._imported: dict[str, tuple[int, ReportData]] = {}

    def data(self, sid: str) -> tuple[ReportData, int]:
        """The session's report data and its count of recorded calls. An imported recording is
        replayed in memory to get its states (seconds): kept until its calls change."""
        with self.lock:
            seq = self.sessions.store.next_seq(sid)
            kept = self._imported.get(sid)
            if kept is not None and kept[0] == seq:
                return kept[1], seq
            data = gather(self.sessions, sid)
            if data.replayed:
                if len(self._imported) >= KEPT:
                    self._imported.pop(next(iter(self._imported)))
                self._imported[sid] = (seq, data)
            return data, seq

    def page(self, request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        template = self.env.get_template(name)
        html = template.render(csrf=self.guard.csrf(), nonce=nonce_of(request.scope), **values)
        return HTMLResponse(html, status_code=status)

    def _listing(self, request: Request) -> tuple[int, int, list]:
        raw = request.query_params.get("page", "1")
        number = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 9 else 1
        count = self.sessions.store.count_sessions()
        pages = max(1, -(-count // PER_PAGE))
        number = min(max(number, 1), pages)
        return number, pages, self.sessions.store.session_page(PER_PAGE, (number - 1) * PER_PAGE)

    def index(self, request: Request) -> Response:
        number, pages, infos = self._listing(request)
        return self.page(
            request, "index.html.j2", infos=infos, page=number, pages=pages, digest=_digest(infos)
        )

    def listing(self, request: Request) -> Response:
        """What `/` polls: the page's digest (it reloads when the list it shows changes)."""
        number, pages, infos = self._listing(request)
        return JSONResponse({"page": number, "pages": pages, "digest": _digest(infos)})

    def session(
        self, request: Request, error: str | None = None, status: int = 200, ticked: list[str] | None = None
    ) -> Response:
        """A session's page; after a refused answer, its error and the candidates as they were ticked."""
        sid = _sid(request)
        data, seq = self.data(sid)
        with self.lock:
            number = approval_number(self.sessions, sid)
            unsigned = answers.unsigned(self.sessions, sid) if number is not None else None
        ctx = context(data, lambda p: _file_href(self.sessions, sid, p))
        return self.page(
            request,
            "session.html.j2",
            status,
            **ctx,
            number=number,
            claimed=number is not None and answers.claimed(self.sessions, sid, number),
            seq=seq,
            progress=progress.read_latest(self.sessions.session_dir(sid)),
            answer_log=answers.last_answer_log(self.sessions, sid),
            error=error,
            ticked=ticked,
            unsigned=unsigned,
        )

    def state(self, request: Request) -> Response:
        sid = _sid(request)
        answers.reap()
        with self.lock:
            info = self.sessions.info(sid)
            number = approval_number(self.sessions, sid)
        return JSONResponse(
            {
                "session": sid,
                "status": info.status,
                "approval": number,
                "tool_calls": self.sessions.store.next_seq(sid),
                "progress": progress.read_latest(self.sessions.session_dir(sid)),
            }
        )

    def report(self, request: Request) -> Response:
        from agent.report.html import render_report

        return HTMLResponse(render_report(self.data(_sid(request))[0]))

    def file(self, request: Request) -> Response:
        sid = _sid(request)
        folder = self.sessions.session_dir(sid)
        rel = request.path_params["path"]
        missing = refuse(404, "not a file of this session")
        if len(rel) > MAX_FILE_PATH or "\x00" in rel:
            return missing
        try:
            path = inside(folder / rel, [folder], "file")
            if not path.is_file():
                return missing
        except (ToolError, OSError, ValueError):
            return missing
        return FileResponse(path, headers={"Content-Security-Policy": FILE_CSP})

    async def answer(self, request: Request) -> Response:
        sid = _sid(request)
        limit = await run_in_threadpool(self._form_limit, sid)
        form = await read_form(request, self.guard, limit)
        if isinstance(form, Response):
            return form
        return await run_in_threadpool(self._answer, request, form)

    def _form_limit(self, sid: str) -> int:
        with self.lock:
            self.sessions.info(sid)  # no such session: 404 before the body is read
            try:
                return form_limit(self.sessions.state(sid).target.max_patch_bytes)
            except ToolError:  # no checkpoints (imported): nothing to answer, a small form
                return form_limit(0)

    def _answer(self, request: Request, form: FormData) -> Response:
        sid, action = _sid(request), request.path_params["action"]
        try:
            number = int(_text(form.get("number")) or "")
        except ValueError:
            return refuse(400, "the form names no proposal; reload the page")
        reason = (_text(form.get("reason")) or "").strip()
        chosen = [v for v in map(_text, form.getlist("only")) if v]
        with self.lock:
            try:
                args = self._answer_args(sid, action, number, reason, _text(form.get("patch")) or "", chosen)
                if action != "reject" and (digest := _text(form.get("digest")) or "").isalnum():
                    args += ["--digest", digest]  # what the page showed: refused if the store changed
                answers.claim(self.sessions, sid, number)
            except answers.Conflict as exc:
                return self.page(request, "message.html.j2", 409, sid=sid, message=f"409: {exc}")
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
        For a batch of candidates, `chosen` are the ones ticked (`approve --only`). A session this
        user's key did not sign is refused first, before a claim or a file is made (signing.py)."""
        saver: Any = self.sessions.graph.checkpointer  # checked here, not pinned: the answer runs in
        saver.verify(self.sessions.config(checked_id(sid)), self.sessions.trust, pin=False)  # its own process
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
        raise ToolError("unknown action")


def _sid(request: Request) -> str:
    return checked_id(request.path_params["sid"])


def _digest(infos: list) -> str:
    text = "\n".join(f"{i.id} {i.status} {i.summary is not None}" for i in infos)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _file_href(sessions: Sessions, sid: str, path: Path) -> str | None:
    folder = sessions.session_dir(sid)
    try:
        rel = path.resolve().relative_to(folder)
    except ValueError:
        return None
    return f"/sessions/{sid}/files/{rel.as_posix()}" if path.is_file() else None


def create_app(guard: Guard, sessions: Sessions | None = None) -> ASGIApp:
    """The app behind its guard (agent/web/auth.py), every response hardened (hardening.py)."""
    web = Web(guard, sessions)
    routes = [
        Route("/", web.index),
        Route("/api/sessions", web.listing),
        Route("/sessions/{sid}", web.session),
        Route("/sessions/{sid}/report.html", web.report),
        Route("/sessions/{sid}/files/{path:path}", web.file),
        Route("/api/sessions/{sid}", web.state),
        Route("/sessions/{sid}/{action:str}", web.answer, methods=["POST"]),
    ]
    handlers = {ToolError: _no_session, HTTPException: _http_error}
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.add_middleware(GuardMiddleware, guard=guard)
    return Hardened(app)


async def _no_session(request: Request, exc: Exception) -> Response:
    if isinstance(exc, NotReplayable):  # a session there, but it cannot be shown (a diverging import)
        return refuse(422, first_line(exc))
    return refuse(404, "no such session")


async def _http_error(request: Request, exc: Exception) -> Response:
    code = exc.status_code if isinstance(exc, HTTPException) else 400
    words = {404: "not found", 405: "method not allowed"}.get(code, "refused")
    return refuse(code, words)
