"""A target file's mistakes are refused before anything starts, in one line naming the line and a
did-you-mean: a `kind` typo (which once ran launch, baseline and profile, then ended 1.00x), an
unknown key (which spoke pydantic: "Extra inputs are not permitted")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.cli.target import load_target
from agent.cli.targetcheck import port_problem
from state.config.target import known_kinds
from tools.errors import ConfigError

DEMO = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def edited(tmp_path: Path, old: str, new: str) -> Path:
    text = DEMO.read_text()
    assert old in text
    out = tmp_path / "t.toml"
    out.write_text(text.replace(old, new, 1))
    (tmp_path / "repo").mkdir()
    return out


def line_with(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_a_kind_typo_is_refused_before_launch(tmp_path: Path) -> None:
    t = edited(tmp_path, 'kind = "mla_server"', 'kind = "mla-server"')
    with pytest.raises(ConfigError) as exc:
        load_target(t)
    n = line_with(t, "mla-server")
    assert str(exc.value) == (
        f"{t}:{n}: kind `mla-server` is not one perfloop knows ({', '.join(known_kinds())}); "
        'did you mean `mla_server`? an engine of your own registers under the entry-point group "perfloop.engines" '
        "(docs/engines.md)"
    )
    assert "vllm" in known_kinds()
    home = tmp_path / "home"
    result = CliRunner().invoke(app, ["run", str(t)], env={"PERFLOOP_HOME": str(home), "COLUMNS": "300"})
    assert result.exit_code == 2 and "did you mean `mla_server`?" in result.output, result.output
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())  # nothing started


def test_an_unknown_key_names_its_line_and_the_key_meant(tmp_path: Path) -> None:
    t = edited(tmp_path, "startup_timeout_s = 180", "startup_timeout = 180")
    with pytest.raises(ConfigError) as exc:
        load_target(t)
    n = line_with(t, "startup_timeout = 180")
    assert str(exc.value) == (
        f"{t}:{n}: unknown key `startup_timeout` in [launch]; did you mean `startup_timeout_s`? "
        "(see examples/targets/mla_server.toml)"
    )
    (tmp_path / "b").mkdir()
    top = edited(tmp_path / "b", 'model = "mla-demo"', 'modle = "mla-demo"')
    with pytest.raises(ConfigError, match=r"t.toml:\d+: unknown key `modle`; did you mean `model`\?"):
        load_target(top)


def test_demo_on_cuda_without_a_gpu_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A stand-in nvidia-smi that finds no device, as on a machine without a GPU or its driver."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    smi.chmod(0o755)
    home = tmp_path / "home"
    env = {"PERFLOOP_HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "300"}
    result = CliRunner().invoke(app, ["demo", "--device", "cuda"], env=env)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --device cuda: no NVIDIA GPU on this machine (nvidia-smi -L lists none); "
        "use --device cpu, or --host ssh://GPU-HOST"
    ]
    assert not (home / "workspaces").exists() and not (home / "sessions").exists()


def test_an_unknown_section_names_its_line_and_a_vllm_file_names_the_vllm_example(tmp_path: Path) -> None:
    t = edited(tmp_path, "[measure]", "[mesure]")
    n = line_with(t, "[mesure]")
    with pytest.raises(ConfigError) as exc:
        load_target(t)
    assert str(exc.value) == (
        f"{t}:{n}: unknown section `[mesure]`; did you mean `[measure]`? (see examples/targets/mla_server.toml)"
    )
    vllm = Path(__file__).resolve().parents[2] / "examples" / "targets" / "vllm-tiny-llama.toml"
    for old, new, needle in (
        ("[measure]", "[mesure]", "unknown section"),
        ("max_tokens", "max_token", "unknown key"),
    ):
        bad = tmp_path / f"v-{needle[-3:]}.toml"
        bad.write_text(vllm.read_text().replace(old, new, 1))
        with pytest.raises(ConfigError) as exc:
            load_target(bad)
        assert needle in str(exc.value) and f"{bad}:" in str(exc.value), exc.value
        assert "(see examples/targets/vllm-tiny-llama.toml)" in str(exc.value) and "mla_server" not in str(
            exc.value
        )


def test_a_launch_without_port_or_with_a_fixed_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A vLLM launch with `--port 8000` once passed, then 5 launches and ~4 minutes later failed
    with "fix what its log says"; now `run` and `calibrate` refuse it in one line, nothing launched."""
    cases = {
        "fixed": ('"--port", "{port}"', '"--port", "8000"', "launch.argv sets a fixed port (--port 8000)"),
        "fixed=": ('"--port", "{port}"', '"--port=8000"', "launch.argv sets a fixed port (--port 8000)"),
        "none": ('"--port", "{port}", ', "", "launch.argv has no `{port}`"),
    }
    for name, (old, new, needle) in cases.items():
        (tmp_path / name).mkdir()
        t = edited(tmp_path / name, old, new)
        home = tmp_path / name / "home"
        for cmd in ("run", "calibrate"):
            result = CliRunner().invoke(
                app, [cmd, str(t)], env={"PERFLOOP_HOME": str(home), "COLUMNS": "400"}
            )
            assert result.exit_code == 2, (name, cmd, result.output)
            (line,) = result.output.strip().splitlines()
            assert line.startswith(f"error: {needle}") and ("write `{port}`" in line or "add it" in line), (
                line
            )
            assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())
    ok = load_target(DEMO)  # the shipped examples all pass it
    assert port_problem(ok.launch) is None
    for example in DEMO.parent.glob("*.toml"):
        assert port_problem(load_target(example).launch) is None, example
    fixed = ok.launch.model_copy(update={"port": 8000, "argv": ["srv", "--port", "8000"]})
    assert port_problem(fixed) is None  # launch.port = 8000 said so: the number is perfloop's too


