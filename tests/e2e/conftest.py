"""End-to-end helpers: a real git checkout of the demo target, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launching import DEMO
from tests.procs import processes_in

ROOT = Path(__file__).resolve().parents[2]

PERFLOOP = Path(sys.executable).parent / "perfloop"
BUILTIN_PLAYBOOK = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "playbook.toml"


LOOP_NODES = [
    "prepare",
    "instrument",
    "launch",
    "baseline",
    "profile",
    "diagnose",
    "propose",
    "approve",
    "cleanup",
    "apply",
    "relaunch",
    "measure",
    "decide",
]
"""The nodes a one-patch session passes through, in order, up to its first decision."""

CI_MEASURE = """[measure]
prompts = ["Explain the KV cache.", "Write a haiku about GPUs."]
max_tokens = 12
repeats = 3
"""
"""The smaller workload of CI's demo sessions (the demo's own is larger)."""

CI_CORRECTNESS = """[correctness]
random_prompts = 1
max_prompt_chars = 300
max_tokens = 16
concurrent = 2
long_prompts = 0  # CI: the demo's CPU prefills near its 1024-token limit cost tens of seconds (tests/e2e/test_long_context.py runs them at 256)
"""
"""CI's correctness set: one short random prompt, no long contexts (the defaults took 12-14 s a check)."""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repo(dest: Path) -> Path:
    """A committed git checkout of the demo target (like a user's engine checkout)."""
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    git(dest, "init", "-q", "-b", "main")
    git(dest, "-c", "user.name=u", "-c", "user.email=u@x", "add", "-A")
    git(dest, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "engine")
    return dest


def write_target(
    path: Path,
    repo: Path,
    method: str = "patch",
    tp_size: int = 1,
    startup_timeout_s: float = 120,
    looks: int = 3,
    arms: str = "sequential",
    prompts: tuple[str, ...] = ("Explain the KV cache.", "Write a haiku about GPUs."),
    long_prompts: int = 0,
    pool_slots: int | None = None,
) -> Path:
    """A target TOML with a smaller workload than the demo's, to keep CI quick (one layer of the
    demo's four: the unpatched server casts a quarter as much per step, the fix gains as much;
    `looks = 1`: the reference arm and the candidate get `repeats` requests per prompt, one look;
    `arms`: see `[decide] arms` in examples/targets/mla_server.toml; `long_prompts`: the
    correctness set's prompts up to the context limit, none by default, since the CPU demo's
    prefills near its 1024-token limit take tens of seconds on a loaded 2-core machine;
    `auto_aa_pairs = 0`: no A/A pairs launched beside an interleaved baseline, a launch and a
    measured pair each that CI's budget has no room for, tests/integration/test_auto_aa.py runs
    them); `pool_slots`: the demo server's KV pool instead of the preset's 24576 slots (49152 doubles
    what the cast fix saves a step, for a test that asserts the fix is kept at any load)."""
    pool = f', "--pool-slots", "{pool_slots}"' if pool_slots else ""
    path.write_text(f"""
name = "e2e mla_server"
kind = "mla_server"
repo = "{repo}"
model = "mla-demo"
tp_size = {tp_size}
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu", "--threads", "1", "--layers", "1"{pool}]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = {startup_timeout_s}
[measure]
prompts = {json.dumps(list(prompts))}
max_tokens = 12
repeats = 3
[correctness]
random_prompts = 1
max_prompt_chars = 300
max_tokens = 16
concurrent = 2
long_prompts = {long_prompts}
[profile]
method = "{method}"
[decide]
looks = {looks}
arms = "{arms}"
auto_aa_pairs = 0
""")
    return path


