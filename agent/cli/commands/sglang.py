"""`perfloop instrument` and `perfloop playbook apply`: the profiler hook and playbook patches by hand.

`instrument` inserts (or with --remove, exactly removes) perfloop's dormant torch.profiler hook in
the target's eager decode method; the InstrumentationRecord needed for removal is kept in the
repo's git dir (`.git/perfloop-instrumentation.json`), never in the working tree.
`playbook apply` checks (--check) or applies a catalog playbook's patch to the working tree, for
SGLang choosing the patch for the checkout's release; all hunks or none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.cli.running import run_command
from tools.errors import ConfigError

if TYPE_CHECKING:  # git, the engines' layouts and the playbooks load when a command runs
    from state.engines.sglang import HookSite
    from state.engines.workspace import InstrumentationRecord
    from tools.workspace.git import GitWorkspace

RECORDS_FILE = "perfloop-instrumentation.json"
"""File in the repo's git dir: repo-relative path -> InstrumentationRecord of what we inserted."""
KINDS = ("sglang", "mla_server", "vllm")

Repo = Annotated[Path, typer.Option("--repo", help="The target checkout (a git repository).")]
Kind = Annotated[str, typer.Option("--kind", help="Target kind: sglang, mla_server or vllm.")]
playbook_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Work with catalog playbooks.")


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ConfigError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return kind


def _site(repo: Path, kind: str) -> HookSite:
    """Where the hook goes for this kind of target."""
    from state.config.target import ProfileConfig
    from state.engines.sglang import HookSite
    from tools.sglang.layout import hook_site, locate
    from tools.vllm.hook import hook_site as vllm_hook_site

    if kind == "sglang":
        return hook_site(repo, locate(repo))
    if kind == "vllm":
        return vllm_hook_site(repo)
    return HookSite(
        relpath=ProfileConfig().model_runner_path, class_name="ModelRunner", method="forward_decode"
    )


def _records_path(ws: GitWorkspace) -> Path:
    return Path(ws.repo.git_dir) / RECORDS_FILE


def _load_records(ws: GitWorkspace) -> dict[str, InstrumentationRecord]:
    from state.engines.workspace import InstrumentationRecord

    path = _records_path(ws)
    if not path.exists():
        return {}
    try:
        return {k: InstrumentationRecord.model_validate(v) for k, v in json.loads(path.read_text()).items()}
    except (ValueError, AttributeError) as err:
        raise ConfigError(
            f"{path} is unreadable ({err.__class__.__name__}); delete it and remove the "
            "'# perfloop-instrumentation' lines by hand"
        ) from err


def _save_records(ws: GitWorkspace, records: dict[str, InstrumentationRecord]) -> None:
    path = _records_path(ws)
    if not records:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({k: v.model_dump() for k, v in records.items()}, indent=1))
    tmp.replace(path)


def instrument_cmd(
    repo: Repo,
    kind: Kind = "sglang",
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove exactly the hook inserted before.")
    ] = False,
) -> None:
    """Insert perfloop's dormant profiler hook into the target's eager decode step (or remove it)."""

    def body() -> None:
        from tools.workspace.git import GitWorkspace
        from tools.workspace.instrumentation import instrument as insert_hook
        from tools.workspace.instrumentation import remove_instrumentation

        site = _site(repo, _kind(kind))
        with GitWorkspace(repo) as ws:
            records = _load_records(ws)
            if remove:
                record = records.pop(site.relpath, None)
                if record is None:
                    raise ConfigError(
                        f"no record of instrumenting {site.relpath} in {_records_path(ws)}; "
                        "nothing removed (delete '# perfloop-instrumentation' lines by hand)"
                    )
                remove_instrumentation(ws, record)
                _save_records(ws, records)
                print(f"removed instrumentation from {site.relpath}")
                return
            records[site.relpath] = insert_hook(ws, site.relpath, site.class_name, site.method)
            _save_records(ws, records)
            print(
                f"instrumented {site.class_name}.{site.method} in {site.relpath}; "
                "arm it by launching with PERFLOOP_PROFILE_DIR set"
            )

    run_command(body)


@playbook_app.command("apply")
def apply_cmd(
    playbook_id: Annotated[str, typer.Argument(help="Playbook id, e.g. kv-cache-full-pool-cast.")],
    repo: Repo,
    kind: Kind = "sglang",
    check: Annotated[
        bool, typer.Option("--check", help="Only check that the patch fits; change nothing.")
    ] = False,
) -> None:
    """Apply a playbook's patch to the target's working tree (all hunks or none)."""

    def body() -> None:
        from playbooks.engine import load_playbooks
        from playbooks.patches import choose_patch
        from state.engines.workspace import PatchPolicy
        from tools.sglang.layout import locate
        from tools.sglang.patches import apply_sglang_patch
        from tools.workspace.git import GitWorkspace
        from tools.workspace.patch_check import gate_workspace

        books = {b.id: b for b in load_playbooks()}
        if playbook_id not in books:
            raise ConfigError(f"no playbook {playbook_id!r}; known: {', '.join(books)}")
        book = books[playbook_id]
        with GitWorkspace(repo) as ws:
            layout = locate(repo) if _kind(kind) == "sglang" else None
            key, diff = choose_patch(book, kind, layout)
            if layout is not None:
                files = apply_sglang_patch(ws, layout, diff, check_only=check)
                what = f"sglang {layout.version} ({key})"
            else:
                files = gate_workspace(ws, diff, PatchPolicy(allow_binary=book.binary_patches))
                if not check:
                    ws.apply_to_worktree(diff)
                what = kind
        print(f"{'fits' if check else 'applied to'} {what}: {', '.join(files)}")

    run_command(body)


COMMANDS = {"instrument": instrument_cmd}
