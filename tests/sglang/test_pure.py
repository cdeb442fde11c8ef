"""Pure SGLang helpers: patch choice and rebasing, misfit messages, /start_profile bodies, trace
ranks, bench_serving JSONL (lines in the exact shape bench_serving 0.5.9/0.5.23 write), the example config."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.serving import bench_serving_use
from playbooks.patches import NoPatch, choose_patch, rebase_diff, release_key
from playbooks.schema import Playbook
from state.config.target import BenchServingConfig
from state.engines.sglang import SglangLayout
from state.measurement.workload import WorkloadConfig
from tools.client.stats import summarize
from tools.engines.benchrun import BenchOutputError, BenchRun
from tools.engines.records import records_from_jsonl
from tools.errors import ConfigError, PatchError, TraceError
from tools.sglang.bench import bench_module, bench_serving_argv
from tools.sglang.layout import parse_version
from tools.sglang.patches import does_not_fit, hunk_number
from tools.sglang.server import rank_traces, start_profile_body

ROOT = Path(__file__).resolve().parents[2]
PATCHES = {"mla_server": "a", "sglang": "new", "sglang@0.5.22": "new", "sglang@0.5.8": "old"}
DIFF = (
    "diff --git a/python/sglang/x.py b/python/sglang/x.py\n--- a/python/sglang/x.py\n+++ b/python/sglang/x.py\n"
    "@@ -5,3 +5,4 @@ class A:\n a\n+b\n c\n d\n@@ -40,2 +41,3 @@ def f():\n e\n+f\n g\n"
)


@pytest.mark.parametrize(
    "version, key",
    [
        ((0, 5, 8), "sglang@0.5.8"),
        ((0, 5, 14), "sglang@0.5.8"),
        ((0, 5, 22), "sglang@0.5.22"),
        ((0, 6, 0), "sglang@0.5.22"),
    ],
)
def test_patch_key_is_the_newest_not_above_the_release(version, key):
    assert release_key(PATCHES, version) == key


def test_release_older_than_every_patch_is_refused():
    with pytest.raises(ConfigError, match=r"no sglang patch for 0\.4\.9 \(the oldest starts at 0\.5\.8\)"):
        release_key(PATCHES, (0, 4, 9))


def test_versions_parse_from_release_strings():
    assert parse_version("0.5.15.post1") == (0, 5, 15) and parse_version("v0.5.9") == (0, 5, 9)
    with pytest.raises(ConfigError, match=r"^cannot read an X\.Y\.Z release from sglang version 'dev'$"):
        parse_version("dev")


def test_rebase_moves_only_header_paths():
    rebased = rebase_diff(DIFF, "sglang")
    assert rebased.splitlines()[:3] == [
        "diff --git a/sglang/x.py b/sglang/x.py",
        "--- a/sglang/x.py",
        "+++ b/sglang/x.py",
    ]
    assert rebased.count("python/") == 0 and rebase_diff(DIFF, "python/sglang") == DIFF


def test_misfit_names_the_hunk_from_gits_line():
    assert hunk_number(DIFF, "python/sglang/x.py", 40) == 2
    err = PatchError("patch does not apply: python/sglang/x.py:40 (git apply --check); regenerate the diff")
    assert (
        str(does_not_fit("0.5.14", DIFF, err))
        == "playbook does not fit sglang 0.5.14: hunk 2 failed at python/sglang/x.py:40"
    )


def test_start_profile_body_sends_start_step_only_where_supported(tmp_path):
    body = start_profile_body(tmp_path, "p1", 30, (0, 5, 23), start_step=20)
    assert body == {
        "output_dir": str(tmp_path),
        "num_steps": 30,
        "activities": ["CPU", "GPU"],
        "profile_id": "p1",
        "record_shapes": True,
        "start_step": 20,
    }
    assert "start_step" not in start_profile_body(tmp_path, "p1", 30, (0, 4, 9), start_step=20)


def test_per_rank_traces_are_collected_and_missing_ranks_named(tmp_path):
    for name in ("p1-TP-0.trace.json.gz", "p1-TP-1-DP-1.trace.json.gz", "p2-TP-1.trace.json.gz"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(TraceError, match=r"TP rank\(s\) \[1\]"):
        rank_traces(tmp_path, "p1", 2)
    (tmp_path / "p1-TP-1.trace.json.gz").write_bytes(b"")
    assert {r: p.name for r, p in rank_traces(tmp_path, "p1", 2).items()} == {
        0: "p1-TP-0.trace.json.gz",
        1: "p1-TP-1.trace.json.gz",
    }


def bench_line(**details) -> str:
    """A line as bench_serving writes with --output-details (result | result_details; abridged server_info)."""
    result: dict[str, object] = {
        "tag": None,
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": float("inf"),
        "max_concurrency": 1,
        "sharegpt_output_len": None,
        "random_input_len": 32,
        "random_output_len": 4,
        "random_range_ratio": 1.0,
        "server_info": {"version": "0.5.23"},
        "duration": 2.0,
        "completed": 3,
        "total_input_tokens": 96,
        "total_output_tokens": 12,
        "total_output_tokens_retokenized": 12,
        "request_throughput": 1.5,
        "input_throughput": 48.0,
        "output_throughput": 6.0,
        "total_throughput": 54.0,
        "median_ttft_ms": 20.0,
        "median_tpot_ms": 10.0,
        "p99_itl_ms": 12.0,
    }
    result |= {
        "input_lens": [32, 32, 32],
        "output_lens": [4, 4, 4],
        "ttfts": [0.02, 0.03, 0.02],
        "itls": [[0.01, 0.01, 0.012], [0.01, 0.011, 0.01], [0.01, 0.01, 0.01]],
        "generated_texts": ["a b c d", "e f g h", "a b c d"],
        "errors": ["", "", ""],
    } | details
    return json.dumps(result)


def test_bench_serving_runs_become_a_measurement():
    """Two runs of the same seeded prompts: request i of each run is prompt i."""
    text = bench_line(duration=9.0) + "\n" + bench_line(generated_texts=["a b c d", "e f g h", "x"]) + "\n"
    records, duration = records_from_jsonl(text)
    assert duration == pytest.approx(11.0) and [r.prompt_index for r in records] == [0, 1, 2] * 2
    m = summarize("baseline", "abc", records, 3, duration)
    assert m.ttft_ms.median == pytest.approx(20.0) and m.tpot_ms.n == 6
    assert m.tpot_ms.median == pytest.approx(31 / 3) and m.output_tok_per_s == pytest.approx(24 / 11)
    assert m.outputs == ["a b c d", "e f g h", "a b c d"]
    assert not m.outputs_stable  # prompt 2 gave "a b c d" in one run and "x" in the other


@pytest.mark.parametrize(
    "line, message",
    [
        (bench_line(ttfts=[], itls=[], output_lens=[], generated_texts=[]), "rerun it with --output-details"),
        (bench_line(errors=["", "HTTP 500: boom\ntrace", ""]), "request 1 failed: HTTP 500: boom"),
        (json.dumps({"completed": 1}), "field `duration`"),
        ("{not json", "not JSON"),
        ("", "wrote no result line"),
    ],
)
def test_unusable_bench_output_is_one_line(line, message):
    with pytest.raises(BenchOutputError, match=message) as err:
        records_from_jsonl(line)
    assert "\n" not in str(err.value)


def test_bench_command_is_sequential_seeded_and_detailed():
    cfg = BenchServingConfig(backend="sglang-oai-chat", tokenizer="{repo}/tokenizer", input_len=16, seed=7)
    run = BenchRun("py", bench_module(True), cfg, "http://h:1", "m", 6, 200, 1, 1, 1.0, "/r p", "baseline")
    argv = bench_serving_argv(run, 1, "/o.jsonl")
    assert argv[:3] == ["py", "-m", "sglang.benchmark.serving"] and argv[-3:] == [
        "--output-file",
        "/o.jsonl",
        "--output-details",
    ]
    opts = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("--")}
    assert opts["--max-concurrency"] == "1" and opts["--dataset-name"] == "random-ids"
    assert opts["--backend"] == "sglang-oai-chat" and opts["--tokenizer"] == "/r p/tokenizer"
    assert (
        opts["--num-prompts"],
        opts["--random-input-len"],
        opts["--random-output-len"],
        opts["--seed"],
    ) == ("6", "16", "200", "7")
    assert "--tokenizer" not in bench_serving_argv(
        BenchRun("py", "m", BenchServingConfig(), "u", "m", 1, 2, 1, 0, 1.0, "r", "baseline"), 0, "o"
    )
    assert bench_module(False) == "sglang.bench_serving"


def test_bench_command_under_a_workload_is_one_window_at_its_concurrency():
    w = WorkloadConfig(concurrency=8, requests=16, input_len=[32, 128], output_len=[16, 64])
    run = BenchRun("py", "m", BenchServingConfig(), "u", "m", 16, 2, 1, 0, 1.0, "r", "baseline", w)
    argv = bench_serving_argv(run, 0, "o")
    opts = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("--")}
    assert (opts["--max-concurrency"], opts["--num-prompts"]) == ("8", "16")
    assert (opts["--random-input-len"], opts["--random-output-len"], opts["--random-range-ratio"]) == (
        "128",
        "64",
        "0.25",
    )
    assert opts["--request-rate"] == "inf"  # closed loop: bench_serving's semaphore alone
    at_rate = bench_serving_argv(replace(run, workload=w.model_copy(update={"request_rate": 2.5})), 0, "o")
    assert at_rate[at_rate.index("--request-rate") + 1] == "2.5"


def test_glm5_example_config_loads():
    target = load_target(ROOT / "examples" / "targets" / "sglang-glm5.toml")
    assert target.kind == "sglang" and target.launch.health_path == "/health_generate"
    assert "--tp" in target.launch.argv and target.profile.warmup_steps == 20


@pytest.mark.parametrize(
    "kind, use, expected",
    [
        ("sglang", "auto", "auto"),
        ("mla_server", "auto", "never"),
        ("mla_server", "always", "always"),
        ("sglang", "never", "never"),
    ],
)
def test_bench_serving_auto_means_sglang_targets(kind, use, expected):
    target = load_target(ROOT / "examples" / "targets" / "sglang-glm5.toml")
    target = target.model_copy(
        update={
            "kind": kind,
            "measure": target.measure.model_copy(update={"bench_serving": BenchServingConfig(use=use)}),
        }
    )
    assert bench_serving_use(target) == expected


def test_bench_serving_env_refuses_secrets():
    with pytest.raises(ValueError, match="HF_TOKEN looks like a secret: set it in the host's environment"):
        BenchServingConfig(env={"HF_TOKEN": "hf_abc"})
    assert BenchServingConfig(env={"HF_HUB_OFFLINE": "1"}).env == {"HF_HUB_OFFLINE": "1"}


def test_choose_patch_by_kind_then_by_release_rebased_onto_the_layout(tmp_path):
    for name in ("a", "new", "old"):
        (tmp_path / name).write_text(DIFF.replace("+b", f"+{name}"))
    book = Playbook.model_validate(
        {
            "id": "p",
            "title": "t",
            "confidence": 0.5,
            "explanation": "e",
            "evidence_note": "n",
            "signature": {"op_names": ["^x$"]},
            "gain": {"kind": "cast_fraction"},
            "patches": PATCHES,
            "source_dir": str(tmp_path),
        }
    )
    installed = SglangLayout(kind="site-packages", package_dir="sglang", version="0.5.14")
    assert choose_patch(book, "mla_server") == ("mla_server", (tmp_path / "a").read_text())
    assert choose_patch(book, "sglang") == ("sglang", (tmp_path / "new").read_text())  # release unknown
    key, diff = choose_patch(book, "sglang", installed)
    assert key == "sglang@0.5.8" and diff == rebase_diff((tmp_path / "old").read_text(), "sglang")
    with pytest.raises(NoPatch, match=r"^playbook p: no sglang patch for 0\.4\.9") as err:
        choose_patch(book, "sglang", installed.model_copy(update={"version": "0.4.9"}))
    assert err.value.reason.startswith("no sglang patch for 0.4.9")
    with pytest.raises(NoPatch, match="^playbook p: no patch for kind demo$"):
        choose_patch(book, "demo")
    (tmp_path / "old").unlink()
    with pytest.raises(ConfigError, match="patch for 'sglang@0.5.8' at .* cannot be read"):
        choose_patch(book, "sglang", installed)
