"""The OpenAI-compatible API of the real server, through the openai client."""

import concurrent.futures

from tests.target.conftest import chat


def test_health_and_models(small_server):
    assert small_server.get("/health") == (200, {"status": "ok"})
    models = small_server.client().models.list()
    assert [m.id for m in models.data] == ["mla-demo"]


def test_non_streamed_completion(small_server):
    resp = chat(small_server.client(), "hello", max_tokens=12)
    choice = resp.choices[0]
    assert choice.finish_reason == "length"
    assert len(choice.message.content) == 12 and choice.message.content.isprintable()
    assert resp.usage.completion_tokens == 12
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 12


def test_streamed_completion_matches_non_streamed(small_server):
    client = small_server.client()
    stream = chat(client, "hello", max_tokens=12, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat(client, "hello", max_tokens=12).choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_stop_sequence_ends_with_stop(small_server):
    client = small_server.client()
    full = chat(client, "stop test", max_tokens=20).choices[0].message.content
    stop = full[5:7]
    cut = full[: full.find(stop)]
    resp = chat(client, "stop test", max_tokens=20, stop=[stop])
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == cut
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in chat(client, "stop test", max_tokens=20, stop=[stop], stream=True)
    )
    assert streamed == cut


def test_seeded_sampling_is_reproducible_and_seed_and_temperature_matter(small_server):
    """Same seed, same sample; another seed, another sample; temperature 1 is not the greedy text."""
    client = small_server.client()

    def text(**kw):
        return chat(client, "dice", max_tokens=16, **kw).choices[0].message.content

    sampled = [text(temperature=1.0, seed=seed) for seed in (7, 7, 8, 9)]
    assert sampled[0] == sampled[1]
    assert len(set(sampled[1:])) == 3
    assert text(temperature=0) not in sampled


def test_concurrent_streams_complete_and_match_solo_outputs(small_server):
    client = small_server.client()
    prompts = [f"request number {i}" for i in range(8)]
    solo = [chat(client, p, max_tokens=16).choices[0].message.content for p in prompts]

    def stream(prompt):
        chunks = chat(client, prompt, max_tokens=16, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks)

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(stream, prompts))
    assert together == solo
