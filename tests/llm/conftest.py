"""Helpers for the LLM proposer's tests: a demo checkout, a state to propose from, scripted answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from agent.cli.target import load_target
from agent.context import LoopContext
from state.config.options import LoopOptions
from state.measurement.measure import RequestRecord
from state.profiling.diagnosis import Diagnosis, Evidence, Finding
from state.profiling.profile import OpStat
from state.proposers.proposer import ProposerConfig
from state.sessions.loop import LoopState
from tests.e2e.conftest import make_repo, write_target
from tools.client.stats import summarize

BACKEND = "mla_server/attention/mla_backend.py"
OLD = """\
        k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for i, kv_indices in enumerate(batch.kv_indices):
            out[i] = self._attend(q[i : i + 1], k_buffer[kv_indices], causal=False)[0]
"""
NEW = """\
        k_buffer = self.kv_pool.get_key_buffer(layer_id)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for i, kv_indices in enumerate(batch.kv_indices):
            kv = k_buffer[kv_indices].to(q.dtype)  # gather the request's rows, then cast only those
            out[i] = self._attend(q[i : i + 1], kv, causal=False)[0]
"""
WRONG = OLD.replace("k_buffer[kv_indices], causal", "k_buffer[kv_indices[-4:]].to(q.dtype), causal").replace(
    "get_key_buffer(layer_id).to(q.dtype)", "get_key_buffer(layer_id)"
)
"""Faster (casts 4 rows per request) and wrong (attends to them only): outputs change."""
RATIONALE = (
    "Gather-then-cast: forward_decode casts the whole FP8 KV pool to BF16 every layer and step.\n"
    "Cast only the rows each request attends to.\n"
)


def edit_block(path: str, old: str, new: str) -> str:
    return f"{path}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"


def fix_answer(old: str = OLD, new: str = NEW, path: str = BACKEND) -> str:
    """The model's final answer: rationale, then the edit inside a fenced block."""
    return f"{RATIONALE}\n```python\n{edit_block(path, old, new)}```\n"


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "engine")


def loop_state(tmp_path: Path, repo: Path, base_url: str, **proposer) -> LoopState:
    """A state as `propose` sees it after a diagnosis with no playbook match (the generic finding)."""
    target = load_target(write_target(tmp_path / "t.toml", repo))
    proposer = {"approve": "auto", **proposer}  # model patches tried unasked, unless a test says manual
    cfg = ProposerConfig(mode="llm", model="scripted-coder", base_url=base_url, **proposer)
    location = f"{repo}/{BACKEND}:26 (forward_decode)"
    op = OpStat(
        name="aten::copy_",
        calls=40,
        self_us=600_000.0,
        total_us=600_000.0,
        share=0.8,
        input_dims=[[65536, 1, 576], [65536, 1, 576], []],
        input_types=["c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"],
        location=location,
    )
    evidence = Evidence(
        op=op.name,
        dims=op.input_dims,
        self_us=op.self_us,
        share=op.share,
        calls=op.calls,
        note="n",
        location=location,
    )
    finding = Finding(
        playbook="generic",
        title="aten::copy_ takes 80% of cpu time",
        confidence=0.2,
        expected_gain_share=0.0,
        expected_gain_ms=None,
        explanation="No playbook matched. The heaviest operator group is aten::copy_.",
        evidence=[evidence],
    )
    records = [RequestRecord(prompt_index=0, ttft_ms=50.0, itl_ms=[30.0] * 3, text="a", completion_tokens=4)]
    return LoopState(
        session_id="s-llm",
        target=target.model_copy(update={"proposer": cfg}),
        options=LoopOptions(session_dir=tmp_path / "session", python="python3"),
        diagnosis=Diagnosis(findings=[finding], top_ops=[op], time_basis="cpu"),
        reference=summarize("ref", "tree", records, 1, wall_s=1.0),
    )


def runtime(door) -> Runtime[LoopContext]:
    """What a node's `call` needs: `runtime.context.door`."""
    door.node = "propose"
    return Runtime(context=LoopContext(door=door))
