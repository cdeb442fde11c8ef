"""SGLang's native `/generate` on the real server: what sglang's bench_serving (`--backend sglang`)
and SGLang users send, streamed and not, with its errors."""

import itertools
import json
import urllib.request

import pytest

from tests.target.conftest import chat


def stream_generate(server, body: dict) -> list[dict]:
    """POST a streamed /generate; the decoded `data:` events up to `[DONE]`."""
    req = urllib.request.Request(
        server.url + "/generate",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    events: list[dict] = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for line in resp:
            line = line.strip()
            if line == b"data: [DONE]":
                return events
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
    raise AssertionError(f"stream ended without [DONE] after {events}")


def test_generate_streams_cumulative_text_with_token_counts(small_server):
    body = {
        "text": "The KV cache",
        "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True},
    }
    events = stream_generate(small_server, body)
    assert [e["meta_info"]["completion_tokens"] for e in events[:10]] == list(range(1, 11))
    assert all(b["text"].startswith(a["text"]) for a, b in itertools.pairwise(events))  # text so far
    last = events[-1]
    assert last["meta_info"]["finish_reason"] == {"type": "length"} and len(last["text"]) == 10
    assert last["meta_info"]["prompt_tokens"] == len("The KV cache")  # raw text: no chat template
    status, whole = small_server.post("/generate", body)
    assert status == 200 and whole["text"] == last["text"]  # greedy: streamed == not streamed
    ids = list(b"The KV cache")
    assert small_server.post("/generate", {**body, "text": None, "input_ids": ids})[1]["text"] == last["text"]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"sampling_params": {"max_new_tokens": 4}}, "text"),
        ({"text": "a", "input_ids": [1]}, "text"),
        ({"input_ids": [1, 999]}, "input_ids"),
        ({"text": "a", "sampling_params": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"text": "a", "sampling_params": {"temperature": -1}}, "temperature"),
        ({"text": "a", "sampling_params": "greedy"}, "sampling_params"),
    ],
)
def test_bad_generate_is_400_naming_the_field(small_server, body, param):
    status, reply = small_server.post("/generate", body)
    assert status == 400 and reply["error"]["param"] == param and reply["error"]["message"]
    assert chat(small_server.client(), "still alive", max_tokens=2).choices[0].message.content
