"""The loop on a `kind = "sglang"` target, up to the first launch (no GPU here to run SGLang):
release detection, the decode hook per release, instrumentation in the real upstream file, and the
playbook patch chosen by release, applied and committed by the loop's own code path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from agent.context import LoopContext
from agent.graph import builder
from agent.sessions.checkpoint import serializer
from agent.steps.propose import propose
from playbooks.engine import load_playbooks
from playbooks.patches import choose_patch
from state.config.options import LoopOptions
from state.config.target import LaunchConfig, MeasureConfig, TargetConfig
from state.door.calls import ApplyArgs
from state.profiling.diagnosis import Diagnosis, Finding
from state.sessions.loop import LoopState
from tests.sglang.conftest import unpack
from tools.door.live import LiveDoor as Door
from tools.sglang.layout import locate
from tools.store.sessions import SessionStore
from tools.workspace.repo import apply_patch

EXPECTED = {
    "0.5.9": ("python/sglang/srt/model_executor/model_runner.py", "ModelRunner", "forward_decode"),
    "0.5.23": ("python/sglang/srt/model_executor/runner/eager_runner.py", "EagerRunner", "_execute_decode"),
}


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_prepare_and_instrument_an_upstream_checkout(version: str, tmp_path: Path) -> None:
    ws = unpack(version, tmp_path)
    repo = ws.root
    ws.close()
    target = TargetConfig(
        name="sglang",
        kind="sglang",
        repo=repo,
        launch=LaunchConfig(argv=["{python}", "-m", "sglang.launch_server"]),
        measure=MeasureConfig(prompts=["hi"]),
    )
    state = LoopState(
        session_id="s1",
        target=target,
        options=LoopOptions(session_dir=tmp_path / "session", python=sys.executable),
    )
    store = SessionStore(tmp_path / "store.sqlite")
    graph = builder.compile(checkpointer=InMemorySaver(serde=serializer()), interrupt_before=["launch"])
    cfg: RunnableConfig = {"configurable": {"thread_id": "s1"}}
    door = Door("s1", store)
    graph.invoke(state, cfg, context=LoopContext(door=door))
    after = LoopState.model_validate(graph.get_state(cfg).values)
    relpath, cls, method = EXPECTED[version]
    assert after.sglang is not None and after.sglang.version == version
    assert (
        after.target.profile.model_runner_path,
        after.target.profile.hook_class,
        after.target.profile.hook_method,
    ) == (relpath, cls, method)
    assert after.instrumentation is not None and after.instrumentation.relpath == relpath
    source = (repo / relpath).read_text()
    assert "perfloop-instrumentation" in source
    compile(source, relpath, "exec")

    book = next(b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast")
    diff = choose_patch(book, after.target.kind, after.sglang).diff
    chosen = Path(book.source_dir) / "patches" / f"sglang-{version}.diff"
    assert diff == chosen.read_text()  # picked by release (0.5.9 and 0.5.23 patches differ)
    commit = door.call(
        apply_patch,
        ApplyArgs(
            repo=repo,
            diff=diff,
            subject="s",
            trailers={"Perfloop-Session": "s1", "Perfloop-Playbook": book.id},
        ),
    )
    assert commit.branch == "perfloop/s1"
    assert [c.name for c in store.tool_calls("s1")][:3] == [
        "repo.snapshot",
        "repo.ensure_branch",
        "repo.sglang_site",
    ]


ARGV = ["{python}", "-m", "sglang.launch_server", "--tp", "8", "--port", "{port}"]


@pytest.mark.parametrize(
    "extra, refused",
    [
        (["--disable-cuda-graph"], None),
        ([], "unless launched with --disable-cuda-graph"),
        (["--disable-cuda-graph", "--dcp-size", "2"], "with --dcp-size > 1"),
        (["--disable-cuda-graph", "--dcp-size=1"], None),
        (["--disable-cuda-graph", "--speculative-algorithm", "EAGLE"], "with speculative decoding"),
    ],
)
def test_propose_refuses_the_cast_patch_where_it_keeps_the_cast(extra, refused, tmp_path: Path) -> None:
    """On a real 0.5.23 checkout: the patch is proposed for eager decode, and refused with the reason
    under CUDA graphs, DCP or speculative decoding (no launch spent on it)."""
    ws = unpack("0.5.23", tmp_path)
    repo = ws.root
    ws.close()
    book = next(b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast")
    finding = Finding(
        playbook=book.id,
        title=book.title,
        confidence=0.9,
        expected_gain_share=0.6,
        expected_gain_ms=None,
        explanation=book.explanation,
        evidence=[],
    )
    state = LoopState(
        session_id="s1",
        options=LoopOptions(session_dir=tmp_path / "session", python=sys.executable),
        target=TargetConfig(
            name="sglang",
            kind="sglang",
            repo=repo,
            launch=LaunchConfig(argv=ARGV + extra),
            measure=MeasureConfig(prompts=["hi"]),
        ),
        sglang=locate(repo),
        diagnosis=Diagnosis(findings=[finding], top_ops=[], time_basis="device"),
    )
    door = Door("s1", SessionStore(tmp_path / "store.sqlite"))
    cmd = propose(state, Runtime(context=LoopContext(door=door)))
    if refused is None:
        assert cmd.goto == "approve" and cmd.update["proposal"].source == book.id
    else:
        assert cmd.goto == "finish" and cmd.update["proposal"] is None
        assert f"skipped {book.id} (not proposed: " in cmd.update["stop_reason"]
        assert refused in cmd.update["stop_reason"]
