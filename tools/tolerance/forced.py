"""`outputs.forced`: the baseline's greedy texts teacher-forced on a server's decode path.

Greedy decoding through OpenAI text completions with `logprobs` (the top-k of every generated
token: vLLM, SGLang and the demo server all give them). Where this side's token leaves the
reference's text, the reference's token is scored from the alternatives of that position, and the
request is sent again from the prompt plus the reference's text up to and including that token, so
every position is scored given the reference's own context (one early difference never cascades).
A side that leaves the text more than `max_restarts` times per prompt is cut there.

The schedule is how the requests are sent: one at a time (`concurrent` 1), N in flight at once (the
engine batches their decode steps), or every request twice keeping the second (a warm prefix cache).
Standard library HTTP, so it also runs on a bare SSH host.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from state.measurement.numerics import ForcedArgs, ForcedScores, ForcedText, ForcedToken
from tools.door import tool
from tools.errors import ServerError
from tools.http import post_json
from tools.progress import report
from tools.tolerance.score import completions


def token_of(
    reference: str | None, chosen: str, top: dict[str, float] | None, own: float | None
) -> ForcedToken:
    """One position scored (pure): the reference's token (this side's own where it is the reference),
    its logprob here and its rank among this side's top-k."""
    top = dict(top or {})
    if own is not None:
        top.setdefault(chosen, own)
    ranked = sorted(top, key=lambda t: -top[t])
    token = chosen if reference is None else reference
    logprob = top.get(token)
    rank = ranked.index(token) + 1 if token in top else 0
    if token == chosen and ranked and top[ranked[0]] <= top[chosen]:
        rank = 1  # this side's own greedy choice (ties listed in another order)
    return ForcedToken(token=token, logprob=logprob, rank=rank, top=top)


def generated(choice: dict[str, Any]) -> list[tuple[str, float | None, dict[str, float] | None]]:
    """A completion's generated tokens with their logprobs and alternatives (pure), or a ServerError
    naming what the answer lacks."""
    lp = choice.get("logprobs")
    if not lp or not all(k in lp for k in ("tokens", "token_logprobs", "top_logprobs")):
        raise ServerError(
            "the server returned no logprobs for generated tokens (needs OpenAI `logprobs` with "
            "`tokens`, `token_logprobs`, `top_logprobs`); the numerics gate cannot score it: set "
            '[correctness] policy = "exact"'
        )
    return list(zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True))


def follow(args: ForcedArgs, prompt: str, reference: list[str] | None) -> ForcedText:
    """Teacher-force one prompt (`reference` None: this side's own greedy text is the reference)."""
    body = {"model": args.model, "temperature": 0, "logprobs": args.top_k}
    if reference is None:
        choice = completions(
            args.base_url, {**body, "prompt": prompt, "max_tokens": args.max_tokens}, args.timeout_s
        )
        tokens = [token_of(None, t, top, own) for t, own, top in generated(choice)]
        return ForcedText(prompt=prompt, continuation="".join(t.token for t in tokens), tokens=tokens)
    scored: list[ForcedToken] = []
    restarts = 0
    while len(scored) < len(reference):
        done = len(scored)
        context = prompt + "".join(reference[:done])
        choice = completions(
            args.base_url, {**body, "prompt": context, "max_tokens": len(reference) - done}, args.timeout_s
        )
        for tok, own, top in generated(choice):
            want = reference[len(scored)]
            scored.append(token_of(want, tok, top, own))
            if tok != want or len(scored) == len(reference):
                break
        else:  # the side stopped early (a stop string, an end token): the rest is sent again
            if len(scored) == done:
                scored.append(ForcedToken(token=reference[done], logprob=None, rank=0))
        if len(scored) < len(reference):
            restarts += 1
            if restarts > args.max_restarts:
                break
    return ForcedText(
        prompt=prompt,
        continuation="".join(reference),
        tokens=scored,
        restarts=min(restarts, args.max_restarts),
        cut=len(scored) < len(reference),
    )


def prefill(args: ForcedArgs, prompt: str, reference: list[str] | None) -> ForcedText:
    """Score one prompt's reference text in one prefill (vLLM's `prompt_logprobs`), by token ids so
    that no retokenizing moves a boundary: the prompt's ids from `/tokenize`, the text's as the server
    generated them (`token_id:N`, generated greedily here where this side is the reference)."""
    status, said = post_json(
        args.base_url.rstrip("/") + "/tokenize", {"model": args.model, "prompt": prompt}, args.timeout_s
    )
    if status != 200:
        raise ServerError(
            f"/tokenize answered HTTP {status}: {said[:200]} (the prefill path needs vLLM's /tokenize)"
        )
    ids = json.loads(said)["tokens"]
    if reference is None:
        body = {"model": args.model, "prompt": ids, "max_tokens": args.max_tokens, "temperature": 0}
        choice = completions(
            args.base_url, {**body, "logprobs": 1, "return_tokens_as_token_ids": True}, args.timeout_s
        )
        reference = [t for t, _, _ in generated(choice)]
    gen = [int(t.removeprefix("token_id:")) for t in reference]
    body = {
        "model": args.model,
        "prompt": ids + gen,
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": args.top_k,
    }
    rows = completions(args.base_url, body, args.timeout_s).get("prompt_logprobs")
    if not isinstance(rows, list) or len(rows) < len(gen) + 1:
        raise ServerError(
            "the server returned no `prompt_logprobs` for the text (vLLM's extension); the numerics "
            'gate cannot score it in a prefill: set [correctness] policy = "exact"'
        )
    tokens = []
    for want, row in zip(gen, rows[-len(gen) :], strict=True):
        row = row or {}
        top = {
            f"token_id:{k}": float(v["logprob"])
            for k, v in row.items()
            if int(v.get("rank", 0)) <= args.top_k
        }
        own = row.get(str(want))
        tokens.append(
            ForcedToken(
                token=f"token_id:{want}",
                logprob=float(own["logprob"]) if own else None,
                rank=int(own.get("rank", 0)) if own else 0,
                top=top,
            )
        )
    return ForcedText(prompt=prompt, continuation="".join(reference), tokens=tokens)


@tool("outputs.forced")
def forced(args: ForcedArgs) -> ForcedScores:
    """The set teacher-forced under the schedule of `args` (module docstring)."""
    t0 = time.perf_counter()
    refs: list[list[str] | None] = (
        [None] * len(args.prompts) if args.continuations is None else list(args.continuations)
    )
    if len(refs) != len(args.prompts):
        raise ServerError(f"{len(refs)} reference texts for {len(args.prompts)} prompts")

    def one(i: int) -> ForcedText:
        report(f"numerics ({args.schedule}): prompt {i + 1}/{len(args.prompts)}")
        way = prefill if args.path == "prefill" else follow
        if args.repeat:
            way(args, args.prompts[i], refs[i])
        return way(args, args.prompts[i], refs[i])

    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
        texts = list(pool.map(one, range(len(args.prompts))))
    return ForcedScores(schedule=args.schedule, texts=texts, duration_s=time.perf_counter() - t0)
