"""Telling the math from the schedule (sessions with `LoopOptions.schedule_gate`).

A greedy output depends on the code and, on GPUs whose kernels split reductions by batch size, on
which requests shared each decode step. A faster candidate changes that schedule: the same exact
fix decodes a batched prompt differently because its steps are shorter. So the correctness set's
texts are judged by how much their schedule is controlled:

- a prompt sent alone has one schedule whatever the tree's speed: its text must equal the
  baseline's exactly (the math). Where the baseline's own repeats alone differ (nothing here is
  controlled), texts alone join the batched texts' rule;
- a batch (sent at once, then staggered: each request once the one before it has streamed its
  first token) is scheduled by the server's speed: on the baseline launch the same batch is taken
  under both schedules and each text is compared with its prompt's text alone (A/A on outputs,
  `OutputNoise`). A candidate is held to the baseline's own share of texts that moved: it fails
  only when more of its batched texts leave their text alone than the baseline's did, by a
  one-sided Fisher exact test at `alpha` (its false-reject rate when the candidate moves as often
  as the baseline), also when the baseline's share was 0 of a dozen (no proof of a rate of 0).
  Only a launch in the engine's batch-invariant mode whose baseline never moved gets the exact
  rule for every text.

Timing measurements whose schedule follows the speed (workload windows, an engine's benchmark)
are not compared text by text (agent/decision/arms/measuring.py `outputs_problem`).
"""

from __future__ import annotations

from math import comb

from state.measurement.correctness import OutputNoise, OutputsResult

ALPHA = 0.01
"""The batched texts' rule's false-reject rate (one-sided Fisher exact test)."""


def divergence(a: str, b: str) -> int | None:
    """The first character at which `b` leaves `a` (None: equal) (pure)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def batched(result: OutputsResult, batch: list[int]) -> list[tuple[int, str]]:
    """Every batched text of `result` with its prompt's index: at once, then staggered (pure)."""
    return [*zip(batch, result.concurrent, strict=False), *zip(batch, result.staggered, strict=False)]


def moved(alone: list[str], texts: list[tuple[int, str]]) -> tuple[int, int | None, float]:
    """How many of `texts` differ from their prompt's text `alone`, the earliest character where
    one does, and the share of characters equal position by position (pure)."""
    firsts = [d for i, t in texts if (d := divergence(alone[i], t)) is not None]
    same = sum(sum(x == y for x, y in zip(alone[i], t, strict=False)) for i, t in texts)
    total = sum(max(len(alone[i]), len(t)) for i, t in texts)
    return len(firsts), min(firsts, default=None), same / total if total else 1.0


def repeats_moved(texts_by_prompt: dict[int, list[str]]) -> tuple[int, int]:
    """A timing measurement's repeats alone: how many were compared with their prompt's first
    text, and how many differ from it (pure)."""
    later = [(ts[0], t) for ts in texts_by_prompt.values() for t in ts[1:]]
    return len(later), sum(a != b for a, b in later)


def noise_of(
    result: OutputsResult,
    batch: list[int],
    repeats: tuple[int, int] = (0, 0),
    mode: str | None = None,
) -> OutputNoise:
    """The baseline's A/A on outputs: its batched texts against its texts alone, and its timing
    repeats alone (`repeats`: compared, differing) when they differ (pure)."""
    texts = batched(result, batch)
    varied, first, agreement = moved(result.sequential, texts)
    alone_stable = repeats[1] == 0
    return OutputNoise(
        observations=len(texts) + (0 if alone_stable else repeats[0]),
        varied=varied + repeats[1],
        first_divergence=first,
        agreement=agreement,
        alone_stable=alone_stable,
        deterministic_mode=mode,
        alpha=ALPHA,
    )


def fisher_greater(k1: int, n1: int, k0: int, n0: int) -> float:
    """One-sided p of Fisher's exact test that group 1's share (k1 of n1) exceeds group 0's (k0
    of n0): the chance, with the k0 + k1 moved texts spread at random over both groups, that group
    1 holds k1 or more (pure)."""
    k, n = k0 + k1, n0 + n1
    if n == 0 or k == 0:
        return 1.0
    total = comb(n, k)
    return sum(comb(n1, x) * comb(n0, k - x) for x in range(k1, min(k, n1) + 1)) / total


def judge(
    noise: OutputNoise,
    reference: OutputsResult,
    candidate: OutputsResult,
    batch: list[int],
    named: list[str],
) -> tuple[str | None, str]:
    """Why the candidate's correctness set fails (or None), and one line saying why it passed or
    failed (pure). `batch` holds the batch's prompt indices in order, `named` each prompt's name."""
    alone = [
        named[i]
        for i, (a, b) in enumerate(zip(reference.sequential, candidate.sequential, strict=True))
        if a != b
    ]
    if alone and noise.alone_stable:
        why = (
            f"outputs changed on the correctness set: {len(alone)}/{len(reference.sequential)} alone "
            f"({', '.join(alone)}), where the schedule is the baseline's: the math changed"
        )
        return why, why
    texts = batched(candidate, batch)
    if noise.exact:
        changed = sorted({named[i] for i, t in texts if t != reference.sequential[i]})
        if changed:
            why = (
                f"outputs changed on the correctness set: {len(changed)} prompt(s) in the batch "
                f"({', '.join(changed)}), where the baseline's batched texts all equal its texts alone"
            )
            return why, why
        return (
            None,
            f"outputs identical alone and in the batch ({len(texts)} batched texts), as the baseline's",
        )
    if not noise.alone_stable:
        texts += list(enumerate(candidate.sequential))
    k1, first, agreement = moved(reference.sequential, texts)
    k0, n0 = noise.varied, noise.observations
    p = fisher_greater(k1, len(texts), k0, n0)
    where = f", first at character {first}" if first is not None else ""
    said = (
        f"{k1}/{len(texts)} texts moved with the schedule{where} ({agreement:.1%} agreement) against the "
        f"baseline's own {k0}/{n0} (Fisher p = {p:.3g}"
    )
    if p < noise.alpha:
        why = f"outputs moved with the schedule more than the baseline's own: {said} < {noise.alpha})"
        return why, why
    head = "outputs identical alone; " if noise.alone_stable else ""
    return None, f"{head}{said} >= {noise.alpha}): within the baseline's schedule noise"
