"""Playback of a recorded session: a door that answers every tool call from the recording.

It starts no process, opens no socket and touches no file of the target: each call is matched, in
order, against the recorded call (same tool, same input) and answered with the recorded output, or
the recorded error is raised again. The first mismatch stops the replay with `ReplayDivergence`.
Calls of parallel branches (node `NAME@BRANCH`, e.g. `trial@host-a`) ran in an order no replay can
repeat, so each branch is matched in order against its own calls only.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from state.door.records import ToolCallRecord
from tools.door.registry import In, Out, spec_of
from tools.errors import error_from, first_line


class ReplayDivergence(Exception):
    """The graph asked for a call the recording does not have (not a ToolError: nothing cleans up)."""


def first_difference(recorded: Any, actual: Any, path: str = "") -> str | None:
    """Where two JSON values first differ, as `path: recorded != actual` (pure)."""
    if isinstance(recorded, dict) and isinstance(actual, dict):
        for key in sorted(set(recorded) | set(actual)):
            if key not in recorded or key not in actual:
                return f"{path}.{key}: present only in {'replay' if key in actual else 'recording'}"
            diff = first_difference(recorded[key], actual[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(actual, list) and len(recorded) == len(actual):
        for i, (r, a) in enumerate(zip(recorded, actual, strict=False)):
            diff = first_difference(r, a, f"{path}[{i}]")
            if diff:
                return diff
        return None
    long = isinstance(recorded, str) and isinstance(actual, str) and max(len(recorded), len(actual)) > 80
    if long and recorded != actual:  # where two long texts (e.g. diffs) part, not their shared start
        at = next(
            (i for i, (r, a) in enumerate(zip(recorded, actual, strict=False)) if r != a),
            min(len(recorded), len(actual)),
        )
        line = recorded.count("\n", 0, at) + 1
        start = max(0, at - 20)
        return (
            f"{path or '(value)'}: first differs at character {at} (line {line}): recorded "
            f"{recorded[start : at + 40]!r}, now {actual[start : at + 40]!r}"
        )
    if _close(recorded, actual):
        return None
    if recorded != actual:
        return f"{path or '(value)'}: recorded {str(recorded)[:80]!r}, now {str(actual)[:80]!r}"
    return None


def _close(recorded: Any, actual: Any) -> bool:
    """Two floats equal but for their last bits (pure): a value computed from recorded numbers on
    another machine (another numpy, another CPU's vector unit) may round differently there, as an
    H200 host's A/A shift did here in its 14th digit; a difference of a billionth is still one."""
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (recorded, actual))
    floats = isinstance(recorded, float) or isinstance(actual, float)
    return numbers and floats and math.isclose(recorded, actual, rel_tol=1e-12, abs_tol=1e-15)


class ReplayDoor:
    """The door that plays a recording back (satisfies `tools.door.Door`)."""

    replaying = True
    """Answered from a recording (tools/door `Door.replaying`)."""

    def __init__(
        self, session_id: str, calls: list[ToolCallRecord], cuts: list[tuple[int, int]] | None = None
    ) -> None:
        """`cuts`: (seq, n) of each resume past launches cut short (`SessionStore.cut_launches`)."""
        self.session_id = session_id
        self.cuts = cuts or []
        self.calls = [c for c in calls if "@" not in c.node]
        self.branches: dict[str, list[ToolCallRecord]] = {}
        for c in calls:
            if "@" in c.node:
                self.branches.setdefault(c.node, []).append(c)
        self.played: dict[str, int] = {}
        self.lock = threading.Lock()
        self.position = 0
        self.node = "-"

    def next_seq(self) -> int:
        return self.position

    def launch_floor(self) -> int:
        """The highest launch number an attempt cut short used before the next recorded call: the
        resumes made before it (a step that makes no call of the main sequence sees those before
        the next one that does)."""
        k = self.position
        before = self.calls[k].seq if k < len(self.calls) else math.inf
        return max((n for seq, n in self.cuts if seq <= before), default=0)

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> ReplayBranch:
        """The door of one parallel branch: it plays that branch's calls in their order."""
        return ReplayBranch(self, node)

    def call(self, fn: Callable[[In], Out], args: In) -> Out:
        """Answer from the next recorded call, or raise ReplayDivergence naming the difference."""
        k = self.position
        rec = self.calls[k] if k < len(self.calls) else None
        try:
            out = play(rec, k, self.node, fn, args)
        except ReplayDivergence:
            raise
        except Exception:  # the recorded error, raised again: that call was played
            self.position += 1
            raise
        self.position += 1
        return out

    def unplayed(self) -> list[ToolCallRecord]:
        """Recorded calls the replay never asked for (the main sequence's, then each branch's)."""
        rest = self.calls[self.position :]
        for node, calls in sorted(self.branches.items()):
            rest += calls[self.played.get(node, 0) :]
        return rest


class ReplayBranch:
    """One parallel branch's door in a replay (node `NAME@BRANCH`)."""

    replaying = True
    """Answered from a recording (tools/door `Door.replaying`)."""

    def __init__(self, parent: ReplayDoor, node: str) -> None:
        self.parent, self.node = parent, node

    def next_seq(self) -> int:
        return self.parent.position

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> ReplayBranch:
        return ReplayBranch(self.parent, node)

    def call(self, fn: Callable[[In], Out], args: In) -> Out:
        """Answer from this branch's next recorded call."""
        p = self.parent
        with p.lock:
            calls, k = p.branches.get(self.node, []), p.played.get(self.node, 0)
            p.played[self.node] = k + 1
        return play(calls[k] if k < len(calls) else None, k, self.node, fn, args)


def play(rec: ToolCallRecord | None, k: int, node: str, fn: Callable[[In], Out], args: In) -> Out:
    """The recorded answer to call #k of a sequence, checked against what is asked now."""
    spec = spec_of(fn)
    name = spec.name
    where = f"call #{k} ({name} from node {node})"
    if rec is None:
        raise ReplayDivergence(f"{where} was not recorded: the recording ends after {k} calls")
    if (rec.node, rec.name) != (node, name):
        raise ReplayDivergence(f"{where} differs: the recording has {rec.name} from node {rec.node}")
    try:  # through today's model, so fields added since the recording take their defaults
        recorded = spec.input_type.model_validate(rec.input).model_dump(mode="json")
    except ValueError as exc:
        raise ReplayDivergence(
            f"{where}: the recorded input no longer fits {spec.input_type.__name__}: {first_line(exc)}"
        ) from None
    diff = first_difference(recorded, args.model_dump(mode="json"))
    if diff:
        raise ReplayDivergence(f"{where} has different input: {diff}")
    if rec.error is not None:
        raise error_from(rec.error)
    try:
        return spec.output_type.model_validate(rec.output)  # type: ignore[return-value]
    except ValueError as exc:  # a recording edited by hand, or from an incompatible version
        raise ReplayDivergence(
            f"{where}: the recorded output does not fit {spec.output_type.__name__}: {first_line(exc)}"
        ) from None
