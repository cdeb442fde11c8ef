"""`perfloop eval proposer`: tasks with known answers, each run as a real session, scored (pure).

A task is a target the loop runs with the model as its only proposer (`--proposer llm`, no
playbook loaded, model patches applied unasked, one iteration), so its patch goes through every
gate a session has: the validation chain, the launch, the CI rule and the output gate. The known
answer is what a good patch achieves there (the demo's gather-then-cast fix is >= 3x on the CPU
preset with identical outputs). A task's score comes from the finished session's state alone
(`score`), so a replay of its recording (`perfloop eval proposer --replay DIR`) scores it again
offline, and must score it the same. The command (agent/cli/commands/evaluate.py) runs the sessions,
exports each one, and writes the scores beside them. `sglang-port` is the exception: a port to a
real SGLang release, whose server needs a GPU, is the model's part of a session only
(agent/proposer/harness/porting.py), scored by the equivalence harness and not timed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.proposer.chat.asking import is_model
from state.base import Model
from state.sessions.loop import LoopState


@dataclass(frozen=True)
class Task:
    """A task of the suite: the target to run, and the answer a good patch gives."""

    name: str
    """How the table and the recordings name it."""
    about: str
    """One line: what the model has to find."""
    preset: str = "cpu"
    """The demo server's preset."""
    min_speedup: float = 0.0
    """A patch passes when it is kept, outputs pass the gate, and TPOT gets this much faster (a
    timed task's)."""
    server_args: tuple[str, ...] = ()
    """More launch flags of the demo server."""
    answer: Literal["patch", "launch"] = "patch"
    """What kind of fix passes: a code patch, or launch options (`LAUNCH:` lines, no diff)."""
    launch_options: bool = False
    """The target's `[proposer] launch_options`: whether the model may answer with launch options."""
    protected: tuple[str, ...] = ()
    """More patterns of files the model may not edit (`*`: the code is off limits)."""
    mode: Literal["llm", "auto"] = "llm"
    """`llm`: the model is the only proposer (no playbook loaded); `auto`: the built-in playbooks
    first, then the model (told of a stored patch that did not fit, to port it)."""
    source_edits: tuple[tuple[str, str, str], ...] = ()
    """(file, old, new) edits made to a copy of the demo's source before the session: another
    release of it (each `old` must occur once)."""
    release: str | None = None
    """An SGLang release: the task is a port to that release's real source (agent/proposer/harness/porting.py),
    not a demo session; scored by the equivalence harness, its speed not measured (no GPU)."""


DECODE_NOW = """\
        k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for i, kv_indices in enumerate(batch.kv_indices):
            out[i] = self._attend(q[i : i + 1], k_buffer[kv_indices], causal=False)[0]
"""
DECODE_NEXT = """\
        cache = self.kv_pool.get_key_buffer(layer_id).to(dtype=q.dtype)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for row, slots in enumerate(batch.kv_indices):
            out[row] = self._attend(q[row : row + 1], cache[slots], causal=False)[0]
"""
"""The demo's eager decode as "a later release" writes it: the same computation (the same full-pool
cast), other names, so the stored kv-cast patch no longer applies."""

TASKS = (
    Task(
        name="demo-cast",
        about="the CPU demo casts its whole FP8 KV pool to BF16 every layer and step: gather, then cast",
        preset="cpu",
        min_speedup=3.0,
    ),
    Task(
        name="demo-launch",
        about="the same CPU demo with its code off limits: the fix is a launch option, a KV pool "
        "sized to the workload (--max-total-tokens)",
        preset="cpu",
        min_speedup=2.0,
        answer="launch",
        launch_options=True,
        protected=("*",),
    ),
    Task(
        name="demo-port",
        about="a later release of the CPU demo that the stored kv-cast patch does not fit: the "
        "playbook's patch fails to apply, and the model ports it",
        preset="cpu",
        min_speedup=3.0,
        mode="auto",
        source_edits=(("mla_server/attention/mla_backend.py", DECODE_NOW, DECODE_NEXT),),
    ),
    Task(
        name="sglang-port",
        about="sglang 0.5.9's real FlashInfer MLA backend (from its wheel) and the stored kv-cast "
        "patch for 0.5.22 on, which does not fit it: the model ports it; scored by the equivalence "
        "harness (CPU decode bit-identical, only the batch's KV rows read), speed not measured (no GPU)",
        release="0.5.9",
    ),
)
"""The suite, in the order it runs."""