def perfloop(
    home: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the real CLI with its own PERFLOOP_HOME and no stdin (plus `env`, if given)."""
    env = {**os.environ, "PERFLOOP_HOME": str(home), **(env or {})}
    return subprocess.run(
        [str(PERFLOOP), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def run_playbooks(home: Path, target: Path, books: Path) -> tuple[dict, dict]:
    """One iteration of `perfloop run` with only the playbooks in `books`: its summary and what
    `perfloop show --json` says of the session."""
    proc = perfloop(
        home, "run", "--approve", "auto", str(target), "--json", "--playbooks", str(books), "--no-builtin-playbooks",
        "--max-iterations", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    return s, last_json(perfloop(home, "show", s["session"], "--json"))


def last_json(proc: subprocess.CompletedProcess) -> dict:
    """`--json`'s document: stdout holds it and nothing else (tables and progress went to stderr)."""
    assert proc.stdout.strip(), f"no output; stderr: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def assert_clean(repo: Path, ended: dict | str | None = None) -> None:
    """No instrumentation in the tree, no server left running in it. With `ended` (a session's
    summary): the checkout is back on the branch the session found it on (`checkout`) and the
    session branch, kept where it holds the accepted commits, is there; a branch name: HEAD is on it."""
    for f in repo.rglob("*.py"):
        assert "perfloop-instrumentation" not in f.read_text(), f"instrumentation left in {f}"
    assert processes_in(repo) == [], "server process left running"
    if isinstance(ended, str):
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == ended
    elif ended is not None:  # back where it was found, else (a switch refused: the user's edit) on its branch
        on = ended["checkout"] or ended["branch"]
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == on, ended
        if ended["commits"]:
            assert git(repo, "rev-parse", ended["branch"]).strip() == ended["commits"][-1]
        elif ended["checkout"]:  # no commit kept: no branch left behind
            assert ended["branch"] is None and git(repo, "branch", "--list", "perfloop/*") == "", ended


DRIFTED = "faster for one arm: CI widened by it"
"""What a sequential verdict's reason says when the CPU probes read the machine at different speeds
for the two arms (agent/decision/stats/rule.py `look`: the interval is widened by their ratio)."""


def kept_unless_drifted(accepted: bool, reason: str) -> bool:
    """Whether the demo's fix was kept, for a test whose subject is not the verdict: kept, or
    inconclusive only for the load: the machine drifted between the two sequential arms (the other
    xdist worker's servers load the same two cores: a 2.2x drift left the fix's ~9x at [0.82,
    18.3] in a fresh-clone CI), or a prompt kept too few timed requests for an interval. Any other
    verdict fails the test; the caller then checks what
    holds either way and what each outcome implies."""
    if accepted:
        return True
    assert "-> inconclusive" in reason and (DRIFTED in reason or NO_INTERVAL_TEXT in reason), (
        f"neither kept nor inconclusive for the machine's load: {reason}"
    )
    return False


NO_INTERVAL = 1e9
"""The upper bound a look reports when it has no interval: a prompt kept fewer than two timed
requests in one arm (agent/decision/stats/rule.py `look`), so the trial ends inconclusive."""
NO_INTERVAL_TEXT = f"{NO_INTERVAL:.2f}]"
"""That bound as a decision line prints it (`[0.00, 1000000000.00]`)."""


def kept_unless_untimed(accepted: bool, trial: dict) -> bool:
    """Whether a parallel trial's fix was kept, for a test whose subject is not the verdict: kept,
    or inconclusive with no interval because a prompt's streams never timed in one arm (the
    client, starved of both cores by the two hosts' servers and the other xdist worker, read them
    at once even when sent again: 15.03x [0.00, 1e9] in a fresh-clone CI). A trial's record has no
    drift note, so that is the one load-caused outcome this accepts; any other verdict fails."""
    if accepted:
        return True
    assert trial["verdict"] == "inconclusive" and trial["ci"] and trial["ci"][1] >= NO_INTERVAL, (
        f"neither kept nor inconclusive for want of timed requests: {trial}"
    )
    return False


def confirming_launches(decisions: list[dict]) -> int:
    """Launches of confirming pairs among `show --json` decisions: two for each interleaved
    acceptance whose CI started below `[decide] confirm_below` (so a launch count reads it from the
    decision instead of assuming none ran)."""
    return sum(2 for d in decisions if d.get("judgement") and d["judgement"]["confirmation"])


def playbook_variant(dest_dir: Path, pid: str, confidence: float, diff: str) -> None:
    """A playbook with the built-in signature but its own id, confidence and patch."""
    text = BUILTIN_PLAYBOOK.read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("id ="):
            line = f'id = "{pid}"'
        elif line.startswith("confidence ="):
            line = f"confidence = {confidence}"
        lines.append(line)
    folder = dest_dir / pid
    (folder / "patches").mkdir(parents=True)
    (folder / "playbook.toml").write_text("\n".join(lines) + "\n")
    (folder / "patches" / "mla_server.diff").write_text(diff)


def edited_diff(repo: Path, tmp: Path, edits: dict[str, list[tuple[str, str]]]) -> str:
    """The `git diff` of string replacements made in a scratch copy of `repo` (each must match)."""
    scratch = tmp / f"scratch-{len(list(tmp.glob('scratch-*')))}"
    shutil.copytree(repo, scratch)
    for rel, pairs in edits.items():
        f = scratch / rel
        text = f.read_text()
        for old, new in pairs:
            assert old in text, f"{old!r} not in {rel}: the demo target changed, update the test"
            text = text.replace(old, new, 1)
        f.write_text(text)
    return git(scratch, "diff")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "engine")
