"""Bad input, pool exhaustion and client disconnects: errors are clean and the server keeps serving."""

import http.client
import json
import time

import openai
import pytest

from tests.target.conftest import SMALL, chat

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "body, param",
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        ({"messages": []}, "messages"),
        ({"messages": MSG, "max_tokens": 100000}, "max_tokens"),
        ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"messages": MSG, "max_tokens": "ten"}, "max_tokens"),
        ({"messages": MSG, "temperature": "hot"}, "temperature"),
        ({"messages": MSG, "stream": "yes"}, "stream"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ],
)
def test_bad_request_is_400_with_openai_error(small_server, body, param):
    status, reply = small_server.post("/v1/chat/completions", body)
    assert status == 400
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["param"] == param and reply["error"]["message"]
    assert chat(small_server.client(), "still alive", max_tokens=2).choices[0].message.content


def test_openai_client_sees_bad_request(small_server):
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        chat(small_server.client(), "hi", max_tokens=5000)


def test_unknown_route_is_404(small_server):
    assert small_server.post("/v1/nothing", {})[0] == 404


@pytest.fixture(scope="module")
def tiny_pool(start_server):
    """A server whose pool holds one 100-token request at a time."""
    return start_server(*SMALL[2:], "--pool-slots", "150")


def test_pool_exhausted_is_429_and_slots_come_back(tiny_pool):
    client = tiny_pool.client()
    stream = chat(client, "long one", max_tokens=100, stream=True)
    next(iter(stream))
    with pytest.raises(openai.RateLimitError, match="KV pool exhausted"):
        chat(client, "second", max_tokens=100)
    assert len("".join(c.choices[0].delta.content or "" for c in stream if c.choices)) == 100
    assert chat(client, "after", max_tokens=100).usage.completion_tokens == 100


def test_client_disconnect_frees_slots(start_server):
    # A pool big enough that 200 tokens take far longer than the deadline below.
    slow = start_server(*SMALL[2:], "--pool-slots", "60000")
    conn = http.client.HTTPConnection("127.0.0.1", slow.port, timeout=30)
    body = {"messages": MSG, "max_tokens": 200, "stream": True, "temperature": 0}
    conn.request("POST", "/v1/chat/completions", json.dumps(body))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    assert slow.get("/get_server_info")[1]["kv_slots_free"] < 60000
    resp.close()  # walk away mid-stream
    conn.close()
    deadline = time.monotonic() + 10
    while slow.get("/get_server_info")[1]["kv_slots_free"] < 60000:
        assert time.monotonic() < deadline, "slots of a disconnected client were not freed"
        time.sleep(0.1)


def test_unknown_fields_are_ignored(small_server):
    body = {
        "messages": MSG,
        "max_tokens": 3,
        "temperature": 0,
        "top_k": {"nested": [1]},
        "logit_bias": None,
        "n": 1,
        "user": "u",
    }
    status, reply = small_server.post("/v1/chat/completions", body)
    assert status == 200 and len(reply["choices"][0]["message"]["content"]) == 3
