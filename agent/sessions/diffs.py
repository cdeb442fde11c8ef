"""Each proposal's patch as a plain unified diff: what `perfloop show SESSION --diff` prints and
what the session folder keeps (`proposals/N-SOURCE.diff`), to edit and hand back with
`perfloop approve SESSION --patch FILE`.

A proposal's patch is the one applied when a human edited it (the approval's diff), else the one
proposed. A proposal by launch options has no diff (its launch command is what changes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from state.sessions.loop import LoopState
from tools.errors import ToolError


@dataclass
class ProposalDiff:
    """One proposal's patch, numbered from 1 in the order the session made them."""

    number: int
    source: str
    """The proposal's playbook id (or `llm`, a search trial's name)."""
    diff: str
    """The unified diff; empty for a fix by launch options."""
    edited: bool
    """Whether `diff` is a human's edit that replaced the proposal's."""

    @property
    def file_name(self) -> str:
        return f"{self.number}-{re.sub(r'[^A-Za-z0-9._-]', '_', self.source)}.diff"


def proposal_diffs(history: list[LoopState]) -> list[ProposalDiff]:
    """The session's proposals in order, each with the patch applied or proposed (pure)."""
    out: list[ProposalDiff] = []
    seen = None
    for st in history:
        p = st.proposal
        if p is not None and p != seen:
            seen = p
            out.append(ProposalDiff(len(out) + 1, p.source, p.diff, False))
        if out and st.approval is not None and st.approval.diff and p == seen:
            out[-1].diff, out[-1].edited = st.approval.diff, True
    return out


def pick(diffs: list[ProposalDiff], number: int | None) -> ProposalDiff:
    """Proposal `number` (default: the last), its diff not empty; else a one-line ToolError."""
    if not diffs:
        raise ToolError("the session has made no proposal yet")
    if number is not None and not 1 <= number <= len(diffs):
        raise ToolError(
            f"--diff {number}: the session made {len(diffs)} proposal(s), numbered 1-{len(diffs)}"
        )
    d = diffs[-1 if number is None else number - 1]
    if not d.diff:
        raise ToolError(f"proposal {d.number} ({d.source}) changes launch options, not code: it has no diff")
    return d


def keep(folder: Path, diffs: list[ProposalDiff]) -> None:
    """Write each proposal's diff into `folder/proposals/` (those by launch options have none)."""
    where = folder / "proposals"
    for d in diffs:
        if d.diff:
            where.mkdir(parents=True, exist_ok=True)
            (where / d.file_name).write_text(d.diff, encoding="utf-8")
