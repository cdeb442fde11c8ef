"""`bench.score` against real demo servers: what each half of the tolerance gate sees.

An A/A pair (the same tree twice) agrees fully with no logprob difference; a change to the decode
path only (attention past 30 tokens of context zeroed in `forward_decode`, the prefill untouched)
leaves every prefill logprob as it was, and only decoding along the reference's text (with
restarts) catches it."""

from __future__ import annotations

import shutil

import pytest

from agent.decision.gate.outputs import compare
from state.measurement.correctness import CorrectnessConfig
from state.measurement.tolerance import ScoreArgs, ScoreResult
from tests.target.conftest import SMALL, TARGET, Server, free_port, launch, wait_healthy
from tools.tolerance.score import score

PROMPTS = ["Explain the KV cache.", "Write a haiku about GPUs, please."]
CFG = CorrectnessConfig(policy="tolerance", min_top1_agreement=0.95, max_logprob_diff=0.01)
DECODE = "out[i] = self._attend(q[i : i + 1], k_buffer[kv_indices].to(q.dtype), causal=False)[0]\n"
BROKEN = DECODE + "            if len(kv_indices) > 30:\n                out[i] = 0\n"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(reference, A/A twin, decode-broken) small servers, stopped at the end."""
    trees = []
    for name in ("reference", "twin", "broken"):
        tree = tmp_path_factory.mktemp(name) / "mla_server"
        shutil.copytree(TARGET, tree, ignore=shutil.ignore_patterns("__pycache__"))
        trees.append(tree)
    backend = trees[2] / "mla_server" / "attention" / "mla_backend.py"
    text = backend.read_text().replace("k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)",
                                       "k_buffer = self.kv_pool.get_key_buffer(layer_id)")  # fmt: skip
    text = text.replace(
        "out[i] = self._attend(q[i : i + 1], k_buffer[kv_indices], causal=False)[0]\n", BROKEN
    )
    assert BROKEN in text, "the demo's decode attention changed: update the test"
    backend.write_text(text)
    started = []
    try:
        for tree in trees:
            port = free_port()
            log = tree.parent / "server.log"
            started.append(
                Server(launch(tree, ["--port", str(port), "--threads", "1", *SMALL], log), port, log)
            )
        for s in started:
            wait_healthy(s)
        yield started
    finally:
        for s in started:
            s.stop()


def scores(server: Server, continuations: list[str] | None, max_tokens: int = 24) -> ScoreResult:
    return score(ScoreArgs(base_url=server.url, model="mla-demo", prompts=PROMPTS,
                           continuations=continuations, max_tokens=max_tokens))  # fmt: skip


def test_an_a_a_pair_agrees_fully_and_a_decode_only_change_is_caught_by_decoding_along(servers) -> None:
    reference, twin, broken = servers
    ref = scores(reference, None)
    conts = [t.continuation for t in ref.texts]
    assert [len(c) for c in conts] == [24, 24] and all(t.followed is None for t in ref.texts)
    assert [len(t.tokens) for t in ref.texts] == [24, 24]  # byte-level: one token per character

    same = compare(ref, scores(twin, conts), CFG)
    assert (same.top1_agreement, same.max_logprob_diff, same.decoded_positions) == (1.0, 0.0, 48)
    assert same.passed

    bad = compare(ref, scores(broken, conts), CFG)
    assert bad.max_logprob_diff == 0.0  # the prefill is untouched: logprobs alone would pass it
    assert bad.top1_agreement < 0.9 and not bad.passed, bad.line()
    assert "decoded positions" in bad.line() and bad.line().endswith("-> failed")
