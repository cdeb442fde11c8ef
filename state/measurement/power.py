"""The power a session has: the smallest speedup it could keep, and the requests and looks chosen
for it (agent/decision/stats/power.py)."""

from state.base import Model
from state.measurement.decision import LaunchNoise


class Power(Model):
    """What the session's evidence can resolve, fixed on the baseline before any candidate."""

    keeps: float
    """The smallest true speedup kept with probability `probability` at the last look."""
    floor: float
    """What `keeps` tends to with unlimited requests: the launch noise alone's limit."""
    repeats: int
    """Requests per prompt per look the session measures candidates with."""
    looks: int
    """Most looks at a candidate."""
    prompts: int
    """Prompts (or, under `[workload]`, 1: the windows are one stratum)."""
    noise: LaunchNoise
    """The launch noise the rule will use."""
    spread_log: float
    """Per-request SD of log TPOT within a prompt, pooled over the baseline's prompts (and the A/A
    pairs measured at the start)."""
    aim: float | None = None
    """`[decide] keep_gain` as a speedup (1.05), when the requests and looks were sized for it."""
    budget: int | None = None
    """`[decide] max_requests_per_prompt`, when sized: most requests per prompt per arm."""
    unit: str = "requests per prompt"
    """What a repeat is: `windows` under `[workload]`."""
    probability: float = 0.8
    """`[decide] keep_power`: how often a gain of `keeps` is kept."""

    def line(self) -> str:
        """`power: keeps gains >= 1.04x (80% of the time) with 3 looks x 5 requests per prompt (...)`."""
        text = (
            f"power: keeps gains >= {self.keeps:.3f}x ({self.probability:.0%} of the time) with {self.looks} look(s) x "
            f"{self.repeats} {self.unit} ({self.noise.describe()}, request spread {self.spread_log:.1%})"
        )
        if self.aim is not None and self.keeps > self.aim:
            limit = (
                "the launch noise alone"
                if self.floor > self.aim
                else f"a budget of {self.budget} {self.unit}"
            )
            text += f"; {limit} cannot resolve {self.aim:.3f}x: it resolves {self.keeps:.3f}x"
        return text
