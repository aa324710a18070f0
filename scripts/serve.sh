#!/usr/bin/env bash
# Installs, builds and serves a model on localhost:
#   gRPC on 127.0.0.1:50051, Prometheus metrics on http://127.0.0.1:9090/metrics.
#
#   scripts/serve.sh [mnemo-server flags...]     e.g. --listen 0.0.0.0:50051 --threads 2
#   scripts/serve.sh --model /path/to/Mistral-7B-Instruct-v0.3 [flags...]
#
# Serves the model directory given with --model (a mnemo model, or a Hugging Face folder:
# Llama, Mistral, Qwen2, GPT-2; README "Serve a Hugging Face model"), else the one in
# MNEMO_MODEL, else the bundled model models/mnemo-stdlib (trained by scripts/train_model.sh;
# see its README.md). If the bundled model is missing it creates a randomly initialised model
# in build/models/random and says so loudly: the server works end to end, but its output is
# gibberish by design. A --model that does not exist is an error.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"

bash "$root/scripts/build.sh" mnemo-server mnemo-model mnemo-cli

# --model DIR / --model=DIR among the arguments: serve that folder, nothing else.
explicit=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) explicit="${2:?serve: --model needs a directory}"; shift 2 ;;
    --model=*) explicit="${1#--model=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]+"${args[@]}"}"
if [ -n "$explicit" ] && [ ! -f "$explicit/config.json" ]; then
  echo "serve: --model $explicit: no config.json there (a mnemo model directory or a Hugging Face folder is needed)" >&2
  exit 1
fi

wanted="${explicit:-${MNEMO_MODEL:-$root/models/mnemo-stdlib}}"
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
