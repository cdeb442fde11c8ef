"""Which arms a session measures with: `[decide] arms`, with `auto` resolved once on the baseline
server (interleaved when a second server fits beside it, otherwise cross-host when `reference_host`
names one of the target's `[[hosts]]`, otherwise alternating relaunches) and
kept in `LoopState.arms`, so a resumed or replayed session makes the same choice. The fit is the
target file's `two_servers_fit` when it says, else the door tool `host.memory_fit` (recorded)."""

from __future__ import annotations

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from state.arms import ArmsChoice, ArmsInUse, MemoryFit, MemoryFitArgs
from state.decision import DecisionConfig
from state.loop import LoopState
from tools.hosts import info

GIB = 1 << 30


def arms_in_use(state: LoopState) -> ArmsInUse:
    """The session's arms: the resolved choice, else the target's (`auto` before the baseline
    resolved it launches nothing beside a server, so it counts as sequential there) (pure)."""
    if state.arms is not None:
        return state.arms.arms
    arms = state.target.decide.arms
    return "sequential" if arms == "auto" else arms


def fits(fit: MemoryFit, margin: float) -> bool:
    """Whether a second server fits: free memory holds the server's own use times `margin` (pure)."""
    return fit.free_bytes >= fit.server_bytes * margin


def apart(cfg: DecisionConfig) -> tuple[ArmsInUse, str]:
    """Where two servers do not fit: cross-host when `reference_host` names a host, else
    alternating, and the words saying so (pure)."""
    if cfg.reference_host is not None:
        return "cross-host", f"; the reference on host {cfg.reference_host} ([decide] reference_host)"
    return "alternating", ""


def choice_of(cfg: DecisionConfig, fit: MemoryFit | None) -> ArmsChoice:
    """`auto` resolved from the target's `two_servers_fit`, else from the measured fit (pure)."""
    other, also = apart(cfg)
    if cfg.two_servers_fit is not None:
        arms: ArmsInUse = "interleaved" if cfg.two_servers_fit else other
        said = "fit" if cfg.two_servers_fit else "do not fit"
        why = f"the target says two servers {said} ([decide] two_servers_fit)"
        return ArmsChoice(arms=arms, why=why + ("" if cfg.two_servers_fit else also))
    fit = need(fit, "memory fit")
    ok = fits(fit, cfg.fit_margin)
    why = (
        f"two servers {'fit' if ok else 'do not fit'}: {fit.where} has {fit.free_bytes / GIB:.1f} GiB "
        f"free with the baseline server up, which holds {fit.server_bytes / GIB:.2f} GiB "
        f"(x {cfg.fit_margin:g} margin)" + (f"; {fit.note}" if fit.note else "") + ("" if ok else also)
    )
    return ArmsChoice(arms="interleaved" if ok else other, why=why, fit=fit)


def choose_arms(state: LoopState, runtime: Runtime[LoopContext]) -> ArmsChoice | None:
    """`auto` resolved on the running baseline server (None when the target names its arms)."""
    cfg = state.target.decide
    if cfg.arms != "auto":
        return None
    if cfg.two_servers_fit is not None:
        return choice_of(cfg, None)
    server = need(state.server, "baseline server")
    return choice_of(cfg, call(runtime, info.memory_fit, MemoryFitArgs(pgid=server.process.pgid)))


def arms_line(choice: ArmsChoice) -> str:
    """`arms auto -> alternating (two servers do not fit: ...)`."""
    return f"arms auto -> {choice.arms} ({choice.why})"
