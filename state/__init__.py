"""Pydantic models, by concern: `config` (the target file, a session's options), `sessions` (the graph
state `LoopState` and a node's `LoopUpdate`), `measurement` (timings, decisions, output gates),
`profiling` (profiles, diagnoses), `proposers` (the LLM proposer, the launch-option search),
`engines` (hosts, processes, checkouts, SGLang and vLLM specifics) and `door` (tool calls and their
records); `base` is the `Model` every one derives from.

Imports nothing of perfloop's: every other package may import it. Its sub-packages import each
other in one direction only (each one's docstring says which). `modules()` lists them all, and
`moved()` the names the modules had before the split, for the checkpoint serializer.
"""

import importlib
import inspect
import pkgutil
import sys
from types import ModuleType

from pydantic import BaseModel

MOVED_INTO = {
    "engines": "ssh process limits workspace sglang vllm",
    "measurement": "measure workload arms aa power trials decision correctness tolerance",
    "profiling": "profile diagnosis",
    "proposers": "proposer llm_tools search",
    "config": "target options",
    "sessions": "loop updates fanout session ids",
    "door": "calls records",
}
"""Modules that were directly in `state/` until it was split by concern, by the sub-package each is
in now (module `loop` is `state.sessions.loop`). A checkpoint names a model by the module it was
in when written, and LangGraph revives it by importing that module by name."""


def modules() -> list[ModuleType]:
    """Every module of this package and its sub-packages (a new one is found without a list)."""
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(__path__, "state.") if not m.ispkg]


def moved() -> list[tuple[str, str]]:
    """(old module, name) of every model reachable in a module that moved into a sub-package, each
    old module name made importable as an alias of today's module (`sys.modules`; no file is kept
    at the old place): the checkpoint serializer's allow-list of names written before the move."""
    out = []
    for package, names in MOVED_INTO.items():
        for name in names.split():
            old = f"state.{name}"
            mod = sys.modules.setdefault(old, importlib.import_module(f"state.{package}.{name}"))
            out += [(old, kind) for kind, _ in inspect.getmembers(mod, _is_model)]
    return out


def _is_model(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__.startswith("state.")
