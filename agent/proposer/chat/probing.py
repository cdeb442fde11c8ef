"""The model's `run_probe` call inside a conversation: the edits pass the validation chain an answer
goes through, then `code.probe` runs the target's probe command on them in a scratch worktree
(tools/llm/probe.py); the model is answered with its output, or why it did not run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from langgraph.runtime import Runtime

from agent.context import LoopContext, call
from agent.proposer.briefing import prompt
from agent.proposer.edits.checks import Candidate, Failure, validate
from state.proposers.llm_tools import ProbeArgs
from state.proposers.proposer import ProposerConfig
from state.sessions.loop import LoopState
from tools.llm import probe
from tools.llm.redact import redact


class Asking(Protocol):
    """What a probe run needs of the conversation asking for it (agent/proposer/chat/conversation.py)."""

    runtime: Runtime[LoopContext]
    state: LoopState
    cfg: ProposerConfig
    repo: Path
    probes: int

    def texts(self, paths: list[str]) -> dict[str, str | None]: ...

    def git_check(self, c: Candidate) -> str | None: ...


def answer(conv: Asking, arguments: str) -> str:
    """The target's probe run on the edits of a `run_probe` call, in a scratch worktree,
    after the validation chain an answer goes through; or why it was not run."""
    cfg = conv.cfg.probe
    if cfg is None:
        return "error: this target declares no probe; answer with your edit blocks"
    try:
        edits = json.loads(arguments or "{}").get("edits")
    except (ValueError, AttributeError):
        edits = None
    if not isinstance(edits, str) or not edits.strip():
        return 'error: run_probe takes {"edits": "<your edit blocks>"}'
    if conv.probes >= cfg.max_runs:
        return f"error: the probe already ran {conv.probes} time(s), its limit per proposal: answer now"
    result = validate(edits, conv.texts, conv.cfg.protected, conv.git_check)
    if isinstance(result, Failure):
        return f"error: the probe did not run: your edits failed the {result.stage} check:\n" + prompt.data(
            "check", redact(result.reason)
        )
    conv.probes += 1
    python = conv.state.options.python
    args = ProbeArgs(
        repo=conv.repo,
        diff=result.diff,
        argv=[a.replace("{python}", python) for a in cfg.argv],
        timeout_s=cfg.timeout_s,
        drop_env=[conv.cfg.api_key_env],
    )
    return prompt.probe_answer(call(conv.runtime, probe.probe, args), cfg.max_runs - conv.probes)
