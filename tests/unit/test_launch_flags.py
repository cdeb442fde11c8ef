"""Launch flags by prefix (docs/SECURITY.md, finding 2): what a model's `LAUNCH:` answer, a playbook
or a search may change in a launch command comes from an allowlist per target kind (plus the
target file's `[proposer] launch_flags`); prefixes argparse would expand, `--flag=VALUE`, values
that read as flags and the flags that say where the server listens and what it loads are refused,
each in one line the model can act on. The approval view prints the exact argv, shell-quoted."""

from __future__ import annotations

import argparse
import io
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.cli import render, terminal
from agent.cli.target import load_target
from agent.proposer.edits.launching import launch_answer
from playbooks.flags import FIXED, changeable, flag_problem
from playbooks.schema import LaunchEdit
from tools.engines.registry import engine, registered
from tools.errors import ConfigError

ARGV = ["bash", "launch.sh", "--port", "{port}", "--host", "127.0.0.1", "--preset", "cpu"]

REFUSED = {
    "set --hos 0.0.0.0": "--hos is a prefix of --host",
    "set --host 0.0.0.0": "--host is fixed",
    "set --po 9": "--po is a prefix of --port",
    "set --model-p /tmp/evil": "--model-p is a prefix of --model-path",
    "set --trust-remote-code": "--trust-remote-code is fixed",
    "set --trust 1": "--trust is a prefix of --trust-remote-code",
    "set --tokenizer-path /tmp/t": "--tokenizer-path is fixed",
    "set --host=0.0.0.0": "write `--host VALUE`",
    "set --max-total-tokens=4096": "write `--max-total-tokens VALUE`",
    "set --max-total-tokens --host": "starts with `-`",
    "set --max-total-tokens -5": "starts with `-`",
    "set --max-total 4096": "--max-total is a prefix of --max-total-tokens",
    "set --enable-anything 1": "--enable-anything is not a launch option you may change for a mla_server target",
    "drop --host": "--host is fixed",
    "drop --preset=cpu": "write `--preset VALUE`",
}


@pytest.mark.parametrize("line", sorted(REFUSED))
def test_a_model_cannot_reach_a_fixed_or_unlisted_flag(line: str) -> None:
    found = launch_answer(f"why\nLAUNCH: {line}\n", ARGV, [], kind="mla_server")
    assert isinstance(found, str), (line, found)
    assert REFUSED[line] in found and "\n" not in found, found


def test_what_argparse_would_do_with_the_refused_prefix() -> None:
    """The reason for the rule: the engine's own parser reads `--hos` as `--host`."""
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port")
    assert p.parse_args(["--hos", "0.0.0.0"]).host == "0.0.0.0"
    assert p.parse_args(["--port=1", "--host=x"]).host == "x"


def test_allowed_flags_pass_and_the_target_file_adds_more() -> None:
    found = launch_answer(
        "LAUNCH: set --max-total-tokens 4096\nLAUNCH: set --disable-cuda-graph", ARGV, [], kind="mla_server"
    )
    assert not isinstance(found, str) and found.argv == [
        *ARGV,
        "--max-total-tokens",
        "4096",
        "--disable-cuda-graph",
    ]
    refused = launch_answer("LAUNCH: set --my-knob 3", ARGV, [], kind="mla_server")
    assert isinstance(refused, str) and "launch_flags" in refused
    added = launch_answer("LAUNCH: set --my-knob 3", ARGV, [], kind="mla_server", extra=["--my-knob"])
    assert not isinstance(added, str) and added.argv[-2:] == ["--my-knob", "3"]
    # A fixed flag, or a prefix of one, listed in the target file stays refused.
    for flag in ("--host", "--hos", "--model"):
        assert flag not in changeable("mla_server", [flag])
        assert flag_problem("mla_server", flag, "x", [flag]) is not None
    assert flag_problem("sglang", "--mem-fraction-static", "0.8") is None
    with pytest.raises(ConfigError, match="no engine named 'unknown-kind' .*perfloop.engines"):
        flag_problem("unknown-kind", "--mem-fraction-static", "0.8")  # no engine: nothing allowed


