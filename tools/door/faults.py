"""Injectable crash points, for testing that every step resumes after SIGKILL.

Set PERFLOOP_FAULTS_FILE to a file with one point name per line. When the run reaches the point named
on the first line, that line is removed and the process kills itself with SIGKILL (no cleanup, no
`finally`), exactly like a power cut or an OOM kill. Point names:
- `node:<name>`: at the start of a node, i.e. right after the previous transition was checkpointed;
- `tool:<name>`: after tool <name> did its side effect, before the door recorded it;
- `<area>:<what>`: inside a tool (`git:ref-moved`, `git:revert-ref-moved`, `profile:requested`;
  a launch's `server:spawning` before the spawn, `server:forked` between the spawn and its pid
  file, `server:spawned` as it waits for health).

A line may name what happens instead of SIGKILL after the point: `server:spawned TERM` (or `INT`,
`HUP`: that signal, which perfloop handles as an interrupt), `node:measure raise` (a RuntimeError
raised there: a bug, or an exception from a library), or `server:spawned pass` (the line is only
used up, to reach a later occurrence of the same point).

PERFLOOP_FAULTS_TRACE, when set, names a file each point reached is appended to: a test runs a
session once with it to learn the points in order, then arms them all.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV = "PERFLOOP_FAULTS_FILE"
TRACE_ENV = "PERFLOOP_FAULTS_TRACE"


class InjectedFault(RuntimeError):
    """A `raise` fault point: stands for a bug or a library's exception (not a ToolError)."""


def fault_point(name: str) -> None:
    """SIGKILL this process if `name` is the next armed fault point (or what its line names)."""
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a") as f:
            f.write(name + "\n")
    path = os.environ.get(ENV)
    if not path:
        return
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except OSError:
        return
    point, _, then = lines[0].strip().partition(" ") if lines else ("", "", "")
    if point == name:
        file.write_text("".join(f"{line}\n" for line in lines[1:]))
        if then == "raise":
            raise InjectedFault(f"fault injected at {name}")
        if then != "pass":
            os.kill(os.getpid(), signal.Signals[f"SIG{then or 'KILL'}"])
