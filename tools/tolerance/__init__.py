"""Scoring texts for the output gate's tolerance policy (`[correctness] policy = "tolerance"`):
`score` (the `bench.score` tool, teacher forcing through text completions)."""
