#!/usr/bin/env bash
# Installs every build and runtime dependency of mnemo from Debian 12 packages.
# Idempotent: when everything is present it returns in about a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  # gRPC / protobuf
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc grpc-proto
  # LibTorch (CPU) and a fast BLAS
  libtorch-dev libopenblas0-openmp libopenblas-openmp-dev
  # Libraries
  libabsl-dev libfaiss-dev nlohmann-json3-dev libre2-dev libgtest-dev libgmock-dev
  libsentencepiece-dev prometheus-cpp-dev civetweb libomp-dev
  # Tokenizers of Hugging Face folders: split regexes with lookahead (PCRE2), NFC (ICU)
  libpcre2-dev libicu-dev
  # Python client and end-to-end tests (system python3)
  python3 python3-grpcio python3-numpy python3-protobuf
  # deploy/ checks (YAML) and the replica drill (nginx as the gRPC router)
  python3-yaml nginx-light
  # TLS and API keys (OpenSSL's SHA-256; openssl makes the tests' certificates)
  libssl-dev openssl
  # Fuzz targets (scripts/fuzz.sh): clang, lld, libFuzzer and the sanitizer runtimes
  clang lld libclang-rt-14-dev
  # Tools used by tests and docs
  prometheus curl gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
