"""Values of the tolerance output gate: the same texts scored by both arms (teacher forcing)."""

from pydantic import Field

from state.base import Model


class ScoreArgs(Model):
    """Score prompt + continuation texts on a server (OpenAI `/v1/completions` with `echo: true`,
    `logprobs`, `max_tokens: 0`); continuations it does not get are generated first, greedily;
    continuations it gets are also decoded along (`ScoredText.followed`)."""

    base_url: str
    """Server base URL."""
    model: str
    """Model name for requests."""
    prompts: list[str]
    """The correctness set's prompts, sent as raw text (no chat template)."""
    continuations: list[str] | None = None
    """The reference's greedy continuations to score (one per prompt); None: generate them here
    (temperature 0, `max_tokens` each) and score those."""
    max_tokens: int = Field(40, ge=1)
    """Tokens generated per prompt when the continuations are generated here."""
    timeout_s: float = 300.0
    """Per-request timeout."""


class ScoredText(Model):
    """One prompt + continuation as a server scored it: the continuation's positions only."""

    prompt: str
    """The prompt."""
    continuation: str
    """The continuation scored after it."""
    tokens: list[str]
    """The continuation's tokens as the server split them."""
    token_logprobs: list[float]
    """Log-probability of each of those tokens given everything before it."""
    followed: list[bool] | None = None
    """Per character of the continuation: whether this server's greedy decoding, from the prompt and
    the continuation up to that character, produced that character (decoded with restarts after
    each miss: the decode path teacher-forced). None for the arm whose own continuation it is."""


class ScoreResult(Model):
    """A server's scores of the correctness set."""

    texts: list[ScoredText]
    """One per prompt, in order."""
    duration_s: float
    """Wall time of the generation (if any) and the scoring."""


class ToleranceResult(Model):
    """The tolerance gate's answer on one candidate: the candidate's scores against the reference's
    on the same texts, and the thresholds of the target file."""

    top1_agreement: float
    """Fraction of the continuations' positions where the candidate's greedy decoding, from the
    reference's context there, produced the reference's token (characters: tokens on byte-level
    tokenizers such as the demo's)."""
    max_logprob_diff: float
    """Largest |log p_candidate(token) - log p_reference(token)| over the scored positions."""
    positions: int
    """Continuation tokens scored for the logprob difference (over all prompts)."""
    decoded_positions: int = 0
    """Continuation characters decoded along for the agreement (over all prompts)."""
    prompts: int
    """Prompts scored."""
    min_top1_agreement: float
    """The threshold the agreement had to reach."""
    max_logprob_diff_allowed: float
    """The threshold the largest difference had to stay within."""
    worst: str = ""
    """Where the largest difference was, e.g. `prompt 3, token 12 ('a')`."""

    @property
    def passed(self) -> bool:
        """Both thresholds met."""
        return (
            self.top1_agreement >= self.min_top1_agreement
            and self.max_logprob_diff <= self.max_logprob_diff_allowed
        )

    def line(self) -> str:
        """e.g. `tolerance gate: top-1 agreement 93.8% (>= 75.0%) over 48 decoded positions, max
        logprob diff 0.098 at prompt 2, token 4 ('W') (<= 0.250) over 48 scored positions of 3
        prompts -> passed`."""
        ok_a = ">=" if self.top1_agreement >= self.min_top1_agreement else "below"
        ok_d = "<=" if self.max_logprob_diff <= self.max_logprob_diff_allowed else "above"
        where = f" at {self.worst}" if self.worst else ""
        return (
            f"tolerance gate: top-1 agreement {self.top1_agreement:.1%} ({ok_a} "
            f"{self.min_top1_agreement:.1%}) over {self.decoded_positions} decoded positions, max "
            f"logprob diff {self.max_logprob_diff:.3f}{where} ({ok_d} {self.max_logprob_diff_allowed:.3f}) "
            f"over {self.positions} scored positions of {self.prompts} prompts -> "
            f"{'passed' if self.passed else 'failed'}"
        )
