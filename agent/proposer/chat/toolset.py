"""The read-only tools the model may call: their argument models, and one call through the door.

The arguments are the JSON text the model wrote, validated here (not by the server); a bad call
is answered with an error the model can act on, never raised.
"""

from __future__ import annotations

import json
from pathlib import Path

from langgraph.runtime import Runtime
from pydantic import BaseModel, ValidationError

from agent.context import LoopContext, call
from agent.proposer.briefing import prompt
from state.proposers.llm_tools import CodeArgs
from tools.llm import code


class ReadFileIn(BaseModel):
    path: str
    start_line: int | None = None
    end_line: int | None = None


class GrepIn(BaseModel):
    pattern: str
    path: str = "."


class ListDirIn(BaseModel):
    path: str = "."


TOOL_INPUTS: dict[str, type[BaseModel]] = {"read_file": ReadFileIn, "grep": GrepIn, "list_dir": ListDirIn}
TOOL_FNS = {"read_file": code.read_file_tool, "grep": code.grep_tool, "list_dir": code.list_dir_tool}


def run(runtime: Runtime[LoopContext], repo: Path, name: str, arguments: str) -> str:
    """The tool's answer as the model sees it: its text as data, or `error: ...`."""
    model = TOOL_INPUTS.get(name)
    if model is None:
        return f"error: no tool {name!r}; use one of {', '.join(TOOL_INPUTS)}"
    try:
        parsed = model.model_validate(json.loads(arguments or "{}"))
    except (ValueError, ValidationError) as exc:
        return f"error: bad arguments for {name}: {str(exc).splitlines()[0]}"
    result = call(runtime, TOOL_FNS[name], CodeArgs(repo=repo, **parsed.model_dump()))
    return prompt.data(name, result.text) if result.ok else f"error: {result.text}"
