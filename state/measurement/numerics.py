"""Values of the numerics gate: the baseline's greedy texts teacher-forced on a server (the same
tokens as context on every side, so one early difference does not cascade), the engine's own
numerical noise under the schedules it varies, and the verdict on a candidate that moved the math."""

import json
from typing import Literal

from pydantic import Field

from state.base import Model

Verdict = Literal["exact", "within", "beyond"]
"""`exact`: the candidate's greedy texts equal the baseline's where the schedule is controlled;
`within`: it moves the baseline's tokens no further than the engine moves them itself (the stated
test of agent/decision/gate/moves.py); `beyond`: further (refused, unless a task check passes)."""


PRECISE = "float32 precision reference"
"""The name of the side scored by the baseline's tree computed in float32."""


class TaskItem(Model):
    """One question of a `[correctness] task` file (JSON Lines)."""

    prompt: str = Field(min_length=1)
    """Sent as a raw text completion, greedy."""
    answer: str = Field(min_length=1)
    """Counted right when it appears in the generated text (case and surrounding space ignored)."""


def read_task(text: str) -> list[TaskItem]:
    """A task file's questions (pure): one JSON object a line with `prompt` and `answer` strings
    (blank lines skipped); ValueError naming the first bad line and what it lacks."""
    items = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"line {n} is not JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(obj, dict) or not all(
            isinstance(obj.get(k), str) and obj[k] for k in ("prompt", "answer")
        ):
            raise ValueError(
                f'line {n} needs "prompt" and "answer" strings, e.g. {{"prompt": "2+2=", "answer": "4"}}'
            )
        items.append(TaskItem(prompt=obj["prompt"], answer=obj["answer"]))
    if not items:
        raise ValueError("it holds no questions")
    return items


class ForcedToken(Model):
    """One position of a reference text, as one side scored it given the reference's context."""

    token: str
    """The reference's token at this position."""
    logprob: float | None
    """This side's log-probability of that token; None where the token is not among its top-k."""
    rank: int = Field(ge=0)
    """1: this side's most likely token is the reference's; 0: not among its top-k."""
    top: dict[str, float] = {}
    """This side's top-k alternatives at this position (token -> log-probability)."""


class ForcedText(Model):
    """One prompt's reference continuation, teacher-forced on one side."""

    prompt: str
    """The prompt."""
    continuation: str
    """The reference's greedy continuation scored after it."""
    tokens: list[ForcedToken]
    """Its positions, in order (the decode path: a generated token's logprobs)."""
    restarts: int = Field(0, ge=0)
    """Requests sent again from the prompt plus the reference's text so far, after this side's
    greedy decoding left the reference's text (0 for the reference itself)."""
    cut: bool = False
    """The restart limit was reached before the end of the text: the positions after it were not
    scored (a side that leaves the text that often is beyond the engine's numerics anyway)."""


class ForcedScores(Model):
    """The correctness set teacher-forced on one side under one schedule."""

    schedule: str
    """How the requests were sent: `alone` (one at a time, the reference), `batch of N` (N in
    flight at once), `warm prefix cache` (the same requests again), `candidate`."""
    texts: list[ForcedText]
    """One per prompt, in the set's order."""
    duration_s: float = Field(0.0, ge=0)
    """Wall time of the requests."""


class ForcedArgs(Model):
    """Teacher-force texts on a server through OpenAI text completions with `logprobs`: greedy
    decoding with the top-k of every generated token; where the server's token leaves the reference's
    text, the request is sent again from the prompt plus the reference's text up to and including that
    token (`continuations` None: the server's own greedy texts are the reference)."""

    base_url: str
    """Server base URL."""
    model: str
    """Model name for requests."""
    prompts: list[str]
    """The correctness set's prompts (raw text)."""
    continuations: list[list[str]] | None = None
    """The reference's continuations to follow, as its tokens (per prompt); None: generate them here
    (this side is the reference)."""
    max_tokens: int = Field(40, ge=1)
    """Tokens generated per prompt when the continuations are generated here."""
    top_k: int = Field(5, ge=1, le=20)
    """Alternatives asked for per position."""
    concurrent: int = Field(1, ge=1)
    """Requests in flight at once (1: alone; N: the schedule `batch of N`)."""
    repeat: bool = False
    """Send every request twice and keep the second (a warm prefix cache where the engine has one)."""
    max_restarts: int = Field(8, ge=0)
    """Most requests sent again per prompt after the server left the reference's text."""
    timeout_s: float = Field(300.0, gt=0)
    """Per-request timeout."""
    schedule: str = "alone"
    """The schedule's name, kept in the result."""
    path: Literal["decode", "prefill"] = "decode"
    """`decode`: greedy decoding with restarts (every engine's OpenAI `logprobs`); `prefill`: the text
    scored in one request through vLLM's `prompt_logprobs` (the engine's prefill kernels)."""


