"""The decision rule a session was started with, by its recorded name (`LoopOptions.decision_rule`)."""

from __future__ import annotations

from agent.decision.ci import CiRule
from agent.decision.judging import Rule
from agent.decision.legacy import IqrRule

RULES: dict[str, Rule] = {rule.name: rule for rule in (CiRule(), IqrRule())}
"""Every rule, by name."""


def rule_for(name: str) -> Rule:
    """The rule named `name` (one of `LoopOptions.decision_rule`'s values)."""
    return RULES[name]
