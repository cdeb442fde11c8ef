"""Fixtures that start the real MLA demo server (launch.sh) as a subprocess."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "examples" / "targets" / "mla_server"
FIX_DIFF = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches" / "mla_server.diff"
# A tiny model for tests that do not need the CPU preset's size.
SMALL = [
    "--pool-slots",
    "2048",
    "--layers",
    "2",
    "--heads",
    "2",
    "--hidden",
    "64",
    "--experts",
    "2",
    "--ffn",
    "64",
    "--max-running",
    "4",
]


def free_port() -> int:
    """A TCP port that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running server process (its own process group) and where to reach it."""

    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        """An openai client for this server (imported here: GPU hosts may lack openai)."""
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=120)

    def post(self, path: str, body, timeout: float = 120) -> tuple[int, dict]:
        """POST a JSON value (or raw bytes); return (status, decoded body)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def get(self, path: str) -> tuple[int, dict]:
        """GET; return (status, decoded body)."""
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            return resp.status, json.loads(resp.read())

    def stop(self) -> None:
        """SIGTERM the process group; SIGKILL if it does not exit in time."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass


def launch(target: Path, args: list[str], log_path: Path) -> subprocess.Popen:
    """Run `bash launch.sh ARGS` in its own process group, output to log_path."""
    env = {**os.environ, "PYTHON": sys.executable}
    with open(log_path, "w") as log:
        return subprocess.Popen(
            ["bash", str(target / "launch.sh"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_healthy(server: Server, timeout_s: float = 60) -> None:
    """Poll /health until it answers 200, failing with the log if the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited {server.proc.returncode}:\n{server.log_path.read_text()}")
        try:
            if server.get("/health")[0] == 200:
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"server not healthy in {timeout_s} s:\n{server.log_path.read_text()}")


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Factory: start_server(*flags, target=TARGET) -> healthy Server, stopped at session end."""
    servers = []

    def start(*flags: str, target: Path = TARGET) -> Server:
        port = free_port()
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        server = Server(launch(target, ["--port", str(port), *flags], log_path), port, log_path)
        servers.append(server)
        wait_healthy(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def small_server(start_server) -> Server:
    """One shared tiny server for API and error tests."""
    return start_server(*SMALL)


def chat(client, prompt: str, max_tokens: int = 8, **kw):
    """A greedy chat completion (non-streamed unless stream=True)."""
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(
        model="mla-demo", max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}], **kw
    )
