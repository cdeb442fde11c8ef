"""A hostile model's read-only tool calls, through a real openai client against the scripted
server: a NUL byte in a path, a symlink into `.git` (file and folder), a grep of `.git`'s contents
and a catastrophic regular expression are each answered to the model as an error (the regex within
about its time limit) and the conversation goes on to the model's next answer; replaying the
recording (what `resume` does) answers the same calls again without a crash."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from agent.context import need
from agent.proposer.chat.conversation import Conversation, Outcome
from state.sessions.loop import LoopState
from tests.llm.conftest import fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, Step, call, last_tool_text, reply
from tools.door import Door
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDoor
from tools.llm import code
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.timeout(120)
CALLS = [
    ("read_file", {"path": "mla_server/\x00config.py"}),
    ("read_file", {"path": "git-config"}),
    ("list_dir", {"path": "git-dir"}),
    ("read_file", {"path": "git-dir/config"}),
    ("grep", {"pattern": "repositoryformatversion", "path": "."}),
    ("grep", {"pattern": "(a+)+$", "path": "long.txt"}),
]


def converse(state: LoopState, door: Door) -> Outcome:
    finding = need(state.diagnosis, "diagnosis").findings[0]
    return Conversation(state, cast(Any, runtime(door)), finding).run()


def script(seen: list[tuple[str, float]]) -> list[Step]:
    """Each tool call in turn, the answer to the previous one kept (with when it came), then the fix."""
    steps: list[Step] = [reply(None, call(CALLS[0][0], **CALLS[0][1]))]

    def then(nxt: dict[str, Any]) -> Step:
        def step(body: dict) -> dict:
            seen.append((last_tool_text(body), time.monotonic()))
            return nxt

        return step

    steps += [then(reply(None, call(name, **args))) for name, args in CALLS[1:]]
    return [*steps, then(reply(fix_answer()))]


def test_bad_tool_calls_are_answered_and_the_session_goes_on(
    tmp_path: Path, engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code, "GREP_SECONDS", 1.0)
    (engine / "git-config").symlink_to(".git/config")
    (engine / "git-dir").symlink_to(".git")
    (engine / "long.txt").write_text("a" * 5000 + "!\n")
    store, seen = SessionStore(tmp_path / "sessions.sqlite"), list[tuple[str, float]]()
    with ScriptedModel(script(seen)) as model:
        state = loop_state(tmp_path, engine, model.base_url)
        live = converse(state, LiveDoor("s-bad", store))
    assert live.proposal is not None, live.reason  # the model's next answer was taken
    answers = [text for text, _ in seen]
    assert len(answers) == len(CALLS), answers
    nul, cfg, listing, through, grep_git, slow = answers
    assert nul.startswith("error: refused:") and "control character" in nul, nul
    assert cfg.startswith("error: refused:") and ".git" in cfg, cfg
    assert listing.startswith("error: refused:") and through.startswith("error: refused:"), (listing, through)
    assert "[core]" not in " ".join(answers) and "bare =" not in " ".join(answers)
    assert "no match" in grep_git, grep_git
    assert "stopped after 1 s" in slow, slow
    assert seen[-1][1] - seen[-2][1] < 60  # the catastrophic pattern was stopped, not waited for
    calls = store.tool_calls("s-bad")
    door = ReplayDoor("s-bad", calls)  # what `resume` does with the recording: no crash, same answer
    replayed = converse(state, door)
    assert replayed.proposal is not None and replayed.proposal.diff == live.proposal.diff
    assert door.unplayed() == [] and door.position == len(calls)
