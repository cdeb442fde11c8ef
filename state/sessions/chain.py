"""A chain session's links and its whole-chain check (`--proposer chain`, agent/steps/chain.py).

A link is one kept change (a patch or a launch option) with its own judged speedup against the tree
and launch command before it; the check is one more judged comparison, made when the rounds end:
the final tree and launch command, launched afresh, against the session's baseline (its tree and
the target's launch command), by the session's decision rule. Its speedup is measured, not the
product of the links'.
"""

from typing import Literal

from state.base import Model
from state.measurement.decision import Judgement

LinkKind = Literal["patch", "launch option"]
"""What a link changed: the engine's code (a commit) or the launch command (kept in the session)."""


class ChainLink(Model):
    """One kept change of the chain, as its decision judged it against the state before it."""

    source: str
    """The playbook id or search trial (`search-N`) or model proposal that was kept."""
    kind: LinkKind
    """A patch (committed) or a launch option (the session's launch command)."""
    tpot_ms_before: float
    """Median TPOT of the reference it was judged against (the tree before it)."""
    tpot_ms_after: float
    """Its own median TPOT."""
    speedup: float | None = None
    """Its judged speedup against the tree before it (the decisive look's estimate); None for a
    decision the CI rule did not time (an enabling step without looks)."""
    ci: list[float] | None = None
    """[low, high] of that speedup's interval."""
    verdict: str
    """Its decision's verdict (`accepted`)."""

    def line(self) -> str:
        """`kv-cache-full-pool-cast (patch) 5.21x [4.10, 6.62]` (pure)."""
        judged = f" {self.speedup:.2f}x" if self.speedup is not None else " (not timed)"
        if self.ci is not None:
            judged += f" [{self.ci[0]:.2f}, {self.ci[1]:.2f}]"
        return f"{self.source} ({self.kind}){judged}"


class ChainCheck(Model):
    """The whole chain measured: the final tree and launch against the baseline's, judged."""

    launch_argv_before: list[str]
    """The baseline's launch command (the target's)."""
    launch_argv_after: list[str]
    """The final launch command (the kept launch options)."""
    commit_before: str | None
    """The tree the baseline ran (the commit the session started from); None: no patch was kept,
    both arms ran the same tree."""
    tpot_ms_before: float
    """The baseline's median TPOT (the reference arm)."""
    tpot_ms_after: float | None
    """The final tree's median TPOT on its fresh launch; None when it could not be measured."""
    judgement: Judgement | None
    """The rule's judgement of final against baseline; None when the output gate stopped it (see
    `problem`) or the final server failed to start."""
    problem: str | None = None
    """Why there is no timing verdict (outputs changed, the launch failed); None otherwise."""

    def line(self) -> str:
        """`14.62x [11.90, 17.96] 95% CI accepted (final vs baseline, measured)` or the problem (pure)."""
        j = self.judgement
        if j is None or not j.looks:
            return f"not judged: {self.problem or 'no looks'}"
        lk = j.last
        return (
            f"{lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}] {j.confidence:.0%} CI {j.verdict} "
            "(the final tree and launch against the baseline's, launched afresh and measured)"
        )


class Chain(Model):
    """The summary's chain: every kept link in order and the whole chain measured."""

    links: list[ChainLink]
    """The kept changes, in the order they were kept."""
    whole: ChainCheck | None = None
    """The final judged comparison against the baseline; None when fewer than two links were kept
    (one link's own judgement is already against the baseline) or the session ended before it."""

    def line(self) -> str:
        """`chain: a (launch option) 3.10x [..] -> b (patch) 5.20x [..]; whole chain 15.9x [..] ...` (pure)."""
        text = "chain: " + (" -> ".join(link.line() for link in self.links) or "no link kept")
        if self.whole is not None:
            text += f"; whole chain {self.whole.line()}"
        return text
