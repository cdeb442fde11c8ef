"""Set-up checks run before a session starts: bad input is refused before anything is launched.

Each check raises one `ConfigError` line naming what is wrong and what to do; none of them changes
the target repository (no branch, no instrumentation, no file). Checks that need the target's host
(the repository, the launch command, the port) run only for a local target; on an SSH host the
first tool run there names what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from agent.cli.targetcheck import port_problem
from playbooks.engine import load_playbooks
from state.config.target import TargetConfig
from state.engines.workspace import PatchPolicy
from tools.errors import ConfigError, PatchError
from tools.hosts.listeners import port_in_use
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import scan_patch

_INTERPRETERS = ("bash", "sh", "dash", "zsh", "python", "python3", "{python}")


def check_playbooks(dirs: list[Path], builtin: bool = True, kind: str | None = None) -> None:
    """Every `--playbooks` folder exists and every playbook in it loads; its patches for this target
    kind (`kind`, `kind@release`; all when `kind` is None) are readable and pass the patch gate's
    text checks. Patches for other kinds are read only when such a target uses them."""
    books = load_playbooks(dirs)
    extra = {Path(d).resolve() for d in dirs}
    for book in books:
        if not builtin and Path(book.source_dir).resolve().parent not in extra:
            continue
        for for_kind, rel in book.patches.items():
            if kind is not None and for_kind != kind and not for_kind.startswith(f"{kind}@"):
                continue
            path = Path(book.source_dir) / rel
            try:
                scan_patch(path.read_text(encoding="utf-8"), PatchPolicy(allow_binary=book.binary_patches))
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    f"--playbooks: playbook {book.id}: patch for {for_kind!r} at {path} cannot be read ({exc})"
                ) from None
            except PatchError as exc:
                raise ConfigError(f"--playbooks: playbook {book.id}: patch {path}: {exc}") from None


PERFLOOP_CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout perfloop runs from (an installed wheel's site-packages is never a checkout)."""


def check_repo(target: TargetConfig) -> None:
    """The repository exists, is a git checkout's top level (a subfolder of one is told the top
    level to point at) and has a commit to branch from. A repo on an SSH host is not checked here: the first tool run there names
    what is missing."""
    if target.host.kind != "local":
        return
    repo = target.repo
    if not repo.is_dir():
        raise ConfigError(f"target repo {repo} does not exist; set `repo` in the target config")
    if not (repo / ".git").exists():
        top = enclosing_checkout(repo)
        if top is not None and top == PERFLOOP_CHECKOUT:  # the example in place: perfloop's own tree
            raise ConfigError(
                f"target repo {repo} is inside perfloop's own checkout ({top}); perfloop branches and "
                "commits in the repo it tunes, so copy the server into a repository of its own: "
                f"`cp -r {repo} ~/{repo.name} && git -C ~/{repo.name} init -q && git -C ~/{repo.name} "
                f"add -A && git -C ~/{repo.name} commit -qm {repo.name}`, then set `repo = "
                f'"~/{repo.name}"` (`perfloop demo` does this for the demo server)'
            )
        if top is not None:  # `git init` there would nest a repository
            raise ConfigError(
                f"target repo {repo} is a subfolder of the git checkout at {top}: set `repo = "
                f'"{top}"` in the target config (perfloop branches and commits at the top level; '
                "the launch command runs there, so give its paths from there)"
            )
        raise ConfigError(
            f"target repo {repo} is not a git checkout; run `git init` there and commit the engine "
            "source first"
        )
    with GitWorkspace(repo) as ws:
        if not ws.has_commit():
            raise ConfigError(
                f"target repo {repo} has no commit yet; commit the engine source first "
                "(perfloop branches from HEAD)"
            )


def enclosing_checkout(path: Path) -> Path | None:
    """The top level of the git checkout `path` lies inside (its nearest parent holding `.git`),
    or None when it lies in none."""
    for parent in path.resolve().parents:
        if (parent / ".git").exists():
            return parent
    return None


def check_launch(target: TargetConfig, python: str) -> None:
    """The launch command exists (on PATH, or as a file in the repo), and so does the script an
    interpreter is asked to run."""
    argv = [a.replace("{python}", python) for a in target.launch.argv]
    if not argv or not argv[0]:
        raise ConfigError("launch.argv is empty; give the command that starts the server")
    program = argv[0]
    if "/" in program:
        path = (target.repo / program).resolve()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(
                f"launch.argv[0]: {program} is not an executable file (looked in {target.repo})"
            )
    elif shutil.which(program) is None:
        raise ConfigError(
            f"launch.argv[0]: command {program!r} not found on PATH; install it or fix launch.argv"
        )
    raw = target.launch.argv
    if Path(raw[0]).name in _INTERPRETERS and len(argv) > 1 and not argv[1].startswith("-"):
        script = argv[1]
        if "{" not in script and script.endswith((".sh", ".py")) and not (target.repo / script).is_file():
            raise ConfigError(f"launch.argv[1]: script {script} not found in {target.repo}; fix launch.argv")


def check_port_argv(target: TargetConfig) -> None:
    """The launch command takes perfloop's port (`{port}`), never a number of its own."""
    if (problem := port_problem(target.launch)) is not None:
        raise ConfigError(problem)


def check_placeholders(target: TargetConfig) -> None:
    """No `/path/to/...` of a copied example is left in the launch command or its environment."""
    env = [(f"launch.env.{k}", v) for k, v in target.launch.env.items()]
    for where, value in [*(("launch.argv", a) for a in target.launch.argv), *env]:
        if "/path/to/" in value:
            raise ConfigError(
                f"{where} still holds the example's placeholder {value!r}: replace it with the real "
                "path (see the comments of the example the target file was copied from)"
            )


def check_port(target: TargetConfig) -> None:
    """A fixed `launch.port` is free now."""
    port = target.launch.port
    if port and port_in_use(port):
        raise ConfigError(
            f"launch.port {port} is already in use by another process; stop it or set launch.port = 0 (any free port)"
        )


def check_gpu() -> None:
    """`--device cuda` on this machine: nvidia-smi lists a GPU (else one line, before a workspace is
    copied or a server launched)."""
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30) if smi else None
    if listed is None or listed.returncode != 0 or "GPU " not in listed.stdout:
        raise ConfigError(
            "--device cuda: no NVIDIA GPU on this machine (nvidia-smi -L lists none); "
            "use --device cpu, or --host ssh://GPU-HOST"
        )


def check_setup(target: TargetConfig, options: dict, *, repo_exists: bool = True) -> None:
    """Every set-up check that can run before the session starts (see the module docstring)."""
    check_placeholders(target)
    check_port_argv(target)
    if repo_exists:
        check_repo(target)
    check_playbooks(options.get("playbook_dirs", []), options.get("builtin_playbooks", True), target.kind)
    if target.host.kind != "local":
        return
    if repo_exists:
        check_launch(target, options["python"])
    check_port(target)
