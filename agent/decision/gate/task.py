"""The task check for a candidate beyond the engine's numerics (`[correctness] task = "FILE.jsonl"`),
as upstream accepts a kernel that moves the math (SGLang's FP8-native MLA: decode time plus GSM8K):
the questions answered greedily by the baseline and by the candidate, each answer right when the
expected one appears in it, and the paired difference of the accuracies judged with an interval.

A task means something only where the baseline answers enough of it: a model with random weights
(the demo's, a `--load-format dummy` server) answers none, and then the check says it cannot tell
and the candidate stays refused.
"""

from __future__ import annotations

import math

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from state.measurement.correctness import OutputsArgs
from state.measurement.numerics import TaskItem
from state.sessions.loop import LoopState
from tools import bench

Z95 = 1.959964
"""The two-sided 95% normal quantile of the paired interval."""
MEANINGFUL = 0.1
"""The baseline must answer at least this share (and 5 questions) for the task to tell anything."""


def right(answer: str, text: str) -> bool:
    """Whether the expected `answer` appears in the generated `text` (pure; case and spaces ignored)."""
    return " ".join(answer.lower().split()) in " ".join(text.lower().split())


def answers(state: LoopState, runtime: Runtime[LoopContext]) -> list[str]:
    """The running server's greedy answers to the task's questions, one at a time."""
    cfg = state.target.correctness
    args = OutputsArgs(
        base_url=need(state.server, "running server").base_url,
        model=state.target.model,
        prompts=[q.prompt for q in cfg.task_items],
        max_tokens=cfg.task_max_tokens,
        timeout_s=cfg.request_timeout_s,
    )
    return call(runtime, bench.outputs, args).sequential


def judge(
    items: list[TaskItem], baseline: list[str], candidate: list[str], margin: float
) -> tuple[bool, str]:
    """(no loss of accuracy, the line) (pure): the candidate's accuracy minus the baseline's, with a
    95% interval on the paired difference; kept when its lower end is above `-margin`, and only where
    the baseline answers enough of the task for it to mean anything."""
    n = len(items)
    a = [right(q.answer, t) for q, t in zip(items, baseline, strict=True)]
    b = [right(q.answer, t) for q, t in zip(items, candidate, strict=True)]
    base, cand = sum(a), sum(b)
    if base < max(5, MEANINGFUL * n):
        return False, (
            f"task: the baseline answers {base}/{n} right, too few for the task to tell anything "
            "(random weights, or a task this model cannot do): the candidate stays refused"
        )
    lost = sum(x and not y for x, y in zip(a, b, strict=True))
    gained = sum(y and not x for x, y in zip(a, b, strict=True))
    diff = (gained - lost) / n
    var = max((gained + lost) - (gained - lost) ** 2 / n, 0.0) / n**2
    low, high = diff - Z95 * math.sqrt(var), diff + Z95 * math.sqrt(var)
    ok = low > -margin
    return ok, (
        f"task: {cand}/{n} right vs the baseline's {base}/{n}, difference {diff:+.3f} [{low:+.3f}, "
        f"{high:+.3f}] 95% CI ({'within' if ok else 'beyond'} the margin -{margin:g})"
    )
