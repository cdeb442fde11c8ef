"""The context limit learned from a real demo server, and the prompt lengths drawn from it and
fitted to its tokenizer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from state.door.calls import ServerArgs
from state.engines.limits import ContextLimitArgs, FitArgs
from tests.launching import launch_demo
from tools import server
from tools.client.stream import chat_body, stream_completion
from tools.http import post_json
from tools.limits import context_limit, fit_prompts, prompt_lengths, stated


def test_the_demo_server_states_its_context_limit_and_a_near_limit_prompt_is_served(tmp_path: Path) -> None:
    argv = [
        "bash",
        "launch.sh",
        "--port",
        "{port}",
        "--preset",
        "cpu",
        "--threads",
        "1",
        "--context-len",
        "256",
    ]
    handle = launch_demo(argv, tmp_path / "server.log")
    try:
        limit = context_limit(ContextLimitArgs(base_url=handle.base_url, model="mla-demo"))
        assert (limit.tokens, limit.source) == (256, "/get_server_info context_len")
        assert limit.tokens is not None
        longest = prompt_lengths(limit.tokens, 8)[-1]
        t0 = time.monotonic()
        body = {"model": "mla-demo", "prompt": "a" * longest, "max_tokens": 8, "temperature": 0}
        code, text = post_json(handle.base_url + "/v1/completions", body, timeout_s=300)
        assert code == 200, text
        assert json.loads(text)["usage"]["total_tokens"] == 256  # byte-level tokens: at the limit
        print(f"near-limit request ({longest} + 8 tokens): {time.monotonic() - t0:.1f} s")
        over = {**body, "prompt": "a" * (longest + 1)}
        assert post_json(handle.base_url + "/v1/completions", over, timeout_s=60)[0] == 400
        # the long prompts of the correctness set, fitted to the server's tokenizer and chat
        # template (24 characters around the message: the shortest text there is takes 25)
        t0 = time.monotonic()
        fit = fit_prompts(FitArgs(base_url=handle.base_url, model="mla-demo", lengths=[5, 100, 248], seed=7))
        assert fit.tokens == [25, 100, 248] and fit.requests == 4, fit  # the top one is the probe
        assert [len(p) for p in fit.prompts] == [1, 76, 224]
        print(f"fit: {fit.requests} requests, {time.monotonic() - t0:.1f} s")
        _, text, usage = stream_completion(handle.base_url, chat_body("mla-demo", fit.prompts[-1], 8), 300)
        assert usage["prompt_tokens"] + usage["completion_tokens"] == 256 and len(text) == 8
    finally:
        server.stop(ServerArgs(server=handle, grace_s=5))


def test_nothing_stated_is_said_so_in_one_line() -> None:
    limit = context_limit(ContextLimitArgs(base_url="http://127.0.0.1:9", model="m", timeout_s=1))
    assert limit.tokens is None and limit.source.startswith("none of /get_model_info")


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ({"/get_model_info": {"context_length": 4096}}, [(4096, "/get_model_info context_length")]),
        (
            {"/get_server_info": {"context_length": 8192, "max_total_num_tokens": 5000}},
            [(8192, "/get_server_info context_length"), (5000, "/get_server_info max_total_num_tokens")],
        ),
        (
            {
                "/v1/models": {
                    "data": [{"id": "other", "max_model_len": 9}, {"id": "m", "max_model_len": 2048}]
                }
            },
            [(2048, "/v1/models max_model_len")],
        ),
        ({"/get_model_info": {"context_length": True}, "/get_server_info": ["x"], "/v1/models": None}, []),
    ],
)
def test_stated_limits(answers: dict, expected: list) -> None:
    assert stated(answers, "m") == expected


def test_prompt_lengths_cover_short_middle_and_the_limit() -> None:
    assert prompt_lengths(1024, 24) == [167, 500, 833, 1000]
    two = prompt_lengths(4096, 64, per_stratum=2)
    assert two[0] < 4032 / 3 < two[2] < 2 * 4032 / 3 < two[4] and two[-1] == 4032 and len(two) == 7
    with pytest.raises(ValueError, match="leaves no room"):
        prompt_lengths(16, 16)
