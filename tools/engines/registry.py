"""Engines by name: the `perfloop.engines` entry-point group, the three built-ins among them.

A package outside this repository ships an engine by declaring, in its own pyproject.toml,

    [project.entry-points."perfloop.engines"]
    myengine = "mypackage.engine:MyEngine"

(an `tools.engines.contract.Engine` subclass, or an instance of one); `kind = "myengine"` in a
target file then selects it. The built-ins are registered the same way in perfloop's
pyproject.toml; `BUILTINS` repeats them for an install whose metadata predates the group (an
editable install made before it), and a test holds the two equal.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from importlib.metadata import entry_points

from state.config.target import ENGINE_GROUP, TargetConfig, known_kinds
from tools.engines.contract import Engine
from tools.errors import ConfigError

BUILTINS = {
    "mla_server": "tools.engines.demo:DemoEngine",
    "sglang": "tools.sglang.engine:SglangEngine",
    "vllm": "tools.vllm.engine:VllmEngine",
}
"""The engines this repository ships, as pyproject.toml registers them (name: `module:attribute`)."""


def registered() -> dict[str, str]:
    """Every engine name and the `module:attribute` it loads, the built-ins first (installed
    entry points win over `BUILTINS` for the same name)."""
    found = {ep.name: ep.value for ep in entry_points(group=ENGINE_GROUP)}
    return {**BUILTINS, **found}


def unknown(name: str) -> str:
    """The one-line error for an engine name nobody registered (pure but for reading metadata)."""
    return (
        f"no engine named {name!r} (known: {', '.join(known_kinds())}); an engine of your own is "
        f'registered as an entry point in the group "{ENGINE_GROUP}" (docs/engines.md)'
    )


@cache
def engine(name: str) -> Engine:
    """The engine registered as `name`; ConfigError naming the known ones when there is none, or
    when what it names cannot be loaded or is no Engine."""
    target = registered().get(name)
    if target is None:
        raise ConfigError(unknown(name))
    module, _, attr = target.partition(":")
    try:
        found = getattr(import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"engine {name!r} names {target}, which does not load: {err}") from err
    made = found() if isinstance(found, type) else found
    if not isinstance(made, Engine) or made.name != name:
        raise ConfigError(
            f"engine {name!r} ({target}) is not a tools.engines.contract.Engine subclass with name = {name!r}"
        )
    return made


def with_launch_defaults(target: TargetConfig) -> TargetConfig:
    """`target` with its engine's readiness defaults (`Engine.launch_defaults`) in the `[launch]`
    fields its file did not set (what the file says wins)."""
    given = target.launch.model_fields_set
    update = {k: v for k, v in engine(target.kind).launch_defaults.items() if k not in given}
    if not update:
        return target
    return target.model_copy(update={"launch": target.launch.model_copy(update=update)})