def test_no_allowlisted_flag_is_fixed_or_a_prefix_of_a_fixed_one() -> None:
    for kind in registered():
        flags = engine(kind).changeable_flags
        assert changeable(kind) == list(flags), kind
        for flag in flags:
            assert not any(f.startswith(flag) for f in FIXED), (kind, flag)


def test_playbooks_and_searches_cannot_edit_a_fixed_flag(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="prefix of --host"):
        LaunchEdit(flag="--hos", action="remove")
    with pytest.raises(ValidationError, match="--port is fixed"):
        LaunchEdit(flag="--port", action="raise", value=1)
    base = (Path(__file__).parents[2] / "examples" / "targets" / "mla_server.toml").read_text()
    knob = '[[search.knobs]]\nname = "--hos"\ntype = "choice"\nchoices = ["0.0.0.0", "::"]\n'
    for extra, why in [
        (knob, r"\[search\] knob --hos: --hos is a prefix of --host"),
        (
            '[proposer]\nlaunch_flags = ["--trust-remote-code"]\n',
            "launch_flags --trust-remote-code: .* fixed",
        ),
    ]:
        f = tmp_path / "t.toml"
        f.write_text(base + "\n" + extra)
        with pytest.raises(ConfigError, match=why):
            load_target(f)


def test_the_approval_view_shows_the_exact_argv_shell_quoted() -> None:
    out = terminal.console()
    out.file = io.StringIO()
    after = [*ARGV, "--preset", "a b; rm -rf ~", "--threads", ""]
    req = {
        "session": "s1",
        "title": "t",
        "explanation": "e",
        "expected_gain_ms": None,
        "expected_gain_share": 0.1,
        "launch_argv": after,
        "launch_argv_before": ARGV,
        "evidence": [],
        "files": [],
        "diff": "",
    }
    render.approval(out, req)
    assert "  proposed: " + shlex.join(after) in out.file.getvalue().replace("\n", "")


CODE_LOADING = {
    "set --trust_remote_code": "--trust_remote_code is read by the engine as --trust-remote-code; --trust-remote-code is fixed",
    "set --trust_remote 1": "is a prefix of --trust-remote-code",
    "set --kv-transfer-config {}": "--kv-transfer-config is fixed",
    "set --kv_transfer_config {}": "--kv-transfer-config is fixed",
    "set --reasoning-parser-plugin /tmp/p.py": "--reasoning-parser-plugin is fixed",
    "set --log-config-file /tmp/l.json": "--log-config-file is fixed",
    "set --otlp-traces-endpoint http://x": "--otlp-traces-endpoint is fixed",
    "set --lora-modules a=/tmp/a": "--lora-modules is fixed",
    "set --speculative-config {}": "--speculative-config is fixed",
    "set --generation-config /tmp/g": "--generation-config is fixed",
    "set --max_num_seqs 4": "read by the engine as --max-num-seqs; spell flags with `-`",
}


@pytest.mark.parametrize("line", sorted(CODE_LOADING))
@pytest.mark.parametrize("kind", ["vllm", None])
def test_code_loading_flags_and_underscore_spellings_are_refused_with_or_without_the_allowlist(
    line: str, kind: str | None
) -> None:
    """`kind=None` is a session recorded before the allowlist (any flag but the fixed ones): the
    code- and file-loading families and `_` spellings (vLLM reads `_` as `-`) are refused there too."""
    argv = ["vllm", "serve", "m", "--port", "{port}", "--max-num-seqs", "8"]
    found = launch_answer(f"why\nLAUNCH: {line}\n", argv, [], kind=kind)
    assert isinstance(found, str), (line, found)
    assert CODE_LOADING[line] in found and "\n" not in found, found
