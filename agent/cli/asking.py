"""Approval asked in place: on a terminal, a paused session's proposal (already shown: its diff or
flag change, the argv) is answered right there: approve, reject (with a reason), edit the patch in
$EDITOR (then approved as edited, through the same patch gate as `approve --patch`), or later (the
session stays paused, as it does without a terminal)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.prompt import Prompt
from rich.text import Text

from agent.cli.terminal import perfloop


def interactive(as_json: bool) -> bool:
    """Whether a person is at a terminal to answer (stdin and stdout a TTY, no `--json`)."""
    return not as_json and sys.stdin.isatty() and sys.stdout.isatty()


def default_approve(given: str | None) -> str:
    """`run`'s approval mode: as given; else manual (a user's own target: asked in place on a
    terminal, paused for `perfloop approve` without one); `--approve auto` applies proposals at once."""
    return given if given is not None else "manual"


def ask(console: Console, pending: dict, folder: Path) -> dict | None:
    """The answer typed for `pending` (an `approve`/`reject` answer), or None for later."""
    sid = pending["session"]
    has_diff = bool(pending.get("diff"))
    choices = ["a", "r", "e", "l"] if has_diff else ["a", "r", "l"]
    what = "approve, reject, edit the patch, or later" if has_diff else "approve, reject, or later"
    question = Text(f"{what}? [{'/'.join(choices)}]")  # plain text: no markup read in the brackets
    key = Prompt.ask(question, choices=choices, default="l", console=console, show_choices=False)
    if key == "a":
        return {"approved": True, "by": "human"}
    if key == "r":
        reason = Prompt.ask("why (recorded)", console=console, default="rejected at the prompt")
        return {"approved": False, "by": "human", "reason": reason}
    if key == "e":
        from agent.sessions.approving import edited_patch  # the loop's: not at start-up

        path = folder / "proposals" / "edit.diff"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pending["diff"], encoding="utf-8")
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        subprocess.run([*shlex.split(editor), str(path)], check=False)
        return {
            "approved": True,
            "by": "human",
            "diff": edited_patch(sid, path),
            "reason": f"edited patch from {path}",
        }
    me = perfloop()
    console.print(f"paused: {me} approve {sid}\n        {me} reject {sid} --reason TEXT", highlight=False)
    return None
