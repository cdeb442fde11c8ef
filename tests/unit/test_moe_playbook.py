"""moe-dense-experts on CPU traces recorded here: a top-k routed mixture whose experts run densely
is found, its evidence the matmul over every expert's gate and up (not the model's other matmuls),
and a dense model with the same shapes but no router is not."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from playbooks.match import dense_experts
from state.profiling.profile import OpStat, ProfileSummary

from .test_playbooks_signals import findings_of

TOKENS, HIDDEN, EXPERTS, FFN, TOP_K = 4, 1024, 8, 512, 2  # expert matmuls of ms: their share holds under load
GEN = torch.Generator().manual_seed(0)


def weight(rows: int, cols: int) -> torch.Tensor:
    return (torch.randn(rows, cols, generator=GEN) * cols**-0.5).to(torch.bfloat16)


X = torch.randn(TOKENS, HIDDEN, generator=GEN).to(torch.bfloat16)
ROUTER = weight(EXPERTS, HIDDEN)
GATE_UP = weight(EXPERTS * 2 * FFN, HIDDEN)  # 8192 outputs: every expert's gate and up
DOWN = weight(HIDDEN, EXPERTS * FFN)
Q_PROJ = weight(9 * HIDDEN, HIDDEN)  # as large, not an expert projection (9216 outputs)


def moe_step(pool: torch.Tensor) -> None:
    """The demo's `_moe`: top-k routing, then every expert densely, unselected gates at zero."""
    F.linear(X, Q_PROJ)
    scores = F.linear(X, ROUTER).float().softmax(dim=-1)
    top, idx = scores.topk(TOP_K, dim=-1)
    gates = torch.zeros_like(scores).scatter_(-1, idx, top / top.sum(-1, keepdim=True))
    gate, up = F.linear(X, GATE_UP).view(TOKENS, EXPERTS, 2 * FFN).chunk(2, dim=-1)
    act = F.silu(gate) * up * gates.to(X.dtype).unsqueeze(-1)
    F.linear(act.reshape(TOKENS, -1), DOWN)


def dense_step(pool: torch.Tensor) -> None:
    """A dense SwiGLU MLP with the same weights and no router: nothing is routed."""
    F.linear(X, Q_PROJ)
    gate, up = F.linear(X, GATE_UP).view(TOKENS, EXPERTS, 2 * FFN).chunk(2, dim=-1)
    F.linear((F.silu(gate) * up).reshape(TOKENS, -1), DOWN)


def test_a_dense_mixture_is_found_with_the_expert_matmul_as_evidence(tmp_path: Path) -> None:
    findings = findings_of(tmp_path, moe_step)
    finding = next(f for f in findings if f.playbook == "moe-dense-experts")
    assert finding.evidence and all(max(e.dims[1]) == EXPERTS * 2 * FFN for e in finding.evidence)
    assert {e.op for e in finding.evidence} <= {"aten::mm", "aten::addmm", "aten::linear"}
    assert finding.expected_gain_share == pytest.approx(0.5 * sum(e.share for e in finding.evidence))
    assert "every expert's gate and up" in finding.evidence[0].note


def test_a_dense_model_without_a_router_is_not_a_mixture(tmp_path: Path) -> None:
    assert "moe-dense-experts" not in [f.playbook for f in findings_of(tmp_path, dense_step)]


def op(name: str, *dims: list[int]) -> OpStat:
    return OpStat(name=name, calls=1, self_us=10.0, total_us=10.0, share=0.1, input_dims=list(dims))


def summary(ops: list[OpStat]) -> ProfileSummary:
    return ProfileSummary(
        ops=ops, total_self_us=40.0, steps=1, step_us=40.0, source="t.json.gz", time_basis="cpu"
    )


def test_the_expert_width_must_match_the_router_and_the_activation() -> None:
    gate_up = op("aten::mm", [4, 256], [256, 2048])
    q_proj = op("aten::mm", [4, 256], [256, 2304])
    ops = [gate_up, q_proj, op("aten::topk", [4, 8]), op("aten::silu", [4, 8, 128])]
    profile = summary(ops)
    assert dense_experts([gate_up, q_proj], profile) == [gate_up]
    other = summary([*ops[:2], op("aten::topk", [4, 16]), ops[3]])
    assert dense_experts([gate_up, q_proj], other) == []  # 16 experts routed, 8 activated: not these
