"""The benchmark client's parts (tools/bench.py holds its door tools): streamed chat completions over
HTTP (`stream`), their statistics (`stats`), and serving-workload windows (`windows`). Imports `state`
and the tools' own helpers only."""
