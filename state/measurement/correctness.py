"""The output gate's configuration (`[correctness]`) and the door's greedy-outputs call: what a
candidate's outputs are compared on, and what the server generated."""

from typing import Literal

from pydantic import Field, model_validator

from state.base import Model
from state.measurement.numerics import TaskItem


class CorrectnessConfig(Model):
    """The output gate's own workload, apart from the timing one (CI-rule sessions).

    Greedy outputs must be identical on: the timing prompts, `random_prompts` prompts of random
    words drawn afresh per session (seeded by the session id, so a patch cannot be tuned to them),
    with lengths up to `max_prompt_chars`, generating `max_tokens` each (long enough to cross the
    sizes where kernels switch paths), sent one at a time and then `concurrent` of them at once."""

    random_prompts: int = Field(2, ge=0)
    """Random prompts added per session."""
    min_prompt_chars: int = Field(40, ge=1)
    """Shortest random prompt, in characters."""
    max_prompt_chars: int = Field(600, ge=1)
    """Longest random prompt, in characters: set it near the target's context limit (the demo's
    byte-level tokenizer makes one token per character; BPE tokenizers about one per 4)."""
    max_tokens: int = Field(40, ge=2)
    """Tokens generated per correctness request."""
    concurrent: int = Field(3, ge=0)
    """Requests sent at once in the concurrent batch (0: none), the first prompts of the set; the
    long prompts join that batch, so requests of every length are in flight together."""
    long_prompts: int = Field(3, ge=0)
    """Prompts at lengths up to the context limit: the range from one token to the limit less
    `max_tokens` cut into this many strata, one length drawn in each per session (seeded by the
    session id), the last exactly at the top, so its decode crosses the limit's last positions.
    Fitted to the server's tokenizer on the baseline (one-token requests), then sent alone and
    together like the rest of the set. 0: none (the set stays within `max_prompt_chars`)."""
    context_tokens: int | None = Field(None, ge=2)
    """The context limit (prompt + generated tokens of one request), where the server states none
    or states it wrongly; unset: learned from the running server (SGLang `/get_model_info`,
    `/get_server_info`, OpenAI `/v1/models` `max_model_len`). A session whose limit is neither
    stated here nor learned says so and waits for a human to approve each candidate."""
    request_timeout_s: float = Field(300.0, gt=0)
    """Per-request timeout."""
    policy: Literal["exact", "numerics", "tolerance"] = "exact"
    """`exact` (the default): greedy outputs identical. `numerics` (the GPU examples and `perfloop demo
    --device cuda` set it): identical, or, where they moved, moved no further than the engine moves
    them itself (the baseline's texts teacher-forced under the schedules the engine varies:
    agent/decision/gate/numerics.py), else refused unless `task` passes. `tolerance` (opt-in, fixed
    thresholds): the reference's greedy
    continuation of each prompt of the set is scored by both arms on the same contexts (teacher
    forcing through `/v1/completions` echo + logprobs); kept only when the candidate's top-1
    agreement reaches `min_top1_agreement` and its largest logprob difference stays within
    `max_logprob_diff`."""
    numerics_prompts: int = Field(6, ge=1)
    """Numerics policy: prompts of the set teacher-forced (the first ones: timing prompts first)."""
    numerics_tokens: int = Field(16, ge=2)
    """Numerics policy: tokens per prompt (the decode steps scored)."""
    precision_reference: bool = True
    """Numerics policy, engines that can compute their model in float32 (the demo: `--dtype
    float32`): the baseline's texts are also scored by the baseline tree launched that way beside it,
    once; how far the engine's own rounding puts the baseline from its math joins its yardstick
    (on a host whose schedules move nothing, the only one that is not the logits' rounding)."""
    task: str | None = None
    """Numerics policy: a JSON Lines file of `{"prompt": ..., "answer": ...}` (path relative to the
    target file); a candidate beyond the engine's numerics is still kept when its accuracy on it is
    no worse than the baseline's (a paired interval on the difference, `task_margin`)."""
    task_items: list[TaskItem] = Field(default_factory=list)
    """The `task` file's questions, read when the target file is loaded (so a recording carries them)."""
    task_max_tokens: int = Field(32, ge=1)
    """Numerics policy: tokens generated per task question."""
    task_margin: float = Field(0.02, ge=0, lt=1)
    """Numerics policy: the accuracy the candidate may lose against the baseline on `task` (the
    interval's lower bound on candidate minus baseline must stay above minus this)."""
    min_top1_agreement: float | None = Field(None, gt=0, le=1)
    """Tolerance policy: smallest fraction of scored positions whose most likely token must be
    the reference's (e.g. 0.95)."""
    max_logprob_diff: float | None = Field(None, ge=0)
    """Tolerance policy: largest |log p_candidate - log p_reference| allowed at any scored
    position, in nats (e.g. 0.1)."""

    @model_validator(mode="after")
    def _thresholds(self) -> "CorrectnessConfig":
        """A tolerance policy states both thresholds; the exact policy takes none."""
        given = [n for n in ("min_top1_agreement", "max_logprob_diff") if getattr(self, n) is not None]
        if self.policy == "tolerance" and len(given) < 2:
            raise ValueError(
                'policy = "tolerance" needs both min_top1_agreement (e.g. 0.95) and '
                "max_logprob_diff (e.g. 0.1) in [correctness]"
            )
        if self.policy != "tolerance" and given:
            raise ValueError(
                f'{" and ".join(given)} apply to policy = "tolerance" only; add it or remove them'
            )
        if self.task is not None and self.policy != "numerics":
            raise ValueError('task applies to policy = "numerics" only; set it or remove task')
        return self


