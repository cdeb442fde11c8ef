"""Every door tool, in one explicit list.

Nodes call a tool by its function (`door.call(server.launch, args)`); the recorded name comes from
its `@tool` declaration. This list is where a reader finds them all, and what looks a recorded name
up again (`spec_named`); tests/unit/test_toolbox.py checks that it holds every declared tool and
every name the recorded demo session holds. An SSH host runs a tool from the `module:function` the
client sends (tools/hosts/remote.py), so it needs no list of its own.
"""

from __future__ import annotations

from tools import bench, limits, profiling, server
from tools.door.registry import ToolSpec, spec_of
from tools.hosts import info, transfer
from tools.llm import chat, code, probe
from tools.sglang import porting
from tools.store import aa
from tools.tolerance import forced, score
from tools.workspace import reference, repo

TOOLS = (
    # the target's checkout (tools/workspace/repo.py)
    repo.create_from_tree,
    repo.snapshot,
    repo.ensure_branch,
    repo.leave_branch,
    repo.abandon_branch,
    repo.give_back,
    repo.instrument,
    repo.remove_instrumentation,
    repo.apply_patch,
    repo.check_patch,
    repo.revert_commit,
    repo.sglang_site,
    repo.vllm_site,
    repo.engine_site,
    # the reference tree beside it, for interleaved arms (tools/workspace/reference.py)
    reference.reference_copy,
    reference.remove_reference_copy,
    # the server and its measurement
    server.launch,
    server.status,
    server.stop,
    server.stop_recorded,
    server.stop_marked,  # every server of a session, by the mark in its environment
    limits.context_limit,
    limits.fit_prompts,
    bench.measure,
    bench.measure_pair,
    bench.outputs,
    # the tolerance output gate's teacher-forced scores (tools/tolerance/score.py)
    score.score,
    # the numerics gate's teacher-forced decode (tools/tolerance/forced.py, issue 61)
    forced.forced,
    aa.record_numerics,  # the engine's own numerics, per host, engine and model (issue 61)
    # launch and output noise: the A/A store beside the session store
    aa.record,
    aa.record_output_noise,  # the baseline's A/A on outputs, per host and engine (issue 55)
    # profiles: taken where the server runs, read here
    profiling.take,
    profiling.read,
    # moving files between here and an SSH host
    transfer.fetch,
    transfer.push_tree,
    # what a host says about itself (where a parallel trial's files go there)
    info.expand_user,
    info.memory_fit,  # `[decide] arms = "auto"`: whether two servers fit
    info.kind,  # cross-host arms: the reference host of the session host's kind
    info.clock,  # the search's budget in minutes, read through the door so a replay sees the recorded time
    # the LLM proposer: the model call (here) and its read-only look at the repo (where it lives)
    chat.chat,
    code.read_file_tool,
    code.grep_tool,
    code.list_dir_tool,
    code.read_texts,
    code.check_diff,
    code.log_tail,
    # the target's probe on a model's candidate, in a scratch worktree (tools/llm/probe.py)
    probe.probe,
    # the eval's sglang-port task: a port scored by the equivalence harness (tools/sglang/porting.py)
    porting.equivalence,
)

BY_NAME: dict[str, ToolSpec] = {spec_of(fn).name: spec_of(fn) for fn in TOOLS}


def spec_named(name: str) -> ToolSpec:
    """The tool recorded as `name` (KeyError naming the known ones)."""
    if name not in BY_NAME:
        raise KeyError(f"no tool named {name!r}; known: {sorted(BY_NAME)}")
    return BY_NAME[name]
