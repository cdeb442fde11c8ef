"""`/v1/completions` on the real server: greedy text, and `echo` + `logprobs` + `max_tokens: 0`
scoring a prompt, as perfloop's tolerance gate (tools/tolerance/score.py) and the openai client send it."""

import math

import pytest

PRINTABLE = {chr(c) for c in range(32, 127)}


def test_greedy_text_equals_generate_on_the_same_raw_prompt(small_server):
    resp = small_server.client().completions.create(
        model="mla-demo", prompt="The KV cache", max_tokens=10, temperature=0
    )
    assert resp.object == "text_completion" and resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 10 and resp.choices[0].logprobs is None
    status, native = small_server.post(
        "/generate", {"text": "The KV cache", "sampling_params": {"max_new_tokens": 10, "temperature": 0}}
    )
    assert status == 200 and resp.choices[0].text == native["text"]


def test_echo_scores_every_position_of_a_greedy_continuation_in_line_with_generation(small_server):
    """Scoring prompt + its greedy continuation: position i's top alternatives are those the
    server chose token i from (the most likely printable one is the generated token), so the
    positions line up with generation; the same text scored twice gives the same numbers."""
    client = small_server.client()
    prompt = "Explain the KV cache."
    cont = client.completions.create(model="mla-demo", prompt=prompt, max_tokens=8, temperature=0)
    text = prompt + cont.choices[0].text

    def score():
        return client.completions.create(
            model="mla-demo", prompt=text, max_tokens=0, echo=True, logprobs=20, temperature=0
        )

    resp = score()
    choice = resp.choices[0]
    lp = choice.logprobs
    assert choice.text == text and resp.usage.completion_tokens == 0
    assert "".join(lp.tokens) == text and lp.text_offset == list(range(len(text)))
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for i in range(1, len(text)):
        alts = lp.top_logprobs[i]
        assert len(alts) <= 20 and all(v <= 0 for v in alts.values())
        if lp.tokens[i] in alts:
            assert alts[lp.tokens[i]] == pytest.approx(lp.token_logprobs[i])
        assert lp.token_logprobs[i] <= max(alts.values()) + 1e-6
        assert sum(math.exp(v) for v in alts.values()) <= 1 + 1e-4
    for i in range(len(prompt), len(text)):  # greedy is restricted to printable ids
        printable = {t: v for t, v in lp.top_logprobs[i].items() if t in PRINTABLE}
        assert max(printable, key=printable.__getitem__) == text[i], i
    assert score().choices[0].logprobs.token_logprobs == lp.token_logprobs


def test_generated_tokens_carry_their_logprobs_over_the_printable_ids(small_server):
    """`logprobs` on a generating request (what the numerics gate teacher-forces through): each
    generated token's log-probability and its top alternatives, the token itself the most likely
    (greedy), normalised over the printable ids the server samples from; the same request twice
    gives the same numbers, and a stop string's tokens are cut with the text."""
    client = small_server.client()

    def ask(**more):
        return client.completions.create(
            model="mla-demo", prompt="The KV cache", max_tokens=12, temperature=0, logprobs=5, **more
        ).choices[0]

    choice = ask()
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text and len(lp.tokens) == 12
    for tok, own, alts in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(alts) == 5 and set(alts) <= PRINTABLE
        assert alts[tok] == max(alts.values()) and alts[tok] == pytest.approx(own)  # greedy (ties: any)
        assert sum(math.exp(v) for v in alts.values()) <= 1 + 1e-4
    assert ask().logprobs.token_logprobs == lp.token_logprobs
    stop = choice.text[5]
    cut = ask(stop=[stop])
    assert "".join(cut.logprobs.tokens) == cut.text == choice.text[: choice.text.index(stop)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": "x", "max_tokens": 0}, "'max_tokens' 0 needs 'echo': true"),
        ({"prompt": "x", "max_tokens": 4, "echo": True, "logprobs": 1}, "drop 'echo'"),
        ({"prompt": "x", "max_tokens": 0, "echo": True, "logprobs": 21}, "between 0 and 20"),
        ({"prompt": "x", "stream": True}, "does not stream"),
        ({"prompt": ""}, "'prompt' must be a non-empty string"),
        ({"prompt": ["x"]}, "'prompt' must be of type str"),
    ],
)
def test_bad_completion_requests_are_one_clear_400(small_server, body, message):
    status, err = small_server.post("/v1/completions", {"model": "mla-demo", **body})
    assert status == 400 and message in err["error"]["message"], err