class NumericsNoise(Model):
    """The engine's own noise at the baseline: the reference and the same texts under other schedules."""

    reference: ForcedScores
    """The baseline's greedy texts, alone, with their own scores."""
    schedules: list[ForcedScores]
    """The same texts teacher-forced under the schedules the engine varies."""
    key: str = ""
    """Host, engine and target it was measured for (as the output noise's key); empty: not kept."""
    session_id: str = ""
    """The session that measured it."""
    host_sessions: int = Field(0, ge=0)
    """Sessions whose baseline's numerics the store keeps for this host, engine and model (this one
    included): published beside the output noise, for later sessions to read."""
    host_max_dlogprob: float = 0.0
    """The largest move any of them measured under the engine's own schedules."""
    task_texts: list[str] | None = None
    """The baseline's greedy answers to the target's `task` questions (None: no task)."""


class NumericsSample(Model):
    """One baseline's numerics as the store keeps them, per host, engine and model."""

    key: str
    """Host, engine and model (`outputs:KIND@HOST#DIGEST`)."""
    session_id: str
    """The session that measured it."""
    moves: dict[str, float]
    """Per schedule: its largest move of the reference's tokens (|dlogprob|)."""
    positions: int = Field(0, ge=0)
    """Positions scored per schedule."""


class NumericsArgs(Model):
    """Keep one baseline's numerics in the session store (`outputs.numerics_record`)."""

    sample: NumericsSample
    """What to keep."""


class NumericsSamples(Model):
    """Every baseline's numerics kept for a host, engine and model, oldest first."""

    samples: list[NumericsSample]
    """The samples."""


class NumericsVerdict(Model):
    """The numerics gate's answer on one candidate, with its figures."""

    verdict: Verdict
    """exact, within the engine's numerics, or beyond."""
    max_dlogprob: float = 0.0
    """Largest |log p_candidate - log p_baseline| of the baseline's token over the scored positions."""
    engine_max_dlogprob: float = 0.0
    """The same, largest over the engine's own schedules."""
    engine_schedule: str = ""
    """The schedule that moved the tokens furthest, e.g. `batch of 4`."""
    flips: int = Field(0, ge=0)
    """Positions where the candidate's most likely token is not the baseline's."""
    engine_flips: int = Field(0, ge=0)
    """The same, most over the engine's schedules."""
    max_kl: float = 0.0
    """Largest KL(baseline || candidate) over the positions, on the baseline's top-k (tail lumped)."""
    positions: int = Field(0, ge=0)
    """Positions scored on the candidate."""
    mean_dlogprob: float = 0.0
    """The candidate's typical move: mean |dlogprob| a position, over every scored position."""
    engine_mean_dlogprob: float = 0.0
    """The same for the engine's own side that moved the tokens furthest on average."""
    ratio: float = 0.0
    """Geometric mean over the prompts of the test's ratio: (the candidate's distance from the float32
    math / the baseline's) where `yardstick` is `precise`, else (the candidate's mean move / the
    engine's own on that prompt)."""
    ratio_low: float = 0.0
    """Its one-sided lower confidence bound at 1 - the stated false-reject rate (Student's t)."""
    yardstick: Literal["engine", "precise"] = "engine"
    """What the ratio divides by: `precise`, the baseline's own distance from the model's float32
    math (the precision reference), per prompt; `engine`, the engine's furthest own move there."""
    precise_dlogprob: float = 0.0
    """`precise`: the candidate's mean distance a token from the float32 math (|dlogprob| of the
    baseline's tokens against the precision reference)."""
    baseline_precise_dlogprob: float = 0.0
    """`precise`: the baseline's own mean distance a token from the float32 math."""
    prompts_beyond: int = Field(0, ge=0)
    """Prompts whose mean move exceeds the margin times the engine's own on that prompt."""
    gross: int = Field(0, ge=0)
    """Prompts moved beyond the gross margin times the engine's largest move anywhere (each refuses)."""
    prompts: int = Field(0, ge=0)
    """Prompts compared."""
    needed: int = Field(0, ge=0)
    """Before 2026-12-06 (third session): prompts beyond needed to refuse (the count test); 0 since."""
    false_reject: float = 0.0
    """The test's false-reject rate for a candidate whose typical move is the margin times the engine's."""
    margin: float = 1.0
    """The margin (times the engine's own mean move per prompt)."""
    declared_exact: bool = False
    """The change declared itself exact: only `exact` passes."""
    note: str = ""
    """Why, in a few words (e.g. too few prompts for the test)."""
    task: str = ""
    """A candidate beyond: the task check's line (accuracies, the paired interval), or why it cannot tell."""
    task_passed: bool | None = None
    """Whether the task check found no loss of accuracy (None: not run)."""

    @property
    def passed(self) -> bool:
        """Whether the output gate lets the candidate through on its numerics (or its task check)."""
        if self.verdict == "exact":
            return True
        return not self.declared_exact and (self.verdict == "within" or bool(self.task_passed))
