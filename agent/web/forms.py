"""Reading an answer's form with the cheap checks first: the CSRF value from the address (the page's
forms carry it there as well as in a field), the media type and the declared length before a byte
of the body is read, and then a form of bounded size and field count. A refusal is a typed
plain-text response that echoes nothing of the request."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from agent.web.auth import Guard

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
MAX_FIELDS = 64  # the forms have a handful, and a tick box per candidate of a batch


def form_limit(max_patch_bytes: int) -> int:
    """The largest body accepted: the largest patch the session takes, percent-encoded (3 bytes a
    byte at worst), and room for the other fields."""
    return 3 * max_patch_bytes + 64 * 1024


def refuse(status: int, text: str) -> Response:
    return PlainTextResponse(f"{status}: {text}\n", status_code=status)


async def read_form(request: Request, guard: Guard, limit: int) -> FormData | Response:
    """The POST's form, or why it is refused (before reading when that can be told)."""
    early = request.query_params.get("csrf")
    if early is None:
        early = request.headers.get("x-csrf-token")
    if early is not None and not guard.csrf_ok(early):
        return refuse(403, "the form's CSRF value is missing or wrong; reload the page")
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media not in FORM_TYPES:
        return refuse(415, "an answer is a form (application/x-www-form-urlencoded)")
    length = request.headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        return refuse(411, "an answer needs a Content-Length")
    if int(length) > limit:
        return refuse(413, f"the form is over {limit} bytes (the session's max_patch_bytes, encoded)")
    try:
        form = await request.form(max_files=0, max_fields=MAX_FIELDS, max_part_size=limit)
    except (HTTPException, MultiPartException, ValueError, UnicodeError):
        return refuse(400, "the form cannot be read")
    if early is None and not guard.csrf_ok(text(form.get("csrf"))):
        return refuse(403, "the form's CSRF value is missing or wrong; reload the page")
    return form


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None
