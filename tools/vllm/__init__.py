"""The real vLLM engine as a target (`kind = "vllm"`): its own venv, tiny models, a source checkout.

- `models.py`: tiny Llama and DeepSeek-V2-style MLA model directories, no download (standalone).
- `checkout.py`: the installed `vllm` package's source made a git repo the server imports
  (standalone, so `make vllm` runs it with any python).
- `target.py`: a target directory for tests and users: a clone of that repo and its TOML.
- `trace.py`: vLLM's step markers and phase scopes in a torch.profiler trace.
"""
