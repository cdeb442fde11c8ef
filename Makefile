# Every target sets itself up on a fresh machine: `make demo` and `make test` need nothing else.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint format gpu-test venv system-deps clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch 2.13.0 CPU lies on this kind of machine's disk; pin it so no CUDA build is downloaded.
	$(PY) -m pip install -q "torch==2.13.0" || $(PY) -m pip install -q "torch>=2.4,<=2.14.1"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

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

demo: $(STAMP)
	$(VENV)/bin/perfloop demo

# Lint, format and types first: they take seconds, the tests take minutes.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy tests

# Rewrites files: the formatter, then the linter's safe fixes.
format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint system-deps
	$(PY) -m pytest -q -ra --durations=30 -n 2 --dist loadfile tests

test-fast: lint system-deps
	$(PY) -m pytest -q tests -m "not e2e"

gpu-test: $(STAMP)
	$(PY) -m pytest -q -m gpu tests

clean:
	rm -rf $(VENV) build *.egg-info
