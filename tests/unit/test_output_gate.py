"""The tolerance output gate's pure parts: the metrics, the echo answer's parsing, the config."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from pydantic import ValidationError

from agent.decision.gate.outputs import compare
from state.measurement.correctness import CorrectnessConfig
from state.measurement.tolerance import ScoreArgs, ScoredText, ScoreResult
from tools.errors import ServerError
from tools.tolerance.score import continuation_scores, follow, score

CFG = CorrectnessConfig(policy="tolerance", min_top1_agreement=0.75, max_logprob_diff=0.2)


def scored(*texts: tuple[list[float], list[bool] | None]) -> ScoreResult:
    """One text per (logprobs, followed); the continuation is one character per token."""
    return ScoreResult(
        texts=[
            ScoredText(
                prompt=f"p{i}",
                continuation="abcd"[: len(lp)],
                tokens=list("abcd"[: len(lp)]),
                token_logprobs=lp,
                followed=followed,
            )
            for i, (lp, followed) in enumerate(texts)
        ],
        duration_s=0.0,
    )


REF = scored(([-0.1, -0.5, -1.0], None), ([-0.2, -0.3], None))  # the reference's own texts
ALL = [True, True, True], [True, True]


def test_identical_scores_agree_fully_with_no_difference() -> None:
    r = compare(REF, scored(([-0.1, -0.5, -1.0], ALL[0]), ([-0.2, -0.3], ALL[1])), CFG)
    assert (r.top1_agreement, r.max_logprob_diff, r.positions, r.decoded_positions, r.prompts) == (
        1.0, 0.0, 5, 5, 2,
    )  # fmt: skip
    assert r.passed and r.line().endswith("over 5 scored positions of 2 prompts -> passed")


def test_agreement_counts_decoded_positions_over_all_prompts_and_max_diff_names_where() -> None:
    cand = scored(([-0.1, -0.6, -1.0], [True, False, True]), ([-0.45, -0.3], [True, True]))
    r = compare(REF, cand, CFG)
    assert r.top1_agreement == pytest.approx(4 / 5)
    assert r.max_logprob_diff == pytest.approx(0.25)
    assert r.worst == "prompt 2, token 1 ('a')"
    assert not r.passed  # 0.25 > 0.2
    assert "max logprob diff 0.250 at prompt 2, token 1 ('a') (above 0.200)" in r.line()
    assert r.line().endswith("-> failed")


def test_each_threshold_alone_fails_the_gate() -> None:
    low_agreement = scored(([-0.1, -0.5, -1.0], [False, False, True]), ([-0.2, -0.3], [True, True]))
    r = compare(REF, low_agreement, CFG)
    assert r.top1_agreement == pytest.approx(3 / 5) and r.max_logprob_diff == 0.0
    assert not r.passed and "top-1 agreement 60.0% (below 75.0%) over 5 decoded positions" in r.line()
    just = scored(([-0.1, -0.5, -1.2], ALL[0]), ([-0.2, -0.3], ALL[1]))
    assert compare(REF, just, CFG).passed  # a difference of 0.2 is within 0.2


def test_arms_scored_on_different_texts_or_not_decoded_along_are_refused() -> None:
    other = REF.model_copy(update={"texts": [REF.texts[0], REF.texts[0]]})
    with pytest.raises(ValueError, match="different texts"):
        compare(REF, other, CFG)
    with pytest.raises(ValueError, match="did not decode along"):
        compare(REF, REF, CFG)


def test_follow_decodes_again_after_each_miss_from_the_reference_context() -> None:
    """A server that writes `x` wherever the text has `b` (a decode-path change): each miss
    counts once, and decoding resumes after the missed character, not from the server's text."""
    asked: list[int] = []

    def decode(done: int) -> str:
        asked.append(done)
        return "abcabc"[done:].replace("b", "x")

    assert follow("abcabc", decode) == [True, False, True, True, False, True]
    assert asked == [0, 2, 5]
    assert follow("abc", lambda done: "abc"[done:]) == [True, True, True]  # one request
    assert follow("abc", lambda done: "") == [False, False, False]  # a server that stops early


ECHO = {
    "tokens": ["H", "i", "!", "?"],
    "token_logprobs": [None, -1.5, -0.25, -2.0],
    "top_logprobs": [None, {"i": -1.5}, {"x": -0.2}, {"?": -2.0}],
    "text_offset": [0, 1, 2, 3],
}


def test_continuation_positions_are_those_past_the_prompt() -> None:
    s = continuation_scores("Hi", "!?", ECHO)
    assert (s.tokens, s.token_logprobs, s.followed) == (["!", "?"], [-0.25, -2.0], None)


def test_an_answer_without_logprobs_is_one_clear_error() -> None:
    with pytest.raises(ServerError, match="no per-token logprobs"):
        continuation_scores("Hi", "!?", None)
    with pytest.raises(ServerError, match="no per-token logprobs"):
        continuation_scores("Hi", "!?", {k: v for k, v in ECHO.items() if k != "text_offset"})


def test_policy_and_thresholds_are_validated() -> None:
    assert CorrectnessConfig().policy == "exact"  # numerics and tolerance are chosen by the target
    with pytest.raises(ValidationError, match='task applies to policy = "numerics" only'):
        CorrectnessConfig(policy="exact", task="gsm8k.jsonl")
    with pytest.raises(ValidationError, match='policy = "tolerance" needs both'):
        CorrectnessConfig(policy="tolerance", min_top1_agreement=0.9)
    with pytest.raises(ValidationError, match='apply to policy = "tolerance" only'):
        CorrectnessConfig(max_logprob_diff=0.1)
    with pytest.raises(ValidationError):
        CorrectnessConfig(policy="tolerance", min_top1_agreement=1.5, max_logprob_diff=0.1)
    with pytest.raises(ValidationError):
        CorrectnessConfig(policy="tolerance", min_top1_agreement=0.9, max_logprob_diff=-1)


def test_a_server_without_text_completions_is_named_with_what_to_do() -> None:
    """A real HTTP server that answers 404 (as a chat-only server does): one line naming the
    endpoint, its answer and the `exact` policy."""

    class NotFound(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"detail": "Not Found"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with pytest.raises(ServerError) as err:
            score(ScoreArgs(base_url=url, model="m", prompts=["hi"], max_tokens=2))
    finally:
        httpd.shutdown()
        httpd.server_close()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("/v1/completions answered HTTP 404")
    assert 'or use [correctness] policy = "exact"' in msg
