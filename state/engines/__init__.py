"""Where and what perfloop runs: an SSH host (`ssh`), processes and server handles (`process`), what a
server says about request length (`limits`), the git workspace of a checkout (`workspace`), and
what it knows of SGLang (`sglang`) and vLLM (`vllm`) beyond any engine's.

Imports only `state.base`. Imported by every other part of `state` but `measurement` and
`proposers`, and by tools/, agent/ and playbooks/."""
