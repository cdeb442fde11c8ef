"""`perfloop eval proposer`: tasks with known answers, each run as a real session, scored (pure).

A task is a target the loop runs with the model as its only proposer (`--proposer llm`, no
playbook loaded, model patches applied unasked, one iteration), so its patch goes through every
gate a session has: the validation chain, the launch, the CI rule and the output gate. The known
answer is what a good patch achieves there (the demo's gather-then-cast fix is >= 3x on the CPU
preset with identical outputs). A task's score comes from the finished session's state alone
(`score`), so a replay of its recording (`perfloop eval proposer --replay DIR`) scores it again
offline, and must score it the same. The command (agent/cli/evaluate.py) runs the sessions,
exports each one, and writes the scores beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.proposer.asking import is_model
from state.base import Model
from state.loop import LoopState


@dataclass(frozen=True)
class Task:
    """A task of the suite: the target to run, and the answer a good patch gives."""

    name: str
    """How the table and the recordings name it."""
    about: str
    """One line: what the model has to find."""
    preset: str
    """The demo server's preset (`cpu`)."""
    min_speedup: float
    """A patch passes when it is kept, outputs pass the gate, and TPOT gets this much faster."""
    server_args: tuple[str, ...] = ()
    """More launch flags of the demo server."""


TASKS = (
    Task(
        name="demo-cast",
        about="the CPU demo casts its whole FP8 KV pool to BF16 every layer and step: gather, then cast",
        preset="cpu",
        min_speedup=3.0,
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
    """Kept, outputs pass the gate, speedup >= the task's `min_speedup`."""
    verdicts: list[str]
    """Each model candidate's verdict in order (`rejected`, `failed`, `accepted`, ...)."""


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
        passed=bool(kept) and identical is True and (speedup or 0.0) >= task.min_speedup,
        verdicts=[d.verdict for d in decisions],
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
        "-"
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
