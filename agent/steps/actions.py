"""Actions several steps share: the session branch, instrumenting the tree, the session's playbooks.

Each is a plain function of the state and runtime that calls tools through the door; steps import
them from here and never from each other. Starting and measuring a server is `agent/serving.py`
(the judging in `agent/decision` does it too).
"""

from __future__ import annotations

from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, call
from playbooks.engine import load_playbooks
from playbooks.schema import Playbook
from state.door.calls import InstrumentArgs, RemoveInstrumentationArgs
from state.engines.workspace import InstrumentationRecord
from state.sessions.loop import LoopState
from tools.workspace import repo
from tools.workspace.commands import SESSION_BRANCH_PREFIX


def session_branch(session_id: str) -> str:
    """The branch accepted patches are committed on (pure)."""
    return f"{SESSION_BRANCH_PREFIX}{session_id}"


def instrument_if_needed(state: LoopState, runtime: Runtime[LoopContext]) -> InstrumentationRecord:
    """Insert the dormant profiler unless it is already in the tree; returns the record."""
    cfg = state.target.profile
    return state.instrumentation or call(
        runtime,
        repo.instrument,
        InstrumentArgs(
            repo=state.target.repo,
            relpath=cfg.model_runner_path,
            class_name=cfg.hook_class,
            method=cfg.hook_method,
        ),
    )


def remove_instrumentation(state: LoopState, runtime: Runtime[LoopContext]) -> None:
    """Reverse exactly the instrumentation hunks, if any are in the tree."""
    if state.instrumentation is not None:
        call(
            runtime,
            repo.remove_instrumentation,
            RemoveInstrumentationArgs(repo=state.target.repo, record=state.instrumentation),
        )


def playbooks_of(state: LoopState) -> list[Playbook]:
    """The playbooks this session searches: the built-in catalog (unless turned off) and --playbooks dirs."""
    books = load_playbooks(state.options.playbook_dirs, state.options.playbook_files)
    if state.options.builtin_playbooks:
        return books
    extra = {d.resolve() for d in state.options.playbook_dirs}
    return [b for b in books if Path(b.source_dir).resolve().parent in extra]
