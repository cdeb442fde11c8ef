"""--tp-size 2 on the CPU: two real processes joined by gloo, rank 0 serving HTTP."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from tests.target.conftest import SMALL, TARGET, Server, free_port, launch, wait_healthy

PROMPT = "Tensor parallel decode, rank by rank"


def scores(server) -> list[float]:
    """Echo log-probabilities of PROMPT (one prefill)."""
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1}
    status, out = server.post("/v1/completions", body)
    assert status == 200, out
    return out["choices"][0]["logprobs"]["token_logprobs"][1:]


def generate(server, text: str, n: int = 12) -> str:
    status, out = server.post(
        "/generate", {"text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0}}
    )
    assert status == 200, out
    return out["text"]


def group_alive(pgid: int) -> list[str]:
    return subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()


def test_tp2_shards_sum_to_tp1_profiles_every_rank_and_dies_with_rank0(start_server, tmp_path):
    tp1, tp2 = start_server(*SMALL), start_server(*SMALL, "--tp-size", "2")
    assert tp2.get("/get_server_info")[1]["tp_size"] == 2
    assert len(group_alive(tp2.proc.pid)) == 2  # rank 1 is rank 0's child, in its process group
    # The shards add up to the whole model: log-probabilities as TP1's up to BF16 rounding of the
    # partial sums (wrong shards give unrelated numbers); greedy output deterministic at TP2.
    one, two = scores(tp1), scores(tp2)
    assert max(abs(a - b) for a, b in zip(one, two, strict=True)) < 0.25
    assert generate(tp2, "same twice") == generate(tp2, "same twice")

    status, _ = tp2.post("/start_profile", {"output_dir": str(tmp_path), "num_steps": 3, "profile_id": "p"})
    assert status == 200
    generate(tp2, "profile both ranks", 6)
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("p-TP-*.trace.json.gz"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    for rank in (0, 1):
        with gzip.open(tmp_path / f"p-TP-{rank}.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        reduces = Counter(
            str(e["args"]["Input Dims"]) for e in events if e.get("name") == "gloo:all_reduce"
        )  # two per layer per step: 2 layers x 3 decode steps of 4 padded rows (hidden 64), in float32
        assert reduces["[[4, 64]]"] == 2 * 2 * 3, reduces
        types = {e["args"]["Input type"][0] for e in events if e.get("name") == "gloo:all_reduce"}
        assert types == {"float"}

    os.kill(tp2.proc.pid, signal.SIGKILL)  # rank 0 dies without a word: rank 1 follows
    tp2.proc.wait()
    deadline = time.monotonic() + 10
    while group_alive(tp2.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group_alive(tp2.proc.pid) == []


def test_sigterm_to_the_group_stops_every_rank(tmp_path):
    port = free_port()
    log = tmp_path / "log"
    server = Server(launch(TARGET, ["--port", str(port), *SMALL, "--tp-size", "2"], log), port, log)
    wait_healthy(server)
    os.killpg(server.proc.pid, signal.SIGTERM)
    assert server.proc.wait(timeout=20) == 0
    deadline = time.monotonic() + 10
    while group_alive(server.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group_alive(server.proc.pid) == []


def test_tp_size_must_divide_heads_and_ffn():
    cmd = [sys.executable, "-m", "mla_server.server", "--port", str(free_port()), *SMALL, "--tp-size", "3"]
    proc = subprocess.run(cmd, cwd=TARGET, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "mla_server: error: --tp-size 3 does not divide --heads 2"
