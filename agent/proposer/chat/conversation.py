"""The model's conversation inside `propose`: model -> read-only tools -> model -> validated patch.

Every model call and every tool call goes through the door, so the conversation is recorded and a
replay answers it offline (a replayed request that differs stops at the first difference). The
conversation is a pure function of the state and the recorded replies, so when the node re-runs
after a crash it asks the same questions again, and the door answers the model calls the killed
attempt already paid for from their records (`llm.chat` is a `reuse` tool).
Budgets: model calls and model time (as recorded) per proposal, tokens per session, repairs, probes.
When the target declares a probe (`[proposer.probe]`), the model may run it on candidate edits
(`run_probe`, or a `PROBE` message in the text protocol): the edits pass the same validation chain
as an answer, then `code.probe` runs the command on them in a scratch worktree (tools/llm/probe.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.proposer.briefing import evidence, prompt
from agent.proposer.briefing.feedback import already_tried, same_diff
from agent.proposer.chat import probing, toolset
from agent.proposer.chat.protocol import (
    MAX_ADAPTATIONS,
    TEXT_TOOLS,
    Wire,
    adapt,
    strip_reasoning,
    text_requests,
    too_long,
    trim,
)
from agent.proposer.edits.checks import Candidate, Failure, gate_problem, validate
from agent.proposer.edits.launching import as_proposal, is_launch_answer, launch_answer
from state.profiling.diagnosis import Evidence, Finding
from state.profiling.profile import OpStat
from state.proposers.llm_tools import ChatArgs, ChatMessage, ChatReply, CodeArgs, DiffArgs, FilesArgs
from state.proposers.proposer import LlmOrigin, LlmUsage
from state.sessions.loop import LoopState, Proposal
from tools.errors import LlmError
from tools.llm import chat, code

MAX_SOURCES = 3


@dataclass
class Outcome:
    """How a conversation ended: a proposal, or the reason it was dropped; and what it cost."""

    proposal: Proposal | None
    usage: LlmUsage
    reason: str = ""


class Dropped(Exception):
    """The conversation ends without a proposal; str() is the reason."""


class Conversation:
    """One proposal's conversation with the model."""

    def __init__(
        self,
        state: LoopState,
        runtime: Runtime[LoopContext],
        finding: Finding,
        siblings: Sequence[Proposal] = (),
        skipped: Sequence[str] = (),
        port: tuple[str, str, str] | None = None,
    ) -> None:
        self.state, self.runtime, self.finding = state, runtime, finding
        self.skipped, self.port = list(skipped), port
        """Why matching playbooks were not proposed; a stored patch to port (id, why, diff)."""
        self.siblings = list(siblings)
        """Candidates of the same round (tried at the same time on other hosts): shown to the
        model, and a patch equal to one of them is sent back."""
        self.cfg = state.target.proposer
        self.repo = state.target.repo
        self.usage = LlmUsage()
        self.repairs = 0
        self.messages: list[ChatMessage] = []
        self.wire = Wire()
        """How requests are sent (tools or text protocol, ...): adapted to what the server refuses."""
        self.adapted: list[str] = []
        self.budget = self.cfg.context_tokens
        """Estimated prompt tokens a call may take (halved by a context-length refusal)."""
        self.probes = 0
        """Probe runs so far."""

    def run(self) -> Outcome:
        try:
            return Outcome(self._converse(), self.usage)
        except Dropped as exc:
            return Outcome(None, self.usage, str(exc))

    def _converse(self) -> Proposal:
        system = ChatMessage(role="system", content=self._system())
        context = evidence.context(self.state, self._hot_sources(), self.siblings, self.skipped, self.port)
        self.messages = [system, ChatMessage(role="user", content=context)]
        while True:
            reply = self._ask()
            content = strip_reasoning(reply.content)
            said = None if reply.content is None else content  # a tool-only message has no text
            self.messages.append(ChatMessage(role="assistant", content=said, tool_calls=reply.tool_calls))
            asked = [] if reply.tool_calls else text_requests(content)
            if asked:
                results = [
                    f"{name} {'{your edits}' if name == 'run_probe' else json.dumps(a)}:\n"
                    f"{self._run_tool(name, json.dumps(a))}"
                    for name, a in asked
                ]
                self.messages.append(ChatMessage(role="user", content="\n\n".join(results)))
                continue
            if reply.tool_calls:
                for tc in reply.tool_calls:
                    self.messages.append(
                        ChatMessage(
                            role="tool", tool_call_id=tc.id, content=self._run_tool(tc.name, tc.arguments)
                        )
                    )
                continue
            if reply.finish_reason == "length":
                self._repair("length", "your answer was cut off at the token limit; answer more briefly")
                continue
            if self.cfg.launch_options and is_launch_answer(content):
                st, flags = self.state, self.cfg.launch_flags
                old = not st.options.launch_allowlist and self.runtime.context.door.replaying  # live: never
                kind = None if old else st.target.kind
                found = launch_answer(
                    content, st.argv, st.model_trials, self.siblings, kind=kind, extra=flags
                )
                if isinstance(found, str):
                    self._repair("launch", found)
                    continue
                return as_proposal(found, self.state, self.finding, self._origin(found.rationale))
            result = validate(
                content,
                self.texts,
                self.cfg.protected,
                self.git_check,
                extra=[("distinct", self._distinct)],
            )
            if isinstance(result, Failure):
                self._repair(result.stage, result.reason)
                continue
            return self._proposal(result)

    def _ask(self) -> ChatReply:
        """One model call through the door, after the budget checks."""
        cfg, spent = self.cfg, self.state.llm_usage.tokens + self.usage.tokens
        if self.usage.calls >= cfg.max_steps:
            raise Dropped(f"step budget exhausted: {cfg.max_steps} model calls without a valid patch")
        if spent >= cfg.max_tokens:
            raise Dropped(f"token budget exhausted: {spent} of {cfg.max_tokens} tokens spent in this session")
        if self.usage.seconds >= cfg.max_seconds:
            raise Dropped(
                f"time budget exhausted: {self.usage.seconds:.0f} s of model time (max {cfg.max_seconds:.0f})"
            )
        while True:
            w = self.wire
            self.messages, _ = trim(self.messages, self.budget)
            args = ChatArgs(
                base_url=cfg.base_url,
                api_key_env=cfg.api_key_env,
                model=cfg.model or "",
                messages=self.messages,
                tools=self._tools() if w.tools else [],
                max_tokens=cfg.reply_tokens,
                token_param=w.token_param,
                temperature=cfg.temperature if w.temperature else None,
                timeout_s=cfg.timeout_s,
                retries=cfg.retries,
            )
            try:
                reply = call(self.runtime, chat.chat, args)
                break
            except LlmError as exc:
                self._adapt(str(exc))
        self.usage = self.usage.plus(reply)
        return reply

    def _adapt(self, error: str) -> None:
        """Ask again in the way the server takes (see `protocol`): without what it refused, or with
        a conversation trimmed to half the budget when it was too long; else drop the proposal."""
        if too_long(error) and len(self.adapted) < MAX_ADAPTATIONS:
            smaller, trimmed = trim(self.messages, self.budget // 2)
            if trimmed:
                self.messages, self.budget = smaller, self.budget // 2
                self.adapted.append(f"context too long: {trimmed} tool output(s) trimmed")
                return
        found = adapt(error, self.wire) if len(self.adapted) < MAX_ADAPTATIONS else None
        if found is None:
            raise Dropped(error + (f" (after: {'; '.join(self.adapted)})" if self.adapted else ""))
        self.wire, note = found
        self.adapted.append(note)
        if not self.wire.tools and self.messages and self.messages[0].role == "system":
            self.messages[0] = ChatMessage(role="system", content=self._system())

    def _system(self) -> str:
        """The system prompt for the way requests are sent now (tools or the text protocol), with
        the probe's note when the target declares one."""
        text = prompt.SYSTEM + ("" if self.wire.tools else TEXT_TOOLS)
        text += prompt.LAUNCH_NOTE if self.cfg.launch_options else ""
        probe_cfg = self.cfg.probe
        return text if probe_cfg is None else text + prompt.probe_note(probe_cfg, self.wire.tools)

    def _tools(self) -> list[dict]:
        probe_cfg = self.cfg.probe
        return prompt.TOOLS if probe_cfg is None else [*prompt.TOOLS, prompt.probe_tool(probe_cfg)]

    def _repair(self, stage: str, reason: str) -> None:
        """Send a failed answer back with the reason, or drop the proposal after the last round."""
        self.repairs += 1
        if self.repairs > self.cfg.max_repairs:
            first = reason.splitlines()[0] if reason else stage
            raise Dropped(
                f"no valid patch after {self.cfg.max_repairs} repair round(s): {stage} check: {first}"
            )
        left = self.cfg.max_repairs - self.repairs
        self.messages.append(ChatMessage(role="user", content=prompt.repair(stage, reason, left)))

    def _run_tool(self, name: str, arguments: str) -> str:
        """A tool's answer for the model (errors as text the model can act on)."""
        if name == "run_probe":
            return probing.answer(self, arguments)
        return toolset.run(self.runtime, self.repo, name, arguments)

    def texts(self, paths: list[str]) -> dict[str, str | None]:
        return call(self.runtime, code.read_texts, FilesArgs(repo=self.repo, paths=paths)).texts

    def git_check(self, c: Candidate) -> str | None:
        """The patch gate's pure rules (`gate_problem`), then `git apply --check` where the repo lives."""
        if problem := gate_problem(c.diff, self.state.target.max_patch_bytes):
            return problem
        result = call(self.runtime, code.check_diff, DiffArgs(repo=self.repo, diff=c.diff))
        return (
            None if result.ok else f"git apply --check refused the patch built from your edits: {result.text}"
        )

    def _distinct(self, c: Candidate) -> str | None:
        """Why the patch is refused as one already tried in this session or proposed in this
        round (whitespace aside), before anything is launched; None when it is new (or one that
        was accepted but lost to a faster candidate: it may be tried on top of that one)."""
        tried = already_tried(self.state.model_trials, c.diff)
        if tried is not None:
            return (
                f"this patch is the same as your candidate {tried.candidate} of iteration "
                f"{tried.iteration}, already tried ({tried.feedback[0] if tried.feedback else tried.verdict}): "
                "it was not launched again; propose a different change"
            )
        same = next((p for p in self.siblings if same_diff(p.diff, c.diff)), None)
        if same is None:
            return None
        return (
            f"this patch is the same as candidate {same.source}, which another host is already "
            "trying: propose a different change"
        )

    def _hot_sources(self) -> dict[str, str]:
        """Source lines around the hot call sites in the repo (read through the door)."""
        ops: list[Evidence | OpStat] = [
            *self.finding.evidence,
            *need(self.state.diagnosis, "diagnosis").top_ops,
        ]
        sites: dict[str, str] = {}
        for op in ops:
            where = prompt.repo_relative(op.location, self.repo)
            if where is None or where[0] in {s.split(":")[0] for s in sites} or len(sites) >= MAX_SOURCES:
                continue
            path, line = where
            args = CodeArgs(repo=self.repo, path=path, traced_line=line)
            result = call(self.runtime, code.read_file_tool, args)
            if result.ok:
                sites[f"{path}:{line}"] = result.text
        return sites

    def _proposal(self, c: Candidate) -> Proposal:
        f = self.finding
        first = next((line.strip("# ").strip() for line in c.rationale.splitlines() if line.strip()), "")
        return Proposal(
            iteration=self.state.iteration,
            source="llm",
            title=(first[:100] or f"model-written patch for: {f.title}"),
            explanation=c.rationale or "(the model gave no rationale)",
            diff=c.diff,
            files=c.files,
            expected_gain_share=f.expected_gain_share,
            expected_gain_ms=f.expected_gain_ms,
            evidence=f.evidence,
            proposer="llm",
            origin=self._origin(c.rationale),
        )

    def _origin(self, rationale: str = "") -> LlmOrigin:
        return LlmOrigin(
            model=self.cfg.model or "", rationale=rationale, usage=self.usage, repairs=self.repairs
        )
