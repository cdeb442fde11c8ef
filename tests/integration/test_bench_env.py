"""The engines' benchmark clients (`vllm bench serve`, SGLang's bench_serving) import the patched
checkout, so they get the environment the server policy builds (tools/secrets.py `server_env`):
no API key, no store URL with its password, no token unless the target names it in
`measure.bench_serving.pass_env`; a failed run's output is kept scrubbed under $PERFLOOP_HOME/logs
(0600), not in the system temp folder. The client here is a real process standing in for the
benchmark's interpreter: it writes the environment it was given and prints a secret it read."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from state.config.target import BenchServingConfig
from tools.engines.benchrun import BenchOutputError, BenchRun
from tools.secrets import register
from tools.sglang.bench import run_bench
from tools.vllm.bench import run_vllm_bench

SECRET = "sk-bench-" + os.urandom(6).hex()
STORE = f"postgresql://perfloop:pw-{os.urandom(6).hex()}@db.example/perfloop"


@pytest.mark.parametrize("client", ["vllm", "sglang"])
def test_a_benchmark_client_gets_no_secret_and_its_failed_log_is_kept_scrubbed_at_home(
    tmp_path: Path, monkeypatch, client: str
) -> None:
    seen, said = tmp_path / "env.txt", tmp_path / "said.txt"
    said.write_text(SECRET)
    fake = tmp_path / "python"  # `python -m ...`: dumps its environment, prints a secret, fails
    fake.write_text(f"#!/bin/bash\nenv > {seen}\ncat {said}\necho failed >&2\nexit 1\n")
    fake.chmod(0o755)
    home = tmp_path / "home"
    monkeypatch.setenv("PERFLOOP_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("PERFLOOP_STORE", STORE)
    monkeypatch.setenv("HF_TOKEN", "hf-" + SECRET)
    register(SECRET)
    cfg = BenchServingConfig(python=str(fake), env={"HF_HUB_OFFLINE": "1"}, pass_env=["HF_TOKEN"])
    before = set(Path(tempfile.gettempdir()).glob("perfloop-*bench-*.log"))
    run = BenchRun(str(fake), "m", cfg, "http://127.0.0.1:9", "m", 2, 4, 1, 0, 1.0, str(tmp_path), "baseline")
    with pytest.raises(BenchOutputError) as err:
        (run_vllm_bench if client == "vllm" else run_bench)(run)
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert "OPENAI_API_KEY" not in env and "PERFLOOP_STORE" not in env, sorted(env)
    assert SECRET not in seen.read_text().replace("hf-" + SECRET, "")
    assert env["HF_TOKEN"] == "hf-" + SECRET and env["HF_HUB_OFFLINE"] == "1"  # named: passed
    kept = Path(str(err.value).rsplit("(its whole output: ", 1)[1].removesuffix(" on the host)"))
    assert kept.parent == home / "logs" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    text = kept.read_text()
    assert "failed" in text and SECRET not in text and "***" in text
    assert set(Path(tempfile.gettempdir()).glob("perfloop-*bench-*.log")) == before
