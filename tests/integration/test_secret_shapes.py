"""Secrets masked by shape as well as by value, and URL passwords kept from children (issue 56),
on real launched processes: a server and a benchmark client that print a key URL-encoded,
upper-cased and base64-encoded, and dump the environment they were given. `DATABASE_URL` (an
innocent name) holds a password: neither child gets it, and the password is masked wherever it
shows. The error line a failed launch raises is the text the session stores (in a shared store
too: `redact` runs on every stored string), so it is checked as stored."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from state.config.target import BenchServingConfig
from state.door.calls import ServerArgs
from tests.integration.test_host_server import launch_args
from tools import secrets, server
from tools.engines.benchrun import BenchOutputError, BenchRun
from tools.errors import ServerError
from tools.sglang.bench import run_bench

KEY = "sk-shape-" + os.urandom(6).hex() + "/Q+z"
PASSWORD = "pw-" + os.urandom(6).hex() + "%2Fx"  # as a URL carries it: `/` percent-encoded
DB = f"postgresql://app:{PASSWORD}@db.example:5432/app"


def shapes() -> dict[str, str]:
    return {
        "url-encoded": quote(KEY, safe=""),
        "url-encoded, lower-case hex": quote(KEY, safe="").lower(),
        "upper-cased": KEY.upper(),
        "base64": base64.b64encode(KEY.encode()).decode(),
        "the URL password decoded": PASSWORD.replace("%2F", "/"),
        "the URL password upper-cased": PASSWORD.upper(),
    }


def leaked(text: str) -> list[str]:
    """Which forms of a secret `text` still holds."""
    forms = {"verbatim key": KEY, "verbatim password": PASSWORD, **shapes()}
    return [name for name, form in forms.items() if form in text]


@pytest.fixture
def env(monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("MY_SERVICE_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_URL", DB)
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    said = tmp_path / "said.txt"
    said.write_text("\n".join(f"{name}: {form}" for name, form in shapes().items()) + "\n")
    return said


def test_a_server_gets_no_url_password_and_its_log_and_error_line_mask_every_shape(
    tmp_path: Path, env: Path
) -> None:
    dump = tmp_path / "env.txt"
    args = launch_args(tmp_path, ["bash", "-c", f"env > {dump}; cat {env}; echo fatal >&2; exit 1"])
    with pytest.raises(ServerError) as err:
        server.launch(args)
    seen = dump.read_text()
    assert "DATABASE_URL" not in seen and "MY_SERVICE_API_KEY" not in seen and not leaked(seen), seen
    stored = secrets.redact(str(err.value))  # the error line as the session stores it
    log = args.log_path.read_text()
    assert "upper-cased: ***" in log  # the child's text is there, its secret masked
    assert not leaked(log), (leaked(log), log)
    assert not leaked(stored) and not leaked(secrets.outside(str(err.value))), stored


def test_a_server_still_gets_a_url_it_is_given_by_name(tmp_path: Path, env: Path) -> None:
    dump = tmp_path / "env.txt"
    args = launch_args(
        tmp_path,
        ["bash", "-c", f"env > {dump}; exec {{python}} -m http.server {{port}} --bind 127.0.0.1"],
        pass_env=["DATABASE_URL"],
    )
    handle = server.launch(args)
    server.stop(ServerArgs(server=handle, grace_s=5))
    assert f"DATABASE_URL={DB}" in dump.read_text()  # named in launch.pass_env: the user's choice


def test_a_benchmark_client_gets_no_url_password_and_its_kept_log_masks_every_shape(
    tmp_path: Path, env: Path
) -> None:
    seen = tmp_path / "env.txt"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/bash\nenv > {seen}\ncat {env}\necho failed >&2\nexit 1\n")
    fake.chmod(0o755)
    cfg = BenchServingConfig(python=str(fake))
    run = BenchRun(str(fake), "m", cfg, "http://127.0.0.1:9", "m", 2, 4, 1, 0, 1.0, str(tmp_path), "baseline")
    with pytest.raises(BenchOutputError) as err:
        run_bench(run)
    got = seen.read_text()
    assert "DATABASE_URL" not in got and not leaked(got), got
    kept = Path(str(err.value).rsplit("(its whole output: ", 1)[1].removesuffix(" on the host)"))
    text = kept.read_text()
    assert "upper-cased" in text and not leaked(text), (leaked(text), text)
    assert not leaked(secrets.redact(str(err.value)))


def test_the_forms_are_masked_in_checkpoint_bytes_with_lengths_kept(env: Path) -> None:
    for name, form in shapes().items():
        data = f'{{"error": "x {form} y"}}'.encode()
        clean = secrets.redact_bytes(data)
        assert len(clean) == len(data) and form.encode() not in clean, name
