# Sourced by the GPU scripts (benchmarks/*_h200.sh) on a bare H200 machine: git from the Debian
# packages in .gitdeb/ when the machine has none, perfloop's pure-Python dependencies from the
# cp312 wheels in .whl/ (installed on every call: a warm machine may hold a /tmp/site from an older
# .whl/), and `perfloop` as a shell function. Each script sets its own PERFLOOP_HOME.
if ! command -v git >/dev/null; then
  for f in .gitdeb/*.deb; do dpkg -x "$f" /tmp/gitroot; done
  export PATH=/tmp/gitroot/usr/bin:$PATH GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
perfloop() { python3 -c "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()" "$@"; }
