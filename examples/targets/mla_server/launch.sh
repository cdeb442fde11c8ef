#!/usr/bin/env bash
# Start the MLA demo server in the foreground (the launched pid is the server).
# Usage: launch.sh --port N [--preset cpu|glm5] [--device cpu|cuda] [--pool-slots N] ...
cd "$(dirname "$0")" || exit 1
exec "${PYTHON:-python3}" -m mla_server.server "$@"
