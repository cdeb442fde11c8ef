"""`perfloop eval proposer`: the LLM proposer's suite of tasks with known answers, scored.

Each task (agent/proposer/harness/evaluation.py) runs as a real session on the embedded demo, with the
model as its only proposer, or, for a port to a real SGLang release, as the model's part of one
(agent/proposer/harness/porting.py); its row is scored from the finished state. `--record DIR` exports
each session there with the scores (`scores.json`, keeping the rows of tasks not run now); `--replay DIR` imports those recordings,
replays them offline (no server, no model) and checks that they score the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.options import BaseUrl, Json
from agent.cli.output import console, emit
from agent.cli.running import err, run_command
from tools.errors import ConfigError

eval_app = typer.Typer(no_args_is_help=True, help="Evaluate parts of perfloop on tasks with known answers.")


@eval_app.command("proposer")
def proposer(
    model: Annotated[str | None, typer.Option("--model", help="Model name sent to the endpoint.")] = None,
    base_url: BaseUrl = None,
    task: Annotated[
        list[str] | None, typer.Option("--task", help="Run only this task (repeatable; default: all).")
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option("--record", help="Folder to export each task's session to, with scores.json."),
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option("--replay", help="Score a --record folder again from its recordings, offline."),
    ] = None,
    price_in: Annotated[
        float | None, typer.Option("--price-in", min=0, help="US$ per million prompt tokens (for the cost).")
    ] = None,
    price_out: Annotated[
        float | None, typer.Option("--price-out", min=0, help="US$ per million completion tokens.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Run the LLM proposer's tasks with known answers (the demo's full-pool cast, ...) as real
    sessions with --model as the only proposer, and print each one's score."""

    def body() -> None:
        from agent.cli.commands.eval_tasks import (
            SCORES,
            ended,
            merged,
            named_tasks,
            port_session,
            priced,
            replayed,
            scores_table,
            task_session,
        )
        from agent.proposer.harness.evaluation import score
        from agent.sessions.archive import export_session
        from agent.sessions.runner import Sessions

        sessions = Sessions()
        if replay is not None:
            if model is not None or record is not None:
                raise ConfigError("--replay scores recorded sessions again: leave out --model and --record")
            before, scores = replayed(sessions, replay)
            same = [s.model_dump() for s in before] == [s.model_dump() for s in scores]
            console(as_json).print(scores_table(scores))
            err.print(
                f"replayed {len(scores)} task(s): {'same scores as recorded' if same else 'DIFFERENT scores than recorded'}"
            )
        else:
            if not model:
                raise ConfigError("--model is required: the model to evaluate, e.g. --model gpt-4.1")
            prices = priced(price_in, price_out)
            tasks = named_tasks(task or [])
            scores = []
            for t in tasks:
                err.print(f"eval {t.name}: {t.about}")
                if t.release is not None:
                    state = port_session(sessions, t, model, base_url)
                else:
                    sid = task_session(sessions, t, model, base_url)
                    ended(sessions, sid, t)
                    state = sessions.state(sid)
                scores.append(score(t, model, state, prices))
            console(as_json).print(scores_table(scores))
            if record is not None:
                record.mkdir(parents=True, exist_ok=True)
                for s in scores:
                    export_session(sessions.store, s.session, record / f"{s.task}.json.gz")
                data = {
                    "prices": list(prices) if prices else None,
                    "scores": [s.model_dump() for s in merged(record, scores, prices)],
                }
                (record / SCORES).write_text(json.dumps(data, indent=1) + "\n")
                err.print(f"recorded {len(scores)} session(s) and {SCORES} in {record}")
            same = True
        if as_json:
            emit([s.model_dump() for s in scores])
        if not same:
            raise typer.Exit(1)

    run_command(body)
