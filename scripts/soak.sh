#!/usr/bin/env bash
# Hardening drill: 256 concurrent misbehaving streams for 10 minutes against a real mnemo-server
# on loopback (cancels, short deadlines, dropped connections, killed clients; sessions and
# one-shot calls mixed), checking status codes, RSS growth, the server log and a clean exit.
# Thin wrapper over scripts/soak.py (its docstring says what runs and what passes); arguments
# go to it, e.g.
#   scripts/soak.sh --json docs/results/hardening_soak.json
#   scripts/soak.sh --streams 64 --seconds 60 --server-arg=--max_running=32
#   scripts/soak.sh --target 127.0.0.1:50051 --metrics 127.0.0.1:9090
# Needs build/server/mnemo-server (scripts/build.sh mnemo-server) unless --target is given.
# Exit status: 0 PASS, 1 FAIL, 2 usage.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Debian's python3 (its python3-grpcio), not whatever python3 is first on PATH.
exec /usr/bin/python3 "$root/scripts/soak.py" "$@"
