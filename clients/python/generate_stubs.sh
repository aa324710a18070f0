#!/usr/bin/env bash
# Generates the Python messages and gRPC stubs that mnemo_client imports, into
# clients/python/mnemo_client/_generated/ (gitignored). Uses Debian's protoc and
# grpc_python_plugin (python3-grpc-tools rejects proto3 `optional`, so it is not used).
# Cheap and idempotent: regenerates only when a .proto is newer than the output or has none
# (every proto/mnemo/v1/*.proto is compiled: generation, sessions, models, datastores).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/mnemo_client/_generated"
grpc_protos=/usr/share/grpc-proto
plugin=/usr/bin/grpc_python_plugin

for tool in protoc "$plugin"; do
  command -v "$tool" >/dev/null || { echo "generate_stubs: $tool not found (run scripts/setup.sh)" >&2; exit 1; }
done

protos=("$root"/proto/mnemo/v1/*.proto)
stamp="$out/.stamp"
if [ -f "$stamp" ]; then
  newer=$(find "${protos[@]}" "$0" -newer "$stamp" | head -n1)
  # A .proto added with an old mtime (a merge, a copied tree) is caught by its missing output.
  for proto in "${protos[@]}"; do
    name="$(basename "$proto" .proto)"
    [ -f "$out/mnemo/v1/${name}_pb2.py" ] && [ -f "$out/mnemo/v1/${name}_pb2_grpc.py" ] ||
      newer="$proto"
  done
  [ -z "$newer" ] && exit 0
fi

rm -rf "$out"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# grpc.health.v1 and grpc.reflection.v1alpha keep their proto packages (so the wire names are
# the standard ones) but get module paths that cannot shadow grpcio's own `grpc` package.
mkdir -p "$tmp/mnemo_grpc_std"
cp "$grpc_protos/grpc/health/v1/health.proto" "$tmp/mnemo_grpc_std/health.proto"
cp "$grpc_protos/grpc/reflection/v1alpha/reflection.proto" "$tmp/mnemo_grpc_std/reflection.proto"

protoc --proto_path="$root/proto" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$plugin" "${protos[@]}"
protoc --proto_path="$tmp" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$plugin" "$tmp"/mnemo_grpc_std/*.proto

# Make the generated folders importable packages.
touch "$out/mnemo/__init__.py" "$out/mnemo/v1/__init__.py" "$out/mnemo_grpc_std/__init__.py"
touch "$stamp"
echo "generate_stubs: wrote $out"