def test_a_repo_inside_a_checkout_is_told_the_top_level_not_git_init(tmp_path: Path) -> None:
    """Issue 57: `repo` set to a subfolder of a checkout was told to "run `git init` there", which
    would nest a second repository inside the first. Real git checkouts."""
    import subprocess

    from agent.cli.preflight import check_repo

    top = tmp_path / "engine"
    (top / "python" / "sglang").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    target = load_target(DEMO).model_copy(update={"repo": top / "python"})
    with pytest.raises(ConfigError) as sub:
        check_repo(target)
    assert str(sub.value).startswith(
        f"target repo {top / 'python'} is a subfolder of the git checkout at {top}"
    )
    assert f'set `repo = "{top}"`' in str(sub.value) and "git init" not in str(sub.value)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError, match=r"is not a git checkout; run `git init` there"):
        check_repo(target.model_copy(update={"repo": plain}))


def test_the_example_inside_perfloops_checkout_is_told_to_be_copied_out(tmp_path: Path) -> None:
    """Issue 63 item 10: `repo` at the example server inside perfloop's own checkout was told to set
    `repo` to perfloop's checkout. It is told to copy the server into a repository of its own, with
    commands that run as written (here, with $HOME a temporary folder), after which it passes."""
    import os
    import re
    import subprocess

    from agent.cli.preflight import PERFLOOP_CHECKOUT, check_repo

    example = PERFLOOP_CHECKOUT / "examples" / "targets" / "mla_server"
    target = load_target(DEMO).model_copy(update={"repo": example})
    with pytest.raises(ConfigError) as told:
        check_repo(target)
    said = str(told.value)
    assert said.startswith(f"target repo {example} is inside perfloop's own checkout ({PERFLOOP_CHECKOUT})")
    assert f'set `repo = "{PERFLOOP_CHECKOUT}"`' not in said and "\n" not in said
    copy = re.search(r"so copy the server into a repository of its own: `([^`]+)`", said)
    assert copy, said
    env = {**os.environ, "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x"}
    env |= {"GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    subprocess.run(["bash", "-c", copy[1]], env=env, check=True, capture_output=True)
    check_repo(target.model_copy(update={"repo": tmp_path / "mla_server"}))  # `repo = "~/mla_server"`
