"""The vLLM launch flags perfloop lets a model, playbook or search change (`engine("vllm").changeable_flags`),
and those it never lets anyone change (`FIXED`), against the installed vLLM's own parser of `vllm
serve`'s engine arguments: a flag renamed in a release would otherwise be allowed under a name
vLLM no longer reads (or, for a fixed one, guarded under a name vLLM no longer has)."""

from __future__ import annotations

import json
import subprocess

import pytest

from playbooks.flags import FIXED, flag_problem
from tools.engines.registry import engine

from .conftest import VLLM_PYTHON

pytestmark = pytest.mark.xdist_group("vllm")

OPTIONS = """
import json
from vllm.entrypoints.launchers.cli_args import make_arg_parser  # `vllm serve`'s (0.32)
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print(json.dumps(sorted({o for a in parser._actions for o in a.option_strings})))
"""


def test_every_changeable_vllm_flag_is_one_vllm_serve_reads_and_the_risky_ones_are_fixed() -> None:
    proc = subprocess.run(
        [str(VLLM_PYTHON), "-c", OPTIONS], capture_output=True, text=True, timeout=300,
        env={"VLLM_TARGET_DEVICE": "cpu", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    options = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert {"--max-num-seqs", "--host", "--port"} <= options  # the parser of `vllm serve`
    unknown = [f for f in engine("vllm").changeable_flags if f not in options]
    assert unknown == [], f"not flags of vllm serve 0.32.0: {unknown}"
    for flag in engine("vllm").changeable_flags:
        assert flag_problem("vllm", flag, None) is None, flag
    # where it listens, what it loads, and the code it would import: all in vLLM's parser, all fixed
    risky = {"--host", "--port", "--uds", "--root-path", "--served-model-name", "--tokenizer", "--trust-remote-code",
             "--load-format", "--worker-cls", "--worker-extension-cls", "--scheduler-cls", "--middleware",
             "--hf-overrides", "--api-key", "--allowed-origins", "--chat-template"}  # fmt: skip
    assert risky <= options and risky <= set(FIXED), risky - options
    # not on the list: refused in one line that names the list
    assert "not a launch option you may change for a vllm target" in (
        flag_problem("vllm", "--model-impl", "x") or ""
    )
