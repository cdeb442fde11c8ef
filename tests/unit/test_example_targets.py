"""Every example target file loads as perfloop reads it (the same validation `perfloop run` does
first), and the launch options its search varies are ones a search may change for its kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.target import load_target
from playbooks.flags import changeable

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "targets").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_target_loads_and_its_search_knobs_are_changeable(path: Path) -> None:
    target = load_target(path)
    assert target.name and target.kind in path.read_text()
    for knob in target.search.knobs if target.search else []:
        if not knob.env:
            assert knob.name in changeable(target.kind), (path.name, knob.name)


def test_the_examples_cover_every_target_kind() -> None:
    assert {load_target(p).kind for p in EXAMPLES} == {"mla_server", "sglang", "vllm"}


VLLM_EXAMPLES = [p for p in EXAMPLES if load_target(p).kind == "vllm"]


@pytest.mark.parametrize("path", VLLM_EXAMPLES, ids=[p.stem for p in VLLM_EXAMPLES])
def test_a_vllm_example_to_copy_serves_real_weights(path: Path) -> None:
    """Issue 57: the vLLM example meant for copying served `--load-format dummy`, which makes every
    prompt's greedy output the same and blinds the output check; dummy is for tools/vllm's test
    targets alone. A path left to fill in is refused in one line, before anything runs."""
    from agent.cli.preflight import check_placeholders
    from agent.cli.targetcheck import dummy_weights
    from tools.errors import ConfigError

    target = load_target(path)
    assert not dummy_weights(target.launch.argv), path.name
    if any("/path/to/" in a for a in target.launch.argv):
        with pytest.raises(
            ConfigError, match=r"^launch.argv still holds the example's placeholder '/path/to/"
        ):
            check_placeholders(target)


def test_run_warns_of_dummy_weights_before_the_session_starts(tmp_path: Path) -> None:
    """The warning came only in the final summary, after the change was accepted: now `run` says it
    before the session starts (here its first launch then fails: no vLLM in perfloop's venv)."""
    import os
    import subprocess
    import sys

    from agent.cli.targetcheck import DUMMY_WARNING, dummy_weights

    assert dummy_weights(["serve", "--load-format", "dummy"]) and dummy_weights(["--load-format=dummy"])
    assert not dummy_weights(["serve", "--load-format", "safetensors", "dummy"])
    repo, model = tmp_path / "vllm", tmp_path / "model"
    model.mkdir()
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "engine"], check=True)
    text = (path := EXAMPLES[0].parent / "vllm-tiny-llama.toml").read_text()
    for old, new in [
        ('"/path/to/perfloop/.venv-vllm/bin/python", "-m"', f'"{sys.executable}", "-m"'),
        ('"/path/to/model"', f'"{model}"'),
        ('"--load-format", "safetensors"', '"--load-format", "dummy"'),
        ('repo = "/tmp/vllm-src"', f'repo = "{repo}"'),
        ("startup_timeout_s = 300", "startup_timeout_s = 60"),
    ]:
        assert text.count(old) == 1, (path, old)
        text = text.replace(old, new)
    (target := tmp_path / "t.toml").write_text(text)
    env = {**os.environ, "PERFLOOP_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "perfloop"), "run", str(target), "--approve", "auto"],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and lines[-1].startswith("error: the server failed at its first launch"), (
        lines
    )
    assert lines[0] == DUMMY_WARNING, lines  # first, before anything was launched or judged
