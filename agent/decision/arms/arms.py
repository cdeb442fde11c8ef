"""Which arms a session measures with: `[decide] arms`, with `auto` resolved once on the baseline
server (interleaved when a second server fits beside it, otherwise cross-host when `reference_host`
names one of the target's `[[hosts]]`, otherwise alternating relaunches) and
kept in `LoopState.arms`, so a resumed or replayed session makes the same choice. The fit is the
target file's `two_servers_fit` when it says, else the door tool `host.memory_fit` (recorded)."""

from __future__ import annotations

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, door_of, need
from state.config.target import TrialHost
from state.measurement.arms import ArmsChoice, ArmsInUse, HostKind, HostKindArgs, MemoryFit, MemoryFitArgs
from state.measurement.decision import DecisionConfig
from state.sessions.loop import LoopState
from tools.errors import ToolError
from tools.hosts import info

GIB = 1 << 30
VISIBLE = "CUDA_VISIBLE_DEVICES"


def arms_in_use(state: LoopState) -> ArmsInUse:
    """The session's arms: the resolved choice, else the target's (`auto` before the baseline
    resolved it launches nothing beside a server, so it counts as sequential there) (pure)."""
    if state.arms is not None:
        return state.arms.arms
    arms = state.target.decide.arms
    return "sequential" if arms == "auto" else arms


def probe_widens(state: LoopState) -> bool:
    """Whether the CPU probe's drift widens a sequential arm's interval: not in a paired-blocks
    session whose server holds GPU memory (a CPU probe says nothing of a GPU-bound workload) (pure)."""
    fit = state.arms.fit if state.arms is not None else None
    return not (state.options.paired_blocks and fit is not None and fit.device == "gpu")


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
    """`auto` resolved on the running baseline server (None when the target names its arms; named
    sequential arms of a paired-blocks session: where the server computes, for the CPU probe); a
    reference host not of this host's kind gives alternating arms instead of cross-host."""
    cfg = state.target.decide
    if cfg.arms == "sequential" and state.options.paired_blocks and state.server is not None:
        fit = call(runtime, info.memory_fit, MemoryFitArgs(pgid=state.server.process.pgid))
        why = f"named by the target; its server computes on the {fit.device.upper()} ({fit.where})"
        return ArmsChoice(arms="sequential", why=why, fit=fit)
    if cfg.arms != "auto":
        return None
    if cfg.two_servers_fit is not None:
        choice = choice_of(cfg, None)
    else:
        server = need(state.server, "baseline server")
        choice = choice_of(cfg, call(runtime, info.memory_fit, MemoryFitArgs(pgid=server.process.pgid)))
    if choice.arms != "cross-host":
        return choice
    name, here, there = reference_kinds(state, runtime)
    if here.same_as(there):
        return choice.model_copy(update={"why": f"{choice.why}; both {here.describe()}"})
    why = f"{choice.why}, but host {name} has {there.describe()} and this one {here.describe()}"
    return choice.model_copy(update={"arms": "alternating", "why": why})


def reference_host(state: LoopState) -> TrialHost:
    """The `[[hosts]]` entry `[decide] reference_host` names (the target's validator made sure)."""
    name = need(state.target.decide.reference_host, "[decide] reference_host")
    return next(h for h in state.target.hosts if h.name == name)


def reference_kinds(state: LoopState, runtime: Runtime[LoopContext]) -> tuple[str, HostKind, HostKind]:
    """(name, this host's kind, the reference host's): `host.kind` here with the target's launch
    environment, and there, through its own door branch (`baseline@NAME`), with that host's."""
    th = reference_host(state)
    name, env = th.name, state.target.launch.env
    here = call(runtime, info.kind, HostKindArgs(cuda_visible_devices=env.get(VISIBLE)))
    visible = th.env.get(VISIBLE, env.get(VISIBLE))
    branch = door_of(runtime).branch(f"baseline@{name}", th.host)
    return name, here, branch.call(info.kind, HostKindArgs(cuda_visible_devices=visible))


def same_kind(state: LoopState, runtime: Runtime[LoopContext]) -> str:
    """`arms = "cross-host"` named by the target: the line saying the reference host is of this
    host's kind, or a ToolError (one line: what differs, what to do) before anything is measured."""
    name, here, there = reference_kinds(state, runtime)
    if not here.same_as(there):
        raise ToolError(
            f"[decide] reference_host = {name!r} has {there.describe()}, this host {here.describe()}: "
            'name a host of the same kind, or set [decide] arms = "alternating"'
        )
    return f"reference host {name} of this host's kind ({here.describe()})"


def arms_line(choice: ArmsChoice) -> str:
    """`arms auto -> alternating (two servers do not fit: ...)`."""
    return f"arms auto -> {choice.arms} ({choice.why})"
