"""Running one door tool on the target's host: `python -m tools.hosts.remote REQUEST`.

The client (tools/hosts/client.py) ships the `tools` and `state` packages to the host and runs this
module there with one argument: the base64 of `{"name": ..., "tool": "module:function", "input":
...}`, or `@PATH` of a file holding that JSON when it is too long for a command line. Progress lines go to stderr prefixed with
`PROGRESS`; the result is exactly one stdout line `RESULT{"output": ...}` or
`RESULT{"error": "ErrorType: one line"}`. This module imports nothing that needs paramiko.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING

from tools.errors import one_line

if TYPE_CHECKING:  # at run time imported in find_tool, so a host without pydantic gets one clear line
    from tools.door.registry import ToolSpec

RESULT = "__perfloop_result__="
PROGRESS = "__perfloop_progress__="


def request_body(spec: ToolSpec, payload: dict, env: dict[str, str] | None = None) -> dict:
    """What the host needs to run a tool: its recorded name, where it lives, its input (pure)."""
    return {"name": spec.name, "tool": spec.location, "input": payload, **({"env": env} if env else {})}


def encode_request(body: dict) -> str:
    """The command-line argument carrying a request (pure)."""
    return base64.b64encode(json.dumps(body).encode()).decode()


def decode_request(arg: str) -> dict:
    """The request an argument carries: base64 JSON, or `@PATH` of a JSON file (removed once read)."""
    if arg.startswith("@"):
        path = Path(arg[1:])
        text = path.read_text()
        path.unlink(missing_ok=True)
        return json.loads(text)
    return json.loads(base64.b64decode(arg))


def find_tool(location: str) -> ToolSpec | None:
    """The tool at `module:function` inside perfloop's `tools` package, or None."""
    from tools.door.registry import spec_of

    module_name, _, attr = location.partition(":")
    if not module_name.startswith("tools.") or not attr.isidentifier():
        return None
    try:
        return spec_of(getattr(importlib.import_module(module_name), attr))
    except (AttributeError, TypeError):
        return None


def run_tool(request: dict) -> dict:
    """Run the named tool on its input here; `{"output": ...}` or `{"error": ...}`."""
    spec = find_tool(request.get("tool", ""))
    if spec is None or spec.where != "host" or spec.name != request.get("name"):
        return {
            "error": f"ToolError: no host tool named {request.get('name')!r} in perfloop's package "
            f"on this host"
        }
    os.environ.update(request.get("env") or {})  # launch.pass_env values forwarded by the client
    try:
        output = spec.fn(spec.input_type.model_validate(request["input"]))
        return {"output": output.model_dump(mode="json")}
    except Exception as exc:  # every failure goes back as one line; the client re-raises it
        return {"error": one_line(exc)}


def own_env() -> Path:
    """perfloop's own environment for this Python, made by `perfloop host setup` (tools/hosts/setup.py)."""
    return Path.home() / ".cache" / "perfloop" / f"env-cp{sys.version_info[0]}{sys.version_info[1]}" / "site"


def main(argv: list[str]) -> int:
    """Entry point on the host: one request in, one result line out."""
    if own_env().is_dir():  # first on this process's path only: the engine's Python is untouched
        sys.path.insert(0, str(own_env()))
    from tools.progress import set_reporter

    set_reporter(lambda message: print(PROGRESS + message, file=sys.stderr, flush=True))
    try:
        request = decode_request(argv[1])
    except (IndexError, OSError, ValueError) as exc:
        request, result = None, {"error": f"ToolError: bad remote request: {one_line(exc)}"}
    if request is not None:
        from tools.interrupts import Interrupted, catching

        try:
            # TERM from the client (its perfloop was interrupted) waits for a pid file being written
            with redirect_stdout(sys.stderr), catching():  # stray prints never corrupt the result
                result = run_tool(request)
        except Interrupted as exc:
            result = {"error": f"ToolError: {exc}"}
        except ImportError as exc:
            result = {
                "error": f"ToolError: {sys.executable} on this host cannot import perfloop's "
                f"tools ({one_line(exc)}); run `perfloop host setup ssh://HOST --python "
                f"{sys.executable}` (it brings them from your machine), or point host.python at an "
                "interpreter that has pydantic, GitPython, msgspec and regex"
            }
    print(RESULT + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
