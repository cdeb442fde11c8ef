"""Read torch.profiler output: Chrome traces (`export_chrome_trace`) and key_averages tables.

`read_chrome_trace` and `read_profiles` (files and directories: one trace per rank, or key_averages
`.txt` tables, merged) are the entry points; the work is in four rooms, imports running down:
- `read`: a file's bytes to compact columns in bounded memory (`stream`, `split`, `collect`,
  `heap`), and key_averages tables (`table`);
- `analyses`: one trace's columns to its summary (`summary` runs `tree`, `host`, `walk`,
  `windows`, `device`, `bounds`, `checks`);
- `ranks`: every core at work (`parallel`: a process per rank file, or byte ranges of one large
  plain file, their columns handed back through a memfd by `handoff`) and the ranks merged
  (`merge`, `collectives`);
- `compare`: a summary set against another (`diff`) or the host's copy bandwidth (`bandwidth`).
This package imports `read` and `ranks`; it is imported by the CLI, `tools.profiling` and the
benchmarks. The rooms' import rules are under test (tests/unit/test_corridor_rooms.py).
"""

from collections.abc import Sequence
from pathlib import Path

from state.profiling.profile import ProfileSummary
from tools.errors import TraceError
from tools.trace.ranks.merge import merge_summaries
from tools.trace.ranks.parallel import read_trace, read_traces, workers
from tools.trace.read.table import read_key_averages_table, read_table_file

__all__ = ["read_chrome_trace", "read_key_averages_table", "read_profiles", "read_ranks", "trace_files"]


def read_chrome_trace(
    path: str | Path, steps: int | None = None, *, jobs: int | None = None
) -> ProfileSummary:
    """Summarize a `.json` or `.json.gz` Chrome trace; `steps` overrides the counted decode steps;
    `jobs` processes (default: every core, `tools.trace.ranks.parallel.workers`) read a large plain file.

    Steps are the trace's markers, else inferred from its repeating work (`tools.trace.analyses.windows`).
    TraceError when the trace cannot describe decode: no events, or a GPU trace without kernels
    (`tools.trace.analyses.checks`)."""
    return read_trace(Path(path), steps, jobs or workers())


def trace_files(paths: Sequence[str | Path]) -> list[Path]:
    """The given files, with each directory replaced by its `*.json` and `*.json.gz` traces in name
    order (key_averages tables are read only when named); TraceError if a path does not exist or a
    directory holds no trace."""
    out: list[Path] = []
    for raw in map(Path, paths):
        if raw.is_dir():
            found = sorted(p for p in raw.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
            if not found:
                raise TraceError(f"{raw}: directory holds no .json or .json.gz trace; pass trace files")
            out += found
        elif raw.exists():
            out.append(raw)
        else:
            raise TraceError(f"{raw}: cannot read the trace (no such file or directory); check the path")
    return out


def read_profiles(
    paths: Sequence[str | Path],
    steps: int | None = None,
    *,
    jobs: int | None = None,
) -> ProfileSummary:
    """Read traces or key_averages tables (files or directories, e.g. one trace per TP rank) and
    merge them into one summary (each rank's step bounds kept in `ranks`); `jobs` processes read
    the traces (one per file, or byte ranges of one large file)."""
    return merge_summaries(read_ranks(paths, steps, jobs=jobs))


def read_ranks(
    paths: Sequence[str | Path],
    steps: int | None = None,
    *,
    jobs: int | None = None,
) -> list[ProfileSummary]:
    """Each file's own summary, in `trace_files` order (one per rank): `merge_summaries` of them is
    `read_profiles`. Rank files are read `jobs` at a time, each by one process in bounded memory."""
    files = trace_files(paths)
    traces = [p for p in files if not p.name.endswith((".txt", ".txt.gz"))]
    read = iter(read_traces(traces, steps, jobs or workers()))
    return [read_table_file(p) if p.name.endswith((".txt", ".txt.gz")) else next(read) for p in files]
