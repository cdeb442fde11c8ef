"""Editing a server's launch command (pure functions): the one editor of flags, for the fixes that
change the launch command instead of the code and for `perfloop demo`'s device and preset."""

from collections.abc import Iterable

from playbooks.engine import flag_value, launch_conflict
from playbooks.schema import LaunchEdit, Playbook


def _flag_at(argv: list[str], flag: str) -> tuple[int, int] | None:
    """Where `flag` stands in argv and how many items it takes: 2 for `--flag V`, 1 for `--flag=V`
    or a bare flag; None if absent (pure)."""
    value = flag_value(argv, flag)
    if value is None:
        return None
    i = next(i for i, a in enumerate(argv) if a == flag or a.startswith(flag + "="))
    return i, 2 if argv[i] == flag and value != "" else 1


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """The launch command with `flag value` in place of the flag's own (`--flag V` or `--flag=V`),
    or added at the end (pure)."""
    at = _flag_at(argv, flag)
    if at is None:
        return [*argv, flag, value]
    i, width = at
    return [*argv[:i], flag, value, *argv[i + width :]]


def without_flag(argv: list[str], flag: str) -> list[str]:
    """The launch command without `flag` and its value, if it has one (pure)."""
    at = _flag_at(argv, flag)
    if at is None:
        return list(argv)
    i, width = at
    return [*argv[:i], *argv[i + width :]]


def edited_argv(argv: list[str], edits: list[LaunchEdit]) -> list[str]:
    """The launch command with the edits made: flags removed (with their values), numbers raised."""
    out = list(argv)
    for edit in edits:
        value = flag_value(out, edit.flag)
        if value is None:
            continue
        if edit.action == "remove":
            out = without_flag(out, edit.flag)
        elif edit.action == "raise":
            try:
                low = float(value) < edit.value
            except ValueError:
                low = False
            if low:
                out = with_flag(out, edit.flag, _number(edit.value))
    return out


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def change_conflict(kind: str, before: list[str], after: list[str], books: Iterable[Playbook]) -> str | None:
    """Why changing the launch command from `before` to `after` is refused: it would put a launch
    limit in force for a playbook whose patch is in the tree or still to be tried (e.g. SGLang's
    kv-cast patch covers eager decode only, so CUDA graphs would bring the full-pool cast back)."""
    for book in books:
        reason = launch_conflict(book, kind, after)
        if reason is not None and launch_conflict(book, kind, before) is None:
            return f"it would stop {book.id}'s patch from working: {reason}"
    return None


def describe(before: list[str], after: list[str]) -> str:
    """One line: which flags go, come or change value (pure)."""
    flags = dict.fromkeys(a.split("=")[0] for a in [*before, *after] if a.startswith("--"))
    parts = []
    for flag in flags:
        old, new = flag_value(before, flag), flag_value(after, flag)
        if old == new:
            continue
        if new is None:
            parts.append(f"drop {flag}" + (f" {old}" if old else ""))
        elif old is None:
            parts.append(f"add {flag}" + (f" {new}" if new else ""))
        else:
            parts.append(f"{flag} {old} -> {new}")
    return ", ".join(parts) or "no change"
