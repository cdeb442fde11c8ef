"""SGLang-specific values: where the package lies in a checkout, and bench_serving results."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from state.base import Model


class SglangLayout(Model):
    """Where the `sglang` package lies in a target repo, and which release it is."""

    kind: Literal["checkout", "site-packages"]
    """`checkout`: upstream layout `python/sglang/srt/...`; `site-packages`: an installed `sglang/`."""
    package_dir: str
    """Repo-relative folder of the `sglang` package, e.g. `python/sglang` or `sglang`."""
    version: str
    """Release, e.g. `0.5.23` (from `_version.py`, `pyproject.toml` or the dist-info)."""

    def rel(self, inside: str) -> str:
        """Repo-relative path of a file given relative to the package, e.g. `srt/server_args.py`."""
        return f"{self.package_dir}/{inside}"


class HookSite(Model):
    """The method perfloop's profiler instrumentation wraps: one eager decode step per call."""

    relpath: str
    """Repo-relative file holding the class."""
    class_name: str
    """Top-level class, e.g. `ModelRunner` or `EagerRunner`."""
    method: str
    """Method called once per eager decode step, e.g. `forward_decode`."""


class BenchServingRecord(Model):
    """One JSONL line of `python -m sglang.bench_serving --output-file F` (the fields perfloop reads)."""

    backend: str = ""
    """Backend the benchmark ran against, e.g. `sglang` or `sglang-oai-chat`."""
    completed: int = Field(ge=0)
    """Requests that finished successfully."""
    duration: float = Field(gt=0)
    """Wall time of the whole run, seconds."""
    total_output_tokens: int = Field(ge=0)
    """Output tokens over all completed requests."""
    output_throughput: float = Field(ge=0)
    """Output tokens per second over the run."""
    median_ttft_ms: float
    """Median time to first token."""
    median_tpot_ms: float
    """Median per-request time per output token (after the first)."""
    ttfts: list[float] = Field(default_factory=list)
    """Per-request TTFT, seconds (written with `--output-details`)."""
    itls: list[list[float]] = Field(default_factory=list)
    """Per-request inter-token latencies, seconds (written with `--output-details`)."""
    generated_texts: list[str] = Field(default_factory=list)
    """Per-request generated text (written with `--output-details`)."""
    output_lens: list[int] = Field(default_factory=list)
    """Per-request output token counts (written with `--output-details`)."""
    errors: list[str | None] = Field(default_factory=list)
    """Per-request error text, empty for a success (written with `--output-details`)."""


class EquivalenceArgs(Model):
    """A patch for the equivalence harness: applied to a scratch copy of the files it touches."""

    repo: Path
    """The SGLang checkout (left untouched)."""
    diff: str
    """The patch (unified diff)."""
    backend: str
    """Repo-relative path of the FlashInfer MLA backend the harness runs, before and after."""


class EquivalenceResult(Model):
    """What the equivalence harness found (tools/sglang/equivalence.py, run on CPU)."""

    applied: bool
    """`git apply` took the patch."""
    identical: bool | None = None
    """Decode outputs bit-identical to the unpatched backend's on every batch; None when not run."""
    active_rows_only: bool | None = None
    """The patched decode reads only the batch's KV rows (the fix's mechanism); None when not run."""
    line: str
    """One line: what happened."""
