"""Starting, resuming, replaying and inspecting sessions: the checkpointed graph + the session store."""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agent.checkpoint import open_checkpointer, serializer
from agent.context import LoopContext
from agent.graph import Graph, compile_graph
from agent.remote import close_hosts, executor_for, host_executors, remote_options
from agent.steps_setup import FORK_STEPS
from state.base import utcnow
from state.loop import LoopOptions, LoopState
from state.session import SessionInfo, Summary
from state.target import TargetConfig
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDivergence, ReplayDoor
from tools.door.store import SessionStore, perfloop_home
from tools.errors import ConfigError, ToolError
from tools.paths import inside
from tools.paths import session_id as checked_id


def new_session_id() -> str:
    """Sortable, unique: `20261129-101500-a1b2`."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class SessionBusy(ToolError):
    """Another perfloop process is running this session."""


class Sessions:
    """The sessions under $PERFLOOP_HOME: their store, checkpoints and graph."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or perfloop_home()
        self.store = SessionStore(self.home / "sessions.sqlite")
        self.graph = compile_graph(open_checkpointer(self.home))

    def session_dir(self, session_id: str) -> Path:
        """The session's folder under $PERFLOOP_HOME (its id checked, the result inside home)."""
        return inside(self.home / "sessions" / checked_id(session_id), [self.home], "session folder")

    def start(
        self,
        target: TargetConfig,
        options: dict[str, Any],
        session_id: str,
        target_path: Path | None,
        parent: str | None = None,
    ) -> LoopState:
        """Record a new session and run the loop until it ends or pauses for approval."""
        opts = LoopOptions(
            session_dir=self.session_dir(session_id), **{**options, **remote_options(target, session_id)}
        )
        inp = LoopState(session_id=session_id, target=target, options=opts)
        return self.start_from(inp, target_path, parent)

    def start_from(self, inp: LoopState, target_path: Path | None, parent: str | None = None) -> LoopState:
        """Record a session whose initial state is `inp`, then run it."""
        sid = inp.session_id
        self.store.put_session(
            SessionInfo(
                id=sid,
                created_at=utcnow(),
                target_name=inp.target.name,
                target_path=target_path,
                repo=inp.target.repo,
                status="running",
                parent=parent,
            )
        )
        self.store.add_input(sid, "initial", inp.model_dump(mode="json"))
        return self._invoke(sid, inp)

    def resume(self, session_id: str, answer: dict | None = None) -> LoopState:
        """Continue a session from its last checkpoint (with an approval answer if paused)."""
        self.info(session_id)
        if answer is not None:
            return self._invoke(session_id, Command(resume=answer), answer=answer)
        return self._invoke(session_id, None)

    def info(self, session_id: str) -> SessionInfo:
        info = self.store.get_session(checked_id(session_id))
        if info is None:
            raise ConfigError(f"no session {session_id!r} in {self.home}; list them with `perfloop sessions`")
        return info

    def config(self, session_id: str) -> RunnableConfig:
        return thread(session_id)

    def state(self, session_id: str) -> LoopState:
        snap = self.graph.get_state(self.config(checked_id(session_id)))
        if not snap.values:
            raise ConfigError(
                f"session {session_id} has no checkpoints in {self.home} (imported?); "
                f"use `perfloop replay {session_id}`"
            )
        return LoopState.model_validate(snap.values)

    def pending_approval(self, session_id: str) -> dict | None:
        """The approval request a paused session waits on, if any."""
        return _pending(self.graph, self.config(checked_id(session_id)))

    @contextmanager
    def lock(self, session_id: str) -> Iterator[None]:
        """Hold the session's lock: a second process running the same session is refused."""
        path = inside(self.home / "locks" / f"{checked_id(session_id)}.lock", [self.home], "session lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "?"
                raise SessionBusy(
                    f"session {session_id} is already being run by perfloop process "
                    f"{holder}; wait for it to finish (or end that process)"
                ) from None
            f.truncate(0)
            f.write(str(os.getpid()))
            f.flush()
            yield

    def _invoke(self, session_id: str, inp: Any, answer: dict | None = None) -> LoopState:
        with self.lock(session_id):
            if inp is None or isinstance(inp, Command):
                done = self.state(session_id).calls_done
                self.store.supersede_after(session_id, done)
            if answer is not None:
                self.store.add_input(session_id, "answer", answer)
            known = inp if isinstance(inp, LoopState) else self.state(session_id)
            try:
                with executor_for(known.target, known.options.session_dir) as executor:
                    door = LiveDoor(
                        session_id, self.store, executor, host_executors(known.options.session_dir)
                    )
                    self.graph.invoke(
                        inp, self.config(session_id), context=LoopContext(door=door), durability="sync"
                    )
            finally:
                close_hosts()  # the [[hosts]] connections
            state = self.state(session_id)
            status = "paused" if self.pending_approval(session_id) is not None else state.status
            info = self.info(session_id)
            summary = summarize(state, status) if status != "running" else None
            self.store.put_session(info.model_copy(update={"status": status, "summary": summary}))
            return state

    def fork(self, session_id: str, at: str, new_id: str, approve: str | None) -> LoopState:
        """Start a new session from the parent's checkpoint before step `at` (`STEP` or `STEP#N`)."""
        step, _, nth = at.partition("#")
        if step not in FORK_STEPS:
            raise ConfigError(f"cannot fork at {step!r}; fork at one of: {', '.join(FORK_STEPS)}")
        with self.lock(session_id):  # its checkpoints must not move while they are read
            info = self.info(session_id)
            if info.status in ("running", "paused"):
                raise ConfigError(
                    f"session {session_id} is {info.status}; fork it once it has ended "
                    f"(approve/reject or resume it first)"
                )
            history = list(self.graph.get_state_history(self.config(session_id)))[::-1]
        hits = [snap for snap in history if snap.next == (step,)]
        n = int(nth or 1)
        if len(hits) < n:
            raise ConfigError(
                f"session {session_id} reached {step} {len(hits)} time(s); there is no {step}#{n} to fork at"
            )
        parent = LoopState.model_validate(hits[n - 1].values)
        options = parent.options.model_copy(
            update={
                "session_dir": self.session_dir(new_id),
                "demo_source": None,
                "host_dir": parent.options.host_dir and parent.options.host_dir.parent / new_id,
                **({"approve": approve} if approve else {}),
            }
        )
        inp = parent.model_copy(
            update={
                "session_id": new_id,
                "options": options,
                "fork_at": step,
                "server": None,
                "instrumentation": None,
                "pending_commit": None,
                "launches": 0,
                "transitions": [],
                "calls_done": 0,
                "status": "running",
            }
        )
        return self.start_from(inp, info.target_path, parent=session_id)

    def replay(self, session_id: str) -> tuple[LoopState, Summary]:
        """Run the graph again with every tool call answered from the recording."""
        initial = self.store.inputs(session_id, "initial")
        if not initial:
            raise ConfigError(f"session {session_id} has no recorded initial state; it cannot be replayed")
        answers = self.store.inputs(session_id, "answer")
        door = ReplayDoor(session_id, self.store.tool_calls(session_id))
        graph = compile_graph(InMemorySaver(serde=serializer()))
        cfg = thread(f"replay-{session_id}")
        ctx = LoopContext(door=door)
        graph.invoke(LoopState.model_validate(initial[0]), cfg, context=ctx)
        for answer in answers:
            if _pending(graph, cfg) is None:
                raise ReplayDivergence(
                    f"the recording has an approval answer ({answer}) but the "
                    "replayed session did not pause for one"
                )
            graph.invoke(Command(resume=answer), cfg, context=ctx)
        if door.unplayed():
            nxt = door.unplayed()[0]
            raise ReplayDivergence(
                f"the replay ended but the recording has {len(door.unplayed())} more "
                f"call(s), next: #{door.position} {nxt.name} from node {nxt.node}"
            )
        state = LoopState.model_validate(graph.get_state(cfg).values)
        status = "paused" if _pending(graph, cfg) is not None else state.status
        return state, summarize(state, status)


def thread(thread_id: str) -> RunnableConfig:
    """The LangGraph config of one thread (a session's checkpoints)."""
    return {"configurable": {"thread_id": thread_id}}


def _pending(graph: Graph, cfg: RunnableConfig) -> dict | None:
    for task in graph.get_state(cfg).tasks:
        for intr in task.interrupts:
            return intr.value
    return None


def summarize(state: LoopState, status: str) -> Summary:
    """The session's outcome (pure)."""
    before, after = state.baseline, state.reference
    rejected = [d.label for d in state.decisions if d.verdict != "accepted"]
    judged = [d for d in state.decisions if d.judgement is not None]
    decisive = next((d for d in reversed(judged) if d.verdict == "accepted"), judged[-1] if judged else None)
    j = decisive.judgement if decisive else None
    return Summary(
        session=state.session_id,
        status=status,
        tpot_ms_before=before.tpot_ms.median if before else None,
        tpot_ms_after=after.tpot_ms.median if after else None,
        speedup=before.tpot_ms.median / after.tpot_ms.median if before and after else None,
        ttft_ms_before=before.ttft_ms.median if before else None,
        ttft_ms_after=after.ttft_ms.median if after else None,
        outputs_identical=after.outputs == before.outputs if before and after else None,
        accepted=[d.label for d in state.decisions if d.verdict == "accepted"],
        rejected=rejected,
        commits=[c.sha for c in state.accepted],
        branch=state.branch,
        server_launches=state.launches,
        profile_method=state.target.profile.method,
        measured_by=before.client if before else None,
        iterations=len(state.profiles),
        stop_reason=state.stop_reason or state.error or "",
        llm_tokens=state.llm_usage.tokens,
        llm_calls=state.llm_usage.calls,
        repo=state.target.repo,
        verdict=j.verdict if j else None,
        speedup_ci=[j.last.ci_low, j.last.ci_high] if j else None,
        requests_per_arm=j.last.requests_candidate if j else None,
        launch_noise=j.launch_noise.sigma_log if j else None,
        decision=j.line() if j else None,
        mechanisms=[f"{m.playbook}: {m.note}" for m in state.mechanisms],
        unexplained_gains=[m.playbook for m in state.mechanisms if not m.confirmed],
        launch_argv=state.launch_argv or state.target.launch.argv,
        trials=[t.line() for t in state.trials],
    )
