"""The loop as a LangGraph StateGraph. Routing lives in each node's `Command[Literal[...]]`.

LangGraph reads those annotations to draw the diagram below (written by `python -m agent.diagram`
from the compiled graph; tests/unit/test_graph.py fails when it is stale). Every step may route
to `abort` on an unexpected tool error (it cleans up like `finish`); a new session enters at
`prepare`, a forked one at `reconcile`.

```mermaid
graph TD;
    __start__ -.-> prepare;
    __start__ -.-> reconcile;
    apply -.-> abort;
    apply -.-> propose;
    apply -.-> relaunch;
    approve -.-> abort;
    approve -.-> cleanup;
    approve -.-> propose;
    approve -.-> trial;
    baseline -.-> abort;
    baseline -.-> profile;
    chain -.-> abort;
    chain -.-> finish;
    cleanup -.-> abort;
    cleanup -.-> apply;
    decide -.-> abort;
    decide -.-> chain;
    decide -.-> finish;
    decide -.-> profile;
    decide -.-> rollback;
    diagnose -.-> abort;
    diagnose -.-> propose;
    instrument -.-> abort;
    instrument -.-> launch;
    join -.-> abort;
    join -.-> cleanup;
    join -.-> propose;
    join -.-> trial;
    launch -.-> abort;
    launch -.-> baseline;
    measure -.-> abort;
    measure -.-> decide;
    prepare -.-> abort;
    prepare -.-> instrument;
    prepare -.-> launch;
    profile -.-> abort;
    profile -.-> diagnose;
    propose -.-> abort;
    propose -.-> approve;
    propose -.-> chain;
    propose -.-> finish;
    propose -.-> trial;
    reconcile -.-> abort;
    reconcile -.-> approve;
    reconcile -.-> diagnose;
    reconcile -.-> profile;
    reconcile -.-> propose;
    relaunch -.-> abort;
    relaunch -.-> measure;
    relaunch -.-> rollback;
    rollback -.-> abort;
    rollback -.-> propose;
    trial --> join;
    abort --> __end__;
    finish --> __end__;
    propose -.-> propose;
```

`builder` is exported uncompiled so tests and `langgraph.json` can compile it with their own
checkpointer; `compile_graph` is what the CLI uses.
"""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agent.context import LoopContext
from agent.steps.chain import chain
from agent.steps.end import abort, finish
from agent.steps.measure import decide, measure
from agent.steps.patch import apply, approve, cleanup, relaunch, rollback
from agent.steps.profile import diagnose, profile
from agent.steps.propose import propose
from agent.steps.setup import baseline, instrument, launch, prepare, reconcile
from agent.steps.trial import join, trial
from state.sessions.fanout import TrialTask
from state.sessions.loop import LoopState

NODES = (
    prepare,
    instrument,
    launch,
    baseline,
    profile,
    diagnose,
    propose,
    approve,
    cleanup,
    apply,
    relaunch,
    measure,
    decide,
    rollback,
    reconcile,
    join,
    chain,
)


def _entry(state: LoopState) -> str:
    """A new session starts at prepare; a fork first reconciles the world with its checkpoint."""
    return "reconcile" if state.fork_at else "prepare"


Graph = CompiledStateGraph[LoopState, LoopContext, LoopState, LoopState]
"""The compiled loop: state, run-time context, input and output types."""


def build() -> StateGraph[LoopState, LoopContext, LoopState, LoopState]:
    """The uncompiled graph."""
    g = StateGraph(LoopState, context_schema=LoopContext)
    for node in NODES:
        g.add_node(node.__name__, node)
    g.add_node("trial", trial, input_schema=TrialTask)
    g.add_edge("trial", "join")
    g.add_node("finish", finish)
    g.add_node("abort", abort)
    g.add_conditional_edges(START, _entry, ["prepare", "reconcile"])
    g.add_edge("finish", END)
    g.add_edge("abort", END)
    return g


builder = build()


def compile_graph(checkpointer: BaseCheckpointSaver | None = None) -> Graph:
    """The compiled graph, checkpointed by `checkpointer`."""
    return builder.compile(checkpointer=checkpointer)


graph = compile_graph()
"""For `langgraph dev` / LangGraph Studio (langgraph.json); the platform supplies persistence."""
