"""A target file's mistakes said the way a person fixes them: the line, the key, a did-you-mean
(instead of pydantic's "Extra inputs are not permitted"), before anything is launched."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from state.config.target import ENGINE_GROUP, LaunchConfig, TargetConfig, known_kinds

HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"""^\s*["']?([A-Za-z0-9_-]+)["']?\s*=""")
PORT_FLAGS = ("--port", "--server-port", "--http-port", "--listen-port")
"""Launch flags that set the port a server listens on."""


def port_problem(launch: LaunchConfig) -> str | None:
    """What is wrong with where the launch command puts the port, or None (pure): perfloop picks a
    port at each launch (`launch.port = 0`) and the command must take it from `{port}`; a number
    written after a port flag is a server listening where perfloop never looks."""
    argv = launch.argv
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in PORT_FLAGS:
            continue
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if value.isdigit() and int(value) != launch.port:
            return (
                f"launch.argv sets a fixed port ({flag} {value}): perfloop launches every server on "
                "a port of its own; write `{port}` there instead"
            )
    places = [*argv, *launch.env.values()]
    if launch.port == 0 and not any("{port}" in a for a in places):
        return (
            "launch.argv has no `{port}`: perfloop picks a free port at each launch and waits for "
            'the server there; add it where the port goes, e.g. "--port", "{port}"'
        )
    return None


def dummy_weights(argv: list[str]) -> bool:
    """Whether a launch command serves vLLM's `--load-format dummy` weights (pure)."""
    return any(
        a == "--load-format=dummy" or (a == "dummy" and i > 0 and argv[i - 1] == "--load-format")
        for i, a in enumerate(argv)
    )


DUMMY_WARNING = (
    "warning: the launch serves --load-format dummy weights: every prompt gets the same greedy "
    "output, so the output check cannot see a change that breaks the model (a wrong patch would "
    "pass it); serve real weights (a model folder with its checkpoint, e.g. --load-format "
    "safetensors) to judge outputs"
)
"""What `run` says before its session starts when the launch serves dummy weights."""


def line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """The 1-based line of the TOML `text` that sets the key at `loc` (its table path, then the key;
    list indices left out), or None where it is not written as `key = ...` under its table (pure)."""
    table: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), 1):
        if m := HEADER.match(line):
            table = tuple(p.strip().strip("\"'") for p in m.group(1).split("."))
            if table == loc:  # an unknown `[section]`: its header's line
                return n
        elif (m := KEY.match(line)) and (*table, m.group(1)) == loc:
            return n
    return None


def example_for(text: str) -> str:
    """The shipped example target closest to the file's `kind` (read from its text: the file may not
    validate), for the hint after an error (pure)."""
    kind = re.search(r"""^\s*kind\s*=\s*["']([^"']+)["']""", text, flags=re.MULTILINE)
    return {
        "vllm": "examples/targets/vllm-tiny-llama.toml",
        "sglang": "examples/targets/sglang-glm5.toml",
    }.get(kind.group(1) if kind else "", "examples/targets/mla_server.toml")


def field_names(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The fields of the model at `loc` below `model` (following nested models, lists and unions);
    every field name of every nested model where the path cannot be followed."""
    for part in loc:
        field = model.model_fields.get(part)
        inner = _models(field.annotation) if field is not None else []
        if not inner:
            break
        model = inner[0]
    else:
        return list(model.model_fields)
    return list(model.model_fields)


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models(arg)]


def said(path: Path, text: str, err: ErrorDetails) -> str | None:
    """A pydantic error of the target file as one line naming the line and a did-you-mean, for the
    mistakes that have one (an unknown key, an unknown kind); None for the others."""
    loc = tuple(str(p) for p in err["loc"] if not isinstance(p, int))
    line = line_of(text, loc)
    at = f"{path}:{line}" if line else str(path)
    if err["type"] == "extra_forbidden":
        key, table = loc[-1], ".".join(loc[:-1])
        close = difflib.get_close_matches(key, field_names(TargetConfig, loc[:-1]), n=1)
        where = f" in [{table}]" if table else ""
        if isinstance(err.get("input"), dict):  # a whole table: an unknown `[section]`
            hint = f"; did you mean `[{'.'.join((*loc[:-1], close[0]))}]`?" if close else ""
            return f"{at}: unknown section `[{'.'.join(loc)}]`{hint} (see {example_for(text)})"
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return f"{at}: unknown key `{key}`{where}{hint} (see {example_for(text)})"
    if loc == ("kind",) and err["type"] == "value_error":
        value = str(err.get("input"))
        close = difflib.get_close_matches(value, known := known_kinds(), n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        how = (
            f'an engine of your own registers under the entry-point group "{ENGINE_GROUP}" (docs/engines.md)'
        )
        return f"{at}: kind `{value}` is not one perfloop knows ({', '.join(known)}); {hint}{how}"
    return None