def task_named(names: list[str]) -> list[Task]:
    """The tasks of `names` (all when empty), in the suite's order; ValueError naming the known
    ones for a name it does not hold (pure)."""
    known = {t.name: t for t in TASKS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no eval task {unknown[0]!r}; the tasks are {', '.join(known)}")
    return [t for t in TASKS if not names or t.name in names]


NOT_MEASURED = "not measured (no GPU)"
"""The speedup of a task that is not timed (an SGLang port: its server needs a GPU)."""


class Score(Model):
    """How one model did on one task (a row of the table)."""

    task: str
    """The task's name."""
    model: str
    """The model asked."""
    session: str
    """The session that ran it (its recording replays it)."""
    applied: bool
    """A model patch passed the checks and was launched and measured."""
    outputs_identical: bool | None
    """The kept patch's outputs against the baseline's, else the last measured one's; None when
    nothing was measured."""
    speedup: float | None
    """The decisive candidate's TPOT speedup by the CI rule (reference arm / candidate arm, measured
    side by side): the kept patch's, else the last measured one's; None when nothing was measured
    (or the session used the IQR rule)."""
    speedup_ci: list[float] | None = None
    """[low, high] of that speedup's CI."""
    rounds: int
    """Model conversations (rounds) in the session, dropped ones included."""
    calls: int
    """Model calls."""
    tokens: int
    """Prompt plus completion tokens."""
    cost_usd: float | None
    """Tokens priced with `--price-in`/`--price-out` (US$ per million); None without prices."""
    passed: bool
    """Kept, outputs pass the gate, speedup >= the task's `min_speedup` (for a timed task), and the
    kept fix is of the task's kind (a code patch, or launch options)."""
    verdicts: list[str]
    """Each model candidate's verdict in order (`rejected`, `failed`, `accepted`, ...)."""
    speedup_note: str | None = None
    """Why there is no speedup, for a task that is not timed (`not measured (no GPU)`)."""


def score(task: Task, model: str, state: LoopState, prices: tuple[float, float] | None) -> Score:
    """The row for a finished session of `task` (pure)."""
    decisions = [d for d in state.decisions if is_model(d.source)]
    measured = [d for d in decisions if d.verdict != "failed"]
    kept = [d for d in decisions if d.verdict == "accepted"]
    last = (kept or measured)[-1] if kept or measured else None
    usage = state.llm_usage
    cost = None
    if prices is not None:
        cost = (usage.prompt_tokens * prices[0] + usage.completion_tokens * prices[1]) / 1e6
    identical = None if last is None else last.outputs_identical
    judged = None if last is None or last.judgement is None else last.judgement.last
    speedup = None if judged is None else judged.speedup
    untimed = task.release is not None
    return Score(
        task=task.name,
        model=model,
        session=state.session_id,
        applied=bool(measured),
        outputs_identical=identical,
        speedup=None if speedup is None else round(speedup, 2),
        speedup_ci=None if judged is None else [round(judged.ci_low, 2), round(judged.ci_high, 2)],
        rounds=len(decisions),
        calls=usage.calls,
        tokens=usage.tokens,
        cost_usd=None if cost is None else round(cost, 4),
        passed=bool(kept)
        and identical is True
        and (untimed or (speedup or 0.0) >= task.min_speedup)
        and (kept[-1].launch_argv is not None) == (task.answer == "launch"),
        verdicts=[d.verdict for d in decisions],
        speedup_note=NOT_MEASURED if untimed else None,
    )


HEADER = (
    "task",
    "model",
    "applied",
    "outputs identical",
    "speedup [CI]",
    "rounds",
    "calls",
    "tokens",
    "cost",
    "passed",
)


def row(s: Score) -> tuple[str, ...]:
    """A score as the table's cells (pure)."""

    def yes(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    return (
        s.task,
        s.model,
        yes(s.applied),
        yes(s.outputs_identical),
        (s.speedup_note or "-")
        if s.speedup is None
        else f"{s.speedup:.2f}x"
        + (f" [{s.speedup_ci[0]:.2f}, {s.speedup_ci[1]:.2f}]" if s.speedup_ci else ""),
        str(s.rounds),
        str(s.calls),
        str(s.tokens),
        "-" if s.cost_usd is None else f"${s.cost_usd:.4f}",
        yes(s.passed),
    )


def markdown(scores: list[Score]) -> str:
    """The table as Markdown (pure)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row(s)) + " |" for s in scores]
    return "\n".join(lines)
