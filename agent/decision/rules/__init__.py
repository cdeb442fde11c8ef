"""The rules and the one a session was started with, by its recorded name
(`LoopOptions.decision_rule`): `ci` (`ci-v1`: a sequential CI over the arms the session measures,
every new session) and `legacy` (`iqr-v0`: the only module that names it, for sessions recorded
before `ci-v1`).

May import: every other room of `agent.decision` (`calibration`, `arms`, `gate`, `stats`) and
`judging`; imported by `agent.steps` only.
"""

from __future__ import annotations

from agent.decision.judging import Rule
from agent.decision.rules.ci import CiRule
from agent.decision.rules.legacy import IqrRule

RULES: dict[str, Rule] = {rule.name: rule for rule in (CiRule(), IqrRule())}
"""Every rule, by name."""


def rule_for(name: str) -> Rule:
    """The rule named `name` (one of `LoopOptions.decision_rule`'s values)."""
    return RULES[name]
