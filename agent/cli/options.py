"""The option types several commands take, declared once (`Annotated[type, typer.Option(...)]`).

Light on purpose (typer and the standard library only): every command module imports these at
start-up, before any command runs, so nothing here may import the loop, the store or the state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Json = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document on stdout (what a person reads goes to stderr)."),
]
Trust = Annotated[
    str | None,
    typer.Option(
        metavar="DIGEST",
        help="Run a session this user's key did not sign (another machine's or user's, or one from "
        "before signing) if it still holds what `perfloop show` printed with this digest.",
    ),
]
Approve = Annotated[
    str | None,
    typer.Option(
        metavar="auto|manual",
        help="auto: apply proposals at once; manual: ask for approval (on a terminal in place, else "
        "the session pauses for perfloop approve). Default: demo auto; run manual.",
        show_default=False,
    ),
]
Method = Annotated[
    str,
    typer.Option(
        "--profile-method", metavar="patch|api", help="patch: instrument forward_decode; api: /start_profile."
    ),
]
Iters = Annotated[int, typer.Option(metavar="N", min=1, help="Most profile/diagnose rounds.")]
Parallel = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        metavar="N",
        min=1,
        help="Most candidates tried at once on the hosts the target file lists (default: one per host).",
    ),
]
FloorMs = Annotated[
    float | None,
    typer.Option(
        metavar="MS",
        min=0.001,
        help="The step's roofline floor in ms (e.g. weights read once); stop near it.",
    ),
]
FloorFactor = Annotated[
    float, typer.Option(metavar="X", min=1.0, help="Stop once TPOT is within this factor of --floor-ms.")
]
Books = Annotated[
    list[Path] | None,
    typer.Option("--playbooks", metavar="DIR", help="Extra playbook directory (repeatable)."),
]
NoBuiltin = Annotated[
    bool, typer.Option("--no-builtin-playbooks", help="Search only --playbooks directories.")
]
HostUrl = Annotated[
    str | None,
    typer.Option("--host", metavar="URL", help="Run on this SSH host (ssh://user@host:port or ssh://ALIAS)."),
]
TrustNew = Annotated[
    bool,
    typer.Option(
        "--trust-new-host", help="Record an unknown SSH host key (a changed one is always refused)."
    ),
]
HostPython = Annotated[
    str | None,
    typer.Option(
        "--host-python",
        metavar="PATH",
        help="Interpreter on the SSH host (needs pydantic, GitPython, msgspec).",
    ),
]
ProposerOpt = Annotated[
    str | None,
    typer.Option(
        "--proposer",
        metavar="playbook|llm|auto|search|chain",
        help="playbook: stored patches only; llm: a model writes every patch; auto: a playbook's "
        "patch when one fits, else the model; search: the launch options of the target's [search]; "
        "chain: playbook patches and launch changes and [search] trials ranked together by predicted "
        "gain per launch-minute, the model last, and the kept changes measured together against the "
        "baseline at the end (default: the target's [proposer] mode, else auto).",
    ),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", metavar="NAME", help="Model name for --proposer llm|auto.")
]
BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, else OpenAI).",
    ),
]
LlmSteps = Annotated[
    int | None, typer.Option("--llm-max-steps", metavar="N", min=1, help="Model calls per proposal.")
]
LlmTokens = Annotated[
    int | None,
    typer.Option(
        "--llm-max-tokens", metavar="N", min=1, help="Model tokens (prompt + completion) per session."
    ),
]
LlmApprove = Annotated[
    str | None,
    typer.Option(
        "--llm-approve",
        metavar="manual|auto",
        help="Model-written patches: manual (the default: pause for perfloop approve, even under "
        "--approve auto) or auto (follow --approve); default: the target's [proposer] approve.",
    ),
]
LlmSeconds = Annotated[
    float | None,
    typer.Option("--llm-max-seconds", metavar="SECONDS", min=1, help="Model time per proposal, in seconds."),
]
