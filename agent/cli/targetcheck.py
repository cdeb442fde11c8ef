"""A target file's mistakes said the way a person fixes them: the line, the key, a did-you-mean
(instead of pydantic's "Extra inputs are not permitted"), before anything is launched."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from state.target import TARGET_KINDS, TargetConfig

HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"""^\s*["']?([A-Za-z0-9_-]+)["']?\s*=""")


def line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """The 1-based line of the TOML `text` that sets the key at `loc` (its table path, then the key;
    list indices left out), or None where it is not written as `key = ...` under its table (pure)."""
    table: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), 1):
        if m := HEADER.match(line):
            table = tuple(p.strip().strip("\"'") for p in m.group(1).split("."))
        elif (m := KEY.match(line)) and (*table, m.group(1)) == loc:
            return n
    return None


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
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return f"{at}: unknown key `{key}`{where}{hint} (see examples/targets/mla_server.toml)"
    if loc == ("kind",) and err["type"] == "value_error":
        value = str(err.get("input"))
        close = difflib.get_close_matches(value, TARGET_KINDS, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return f"{at}: kind `{value}` is not one perfloop knows ({', '.join(TARGET_KINDS)}){hint}"
    return None