class OutputsArgs(Model):
    """Greedy outputs of a prompt set: one request at a time, then the first `concurrent` at once."""

    base_url: str
    """Server base URL."""
    model: str
    """Model name for requests."""
    prompts: list[str]
    """The correctness set."""
    max_tokens: int
    """Tokens generated per request."""
    concurrent: int = 0
    """How many of the prompts are also sent together."""
    together: list[int] | None = None
    """Which prompts are sent together (their indices, `concurrent` of them); None: the first."""
    timeout_s: float = 300.0
    """Per-request timeout."""
    stagger: bool = False
    """Also send the batch again staggered, each request once the one before it has streamed its
    first token: the same prompts under another schedule (agent/decision/gate/schedule.py)."""


class OutputsResult(Model):
    """The texts the server generated."""

    sequential: list[str]
    """One per prompt, sent one at a time."""
    concurrent: list[str]
    """One per prompt of the concurrent batch (in `OutputsArgs.together`'s order), sent at once."""
    duration_s: float
    """Wall time of the whole check."""
    staggered: list[str] = []
    """With `OutputsArgs.stagger`: the batch again, each request joining the ones before it
    mid-decode (in the batch's order); empty when not asked."""


class OutputNoise(Model):
    """How the baseline's own greedy outputs move with the schedule (A/A on outputs, taken on the
    baseline launch): each prompt's text in the batch, sent at once and staggered, against its text
    alone. A candidate is held to what the baseline does: exact where the baseline never moved,
    else no more texts moved than the baseline's own share (agent/decision/gate/schedule.py)."""

    observations: int
    """Texts taken under a schedule other than alone (the batch at once and staggered)."""
    varied: int
    """Of them, those that differ from their prompt's text alone."""
    first_divergence: int | None = None
    """Earliest character at which one of them left its text alone (None: none did)."""
    agreement: float = 1.0
    """Share of the characters of those texts that equal their text alone, position by position."""
    alone_stable: bool = True
    """Whether the baseline's repeats of a prompt sent alone agree (its timing measurement, when
    sequential): False moves the texts alone under the same rule as the batch's."""
    deterministic_mode: str | None = None
    """The engine's batch-invariant mode the launch carries (e.g. `--enable-deterministic-inference`),
    if any."""
    alpha: float = 0.01
    """The rule's false-reject rate when a candidate's texts move as often as the baseline's
    (one-sided Fisher exact test)."""
    host_observations: int = 0
    """Published per host and engine (`OutputNoiseSample`, this session's included): the batched
    texts every baseline of this engine on this host took, in the same batch-invariant mode; 0
    where none was kept (sessions before it)."""
    host_varied: int = 0
    """Of them, those that left their text alone."""
    host_sessions: int = 0
    """Baselines behind `host_observations`."""

    @property
    def exact(self) -> bool:
        """Whether every text must be equal: the launch carries the engine's batch-invariant mode
        and the baseline's texts never moved with the schedule. A baseline that did not move in a
        dozen batched texts is no proof that it cannot (a rate of a few percent shows in none of
        them): there its share, 0, is what a candidate is held to."""
        return self.deterministic_mode is not None and self.varied == 0 and self.alone_stable

    def line(self) -> str:
        """The plan, in words, and what this host and engine's baselines published (`published`):
        e.g. `outputs vary with the schedule on this host: 1/12 of the baseline's batched texts left
        their text alone (first at character 17, 97.9% agreement); texts alone compared exactly,
        batched texts judged against that share (false rejects <= 1%); this host and engine: 9/60
        batched texts moved over 5 baselines (15%)`."""
        more = self.published()
        return self.plan() + (f"; {more}" if more else "")

    def plan(self) -> str:
        """The plan for this session's candidates, in words."""
        mode = f" ({self.deterministic_mode})" if self.deterministic_mode else ""
        if self.exact:
            return (
                f"outputs do not vary with the schedule here{mode}: the baseline's {self.observations} "
                "batched texts equal its texts alone; every text compared exactly"
            )
        if self.varied == 0:
            return (
                f"the baseline's {self.observations} batched texts equal its texts alone, but no "
                "batch-invariant mode holds them so: texts alone compared exactly, batched texts "
                f"judged against the baseline's share (false rejects <= {self.alpha:.0%})"
            )
        where = f", first at character {self.first_divergence}" if self.first_divergence is not None else ""
        alone = (
            "texts alone compared exactly"
            if self.alone_stable
            else "the baseline's repeats alone differ too, so texts alone are judged the same way"
        )
        return (
            f"outputs vary with the schedule on this host{mode}: {self.varied}/{self.observations} of the "
            f"baseline's batched texts left their text alone{where} ({self.agreement:.1%} agreement); "
            f"{alone}, batched texts judged against the baseline's share (false rejects <= {self.alpha:.0%})"
        )

    def published(self) -> str:
        """This host and engine's output noise over its baselines, e.g. `this host and engine: 9/60
        batched texts moved over 5 baselines (15%)`; empty where none was kept."""
        if not self.host_sessions:
            return ""
        share = self.host_varied / self.host_observations if self.host_observations else 0.0
        mode = f" in {self.deterministic_mode}" if self.deterministic_mode else ""
        many = "baseline" if self.host_sessions == 1 else "baselines"
        return (
            f"this host and engine{mode}: {self.host_varied}/{self.host_observations} batched texts "
            f"moved over {self.host_sessions} {many} ({share:.0%})"
        )


class OutputNoiseSample(Model):
    """One baseline's output noise kept in the session store, published per host and engine."""

    key: str
    """Engine, host and model (agent/decision/stats/noise.py `outputs_key`): pooled per key."""
    session_id: str
    """The session whose baseline took it (one per session: a later take replaces it)."""
    observations: int
    """Its batched texts."""
    varied: int
    """Of them, those that left their text alone."""
    deterministic_mode: str | None = None
    """The batch-invariant mode its launch carried: samples pool only with the same mode."""


class OutputNoiseArgs(Model):
    """Keep one baseline's output noise and read back every one of its host and engine."""

    sample: OutputNoiseSample


class OutputNoiseSamples(Model):
    """Every output noise sample of a host and engine, oldest first."""

    samples: list[OutputNoiseSample]
