"""What `perfloop eval proposer` (agent/cli/commands/evaluate.py) runs: each task as a session on
the embedded demo (or a port task on a real SGLang release), the scores table, `--record`'s and
`--replay`'s folder of recordings and `scores.json`. It imports the loop: the command imports this
module inside its body, never at start-up."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from agent.cli.commands.flags import options as _options
from agent.cli.output import Tabular, table
from agent.cli.preflight import check_setup
from agent.cli.target import DEMO_CONFIG, DEMO_SOURCE, PROJECT_ROOT, load_target, with_proposer
from agent.proposer.harness import porting
from agent.proposer.harness.evaluation import HEADER, TASKS, Score, Task, row, score, task_named
from agent.sessions.archive import import_session
from agent.sessions.runner import Sessions, new_session_id
from playbooks.launch import with_flag
from state.config.options import LoopOptions
from state.sessions.loop import LoopState
from tools.errors import ConfigError, ToolError, first_line
from tools.sglang import wheels

SCORES = "scores.json"
SGLANG_EXAMPLE = PROJECT_ROOT / "examples" / "targets" / "sglang-glm5.toml"
"""The SGLang target a port task runs as (its launch command is what the model is shown)."""


def task_session(sessions: Sessions, task: Task, model: str, base_url: str | None) -> str:
    """Run `task` as a session on the demo with `model` as its only proposer; its id."""
    sid = new_session_id()
    demo = load_target(DEMO_CONFIG)
    target = with_proposer(
        demo,
        mode=task.mode,
        model=model,
        base_url=base_url,
        approve="auto",
        launch_options=task.launch_options or None,
        protected=[*demo.proposer.protected, *task.protected] if task.protected else None,
    )
    argv = with_flag(with_flag(target.launch.argv, "--device", "cpu"), "--preset", task.preset)
    target = target.model_copy(
        update={
            "name": f"eval {task.name}",
            "repo": sessions.home / "workspaces" / sid / "mla_server",
            "launch": target.launch.model_copy(update={"argv": [*argv, *task.server_args]}),
        }
    )
    opts = _options("auto", target.profile.method, 1, [], task.mode == "llm")
    check_setup(target, opts, repo_exists=False)
    source = release_copy(sessions.home / "eval-sources" / sid, task) if task.source_edits else DEMO_SOURCE
    sessions.start(target, {**opts, "demo_source": source}, sid, None)
    return sid


def port_session(sessions: Sessions, task: Task, model: str, base_url: str | None) -> LoopState:
    """Run a port task (agent/proposer/harness/porting.py) on the release's source, unpacked from its wheel
    (downloaded once, as tests/sglang does); its finished state."""
    sid, release = new_session_id(), task.release or ""
    where = sessions.home / "eval-sources" / sid
    try:
        wheels.unpack(release, where).close()
    except ToolError as exc:
        raise ConfigError(f"task {task.name}: {first_line(exc)}") from None
    example = load_target(SGLANG_EXAMPLE, repo=str(where / "repo"), name=f"eval {task.name}")
    target = with_proposer(example, mode="llm", model=model, base_url=base_url, approve="auto")
    opts = LoopOptions(session_dir=sessions.session_dir(sid), python=sys.executable, decision_rule="ci-v1")
    return porting.recorded(sessions.store, porting.initial(sid, target, release, opts), target.repo)


def release_copy(folder: Path, task: Task) -> Path:
    """A copy of the demo's source with the task's edits made (another release of it)."""
    dest = folder / DEMO_SOURCE.name
    shutil.copytree(DEMO_SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in task.source_edits:
        text = (dest / rel).read_text()
        if text.count(old) != 1:
            raise ConfigError(
                f"task {task.name}: {rel} of the demo no longer holds the text its edit replaces"
            )
        (dest / rel).write_text(text.replace(old, new))
    return dest


def ended(sessions: Sessions, sid: str, task: Task) -> None:
    """ConfigError unless the session ran to its end (a summary recorded)."""
    info = sessions.info(sid)
    if info.summary is None:
        raise ConfigError(
            f"task {task.name}: session {sid} ended {info.status} without a summary; see `perfloop show {sid}`"
        )


def scores_table(scores: list[Score]) -> Tabular:
    """The scores, task and model never cut (a task name is what --task takes)."""
    return table(*HEADER, rows=[row(s) for s in scores], keep=2)


def priced(price_in: float | None, price_out: float | None) -> tuple[float, float] | None:
    if (price_in is None) != (price_out is None):
        raise ConfigError(
            "--price-in and --price-out go together: give both (US$ per million tokens), or neither"
        )
    return None if price_in is None or price_out is None else (price_in, price_out)


def named_tasks(names: list[str]) -> list[Task]:
    try:
        return task_named(names)
    except ValueError as exc:
        raise ConfigError(f"--task: {exc}") from None


def replayed(sessions: Sessions, folder: Path) -> tuple[list[Score], list[Score]]:
    """The recorded scores of `folder` and the same tasks scored again from their replays."""
    try:
        recorded = json.loads((folder / SCORES).read_text())
    except OSError as exc:
        raise ConfigError(
            f"--replay {folder}: cannot read {SCORES} ({exc.strerror}): record it with --record"
        ) from None
    given = recorded.get("prices")
    prices = (float(given[0]), float(given[1])) if given else None
    before = [Score.model_validate(s) for s in recorded["scores"]]
    after = []
    for old in before:
        (task,) = named_tasks([old.task])
        if sessions.store.get_session(old.session) is None:
            import_session(sessions.store, folder / f"{old.task}.json.gz")
        state = (
            porting.replayed(sessions.store, old.session) if task.release else sessions.replay(old.session)[0]
        )
        after.append(score(task, old.model, state, prices))
    return before, after


def merged(folder: Path, scores: list[Score], prices: tuple[float, float] | None) -> list[Score]:
    """`scores` with the rows already recorded in `folder` for the other tasks (a run of one
    `--task` adds its row to the model's recordings), in the suite's order."""
    try:
        old = json.loads((folder / SCORES).read_text())
    except (OSError, ValueError):
        return scores
    if old.get("prices") != (list(prices) if prices else None):
        raise ConfigError(f"--record {folder}: its {SCORES} was priced otherwise; record into a new folder")
    ran = {s.task for s in scores}
    rows = [*(Score.model_validate(s) for s in old["scores"] if s["task"] not in ran), *scores]
    order = {t.name: i for i, t in enumerate(TASKS)}
    return sorted(rows, key=lambda s: order.get(s.task, len(order)))
