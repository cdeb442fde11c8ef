"""Knob values in a launch command, both ways (pure): set a config, read one back.

A flag knob is `--flag VALUE` (a `bool` knob: the bare flag, present or absent); an environment
knob is an `env NAME=VALUE` prefix of the command (`env` is POSIX, so the command stays one argv
that the launcher runs as it is). Reading a config back from a recorded trial's launch command is
how the search rebuilds its history from the session's decisions.
"""

from __future__ import annotations

from playbooks.engine import flag_value
from state.proposers.search import Knob, KnobValue


def text(knob: Knob, value: KnobValue) -> str:
    """How a value is spelled in the launch command."""
    if knob.type == "bool":
        return "1" if value else "0"
    if isinstance(value, float) and value == int(value) and knob.type != "float":
        return str(int(value))
    return str(value)


def _env_prefix(argv: list[str]) -> int:
    """How many items of argv are the `env NAME=VALUE ...` prefix (0: none)."""
    if not argv or argv[0] != "env":
        return 0
    n = 1
    while n < len(argv) and "=" in argv[n] and not argv[n].startswith("-"):
        n += 1
    return n


def _set_env(argv: list[str], name: str, value: str) -> list[str]:
    n = _env_prefix(argv)
    pairs = [a for a in argv[1:n] if not a.startswith(name + "=")] + [f"{name}={value}"]
    return ["env", *pairs, *argv[n:]]


def _drop_flag(argv: list[str], flag: str) -> list[str]:
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith(flag + "="):
            return out[:i] + out[i + 1 :]
        if arg == flag:
            end = i + 1
            while end < len(out) and not out[end].startswith("--"):
                end += 1  # the flag's values (nargs="+" flags such as --cuda-graph-bs take several)
            return out[:i] + out[end:]
    return out


def with_value(argv: list[str], knob: Knob, value: KnobValue) -> list[str]:
    """The launch command with the knob set to `value` (pure)."""
    if knob.env:
        return _set_env(argv, knob.name, text(knob, value))
    out = _drop_flag(argv, knob.name)
    if knob.type == "bool":
        return [*out, knob.name] if value else out
    return [*out, knob.name, text(knob, value)]


def with_config(argv: list[str], knobs: list[Knob], config: dict[str, KnobValue]) -> list[str]:
    """The launch command with every knob named in `config` set (pure)."""
    out = list(argv)
    for knob in knobs:
        if knob.name in config:
            out = with_value(out, knob, config[knob.name])
    return out


def _parse(knob: Knob, raw: str) -> KnobValue | None:
    try:
        if knob.type == "int":
            return int(raw)
        if knob.type == "float":
            return float(raw)
    except ValueError:
        return None
    if knob.type == "choice":
        return next((c for c in knob.choices if str(c) == raw), None)
    return raw not in ("", "0", "false", "False") if knob.env else True


def value_in(argv: list[str], knob: Knob) -> KnobValue | None:
    """The knob's value in the launch command; None when it is not set there (the server's
    default), or set to something outside the knob's type (pure)."""
    if knob.env:
        n = _env_prefix(argv)
        raw = next((a.split("=", 1)[1] for a in argv[1:n] if a.startswith(knob.name + "=")), None)
    else:
        raw = flag_value(argv, knob.name)
        if knob.type == "bool":
            return raw is not None
    return None if raw is None else _parse(knob, raw)


def config_of(argv: list[str], knobs: list[Knob]) -> dict[str, KnobValue]:
    """Every knob set in the launch command, with its value (pure)."""
    found = {k.name: value_in(argv, k) for k in knobs}
    return {name: v for name, v in found.items() if v is not None}


def describe_config(config: dict[str, KnobValue], knobs: list[Knob]) -> str:
    """`--pool-slots 8192, MLA_X=1` (pure)."""
    by_name = {k.name: k for k in knobs}
    parts = []
    for name, value in config.items():
        knob = by_name[name]
        if knob.env:
            parts.append(f"{name}={text(knob, value)}")
        elif knob.type == "bool":
            parts.append(name if value else f"no {name}")
        else:
            parts.append(f"{name} {text(knob, value)}")
    return ", ".join(parts) or "defaults"
