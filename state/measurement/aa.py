"""A/A evidence: launches of the same tree kept in the session store, pooled per target and host, and
the store tool's arguments and results."""

from state.base import Model


class AASample(Model):
    """One A/A launch: a baseline launch of a target on a host, kept in the session store."""

    target_key: str
    """Target and host identity (name, host, launch command): samples are pooled per key."""
    group: str
    """Tree content and workload: only launches of the same group are compared with each other."""
    session_id: str
    """Session that launched it."""
    launch_number: int
    """Its launch number in that session."""
    location_log: float
    """Mean over prompts of the median log TPOT (ms) of the launch."""
    requests: int
    """Requests behind the location."""
    shift_log: float | None = None
    """Interleaved A/A pair: the combined log-TPOT shift between two launches of the same tree
    measured together (requests alternating); None for a single launch."""
    beside: int | None = None
    """Interleaved A/A pair: the launch number of the pair's other side (`launch_number` is the one
    launched for the pair); pairs of one session beside the same launch are correlated. None in
    pairs recorded before it (their sides were never shared)."""


class AARecordArgs(Model):
    """Keep one A/A launch in the session store and read back its target's launches."""

    target_key: str
    """Target and host (see agent/decision/stats/noise.py `target_key`)."""
    sample: AASample | None = None
    """The launch to keep; `None` only reads."""
    more: list[AASample] = []
    """More launches to keep in the same call (alternating arms' replicate launches)."""


class AASamples(Model):
    """A/A launches of one target on one host."""

    samples: list[AASample]
    """Oldest first."""
