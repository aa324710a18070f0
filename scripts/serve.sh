#!/usr/bin/env bash
# Installs, builds and serves a model on localhost:
#   gRPC on 127.0.0.1:50051, Prometheus metrics on http://127.0.0.1:9090/metrics.
#
#   scripts/serve.sh [mnemo-server flags...]     e.g. --listen 0.0.0.0:50051 --threads 2
#
# Serves the bundled model models/mnemo-stdlib (trained by scripts/train_model.sh; see its
# README.md), or the model directory in MNEMO_MODEL. If neither exists it creates a randomly
# initialised model in build/models/random and says so loudly: the server works end to end,
# but its output is gibberish by design.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"

bash "$root/scripts/build.sh" mnemo-server mnemo-model mnemo-cli

wanted="${MNEMO_MODEL:-$root/models/mnemo-stdlib}"
model="$wanted"
if [ ! -f "$model/config.json" ]; then
  model="$build_dir/models/random"
  if [ ! -f "$model/config.json" ]; then
    "$build_dir/tools/mnemo-model" init --out "$model" --seed 1
  fi
  cat >&2 <<MSG

  ************************************************************************************
  *  No model at $wanted: serving a RANDOMLY INITIALISED model from
  *  $model
  *  Everything works end to end, but the generated text is gibberish by design.    *
  ************************************************************************************

MSG
fi

echo "serve: gRPC on 127.0.0.1:50051, metrics on http://127.0.0.1:9090/metrics${*:+ (flags given: $*)}" >&2
echo "serve: try  $build_dir/clients/cpp/mnemo generate \"Hello\"" >&2
exec "$build_dir/server/mnemo-server" --model "$model" \
  --listen 127.0.0.1:50051 --metrics_listen 127.0.0.1:9090 "$@"
