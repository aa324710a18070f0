#!/usr/bin/env bash
# Checks, without a Docker engine, that the Dockerfile's runtime stage can run mnemo:
#  1. every shared library the given binaries load (ldd, transitively) belongs to a Debian
#     package that `apt-get install --no-install-recommends $(cat deploy/runtime-packages.txt)`
#     installs: one listed there or one of their dependencies, recursively (or it is a file the
#     Dockerfile copies in);
#  2. the Dockerfile really installs that list, builds with scripts/setup.sh + scripts/build.sh,
#     runs as a non-root user, exposes the ports and health-checks with `mnemo health`.
#
#   runtime_deps_test.sh BINARY...      (CTest passes mnemo-server, mnemo and mnemo-model)
set -uo pipefail

root="${MNEMO_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
list="$root/deploy/runtime-packages.txt"
dockerfile="$root/Dockerfile"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

[ $# -gt 0 ] || { echo "usage: $0 BINARY..."; exit 2; }
[ -f "$list" ] || { echo "FAIL: $list missing"; exit 1; }
[ -f "$dockerfile" ] || { echo "FAIL: $dockerfile missing"; exit 1; }

# Packages the runtime stage installs: one per line, '#' comments allowed.
declare -A listed=()
while read -r pkg; do
  [ -n "$pkg" ] && listed["${pkg%%:*}"]=1
done < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list")

# The paths dpkg may know a library by: as ldd printed it, the file a symlink (e.g. an
# alternatives link such as libblas.so.3) finally points to, and their merged-/usr aliases.
candidates_of() {
  local path="$1" real c
  real="$(readlink -f "$path" 2>/dev/null || echo "$path")"
  for c in "$path" "$real"; do
    echo "$c"
    case "$c" in
      /usr/lib/*) echo "${c#/usr}" ;;
      /lib/* | /lib64/*) echo "/usr$c" ;;
    esac
  done
}

# Every library the binaries load, with the binary that first needs it.
declare -A lib_user=()
for binary in "$@"; do
  if [ ! -x "$binary" ]; then
    fail "binary $binary not found"
    continue
  fi
  ldd_out="$(ldd "$binary" 2>&1)" || { fail "ldd $binary: $ldd_out"; continue; }
  if grep -q "not found" <<<"$ldd_out"; then
    fail "$(basename "$binary") has unresolved libraries:"
    grep "not found" <<<"$ldd_out"
  fi
  while read -r lib; do
    [ -n "$lib" ] && [ -z "${lib_user[$lib]:-}" ] && lib_user["$lib"]="$(basename "$binary")"
  done < <(awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$ldd_out" | sort -u)
done

# One dpkg query for every candidate path (one per library is minutes on a busy machine).
declare -A owner=()  # path -> package
mapfile -t all_candidates < <(for lib in "${!lib_user[@]}"; do candidates_of "$lib"; done | sort -u)
if [ ${#all_candidates[@]} -gt 0 ]; then
  while IFS= read -r line; do
    # "libfoo1:amd64: /path" or "libfoo1, libbar1: /path" -> libfoo1
    pkg="${line%%: /*}"
    pkg="${pkg%%,*}"
    owner["/${line#*: /}"]="${pkg%%:*}"
  done < <(dpkg -S "${all_candidates[@]}" 2>/dev/null | grep -v '^diversion')
fi

declare -A needed=()   # package -> first library that needs it
for lib in "${!lib_user[@]}"; do
  pkg=""
  while read -r c; do
    if [ -n "${owner[$c]:-}" ]; then pkg="${owner[$c]}"; break; fi
  done < <(candidates_of "$lib")
  if [ -n "$pkg" ]; then
    [ -n "${needed[$pkg]:-}" ] || needed["$pkg"]="$lib (${lib_user[$lib]})"
  elif grep -q "$(basename "$lib")" "$dockerfile"; then
    echo "note: $lib belongs to no package; the Dockerfile copies it"
  else
    fail "$lib (needed by ${lib_user[$lib]}) belongs to no Debian package and the Dockerfile does not copy it"
  fi
done

# What apt installs for the list: the listed packages and their Depends/Pre-Depends,
# recursively (no Recommends, as the Dockerfile installs with --no-install-recommends).
declare -A installs=()
for pkg in "${!listed[@]}"; do
  installs["$pkg"]=1
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    fail "listed package $pkg is not installed here, so its dependencies cannot be checked"
done
while read -r pkg; do
  installs["${pkg%%:*}"]=1
done < <(apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
           --no-breaks --no-replaces --no-enhances "${!listed[@]}" 2>/dev/null |
         grep -v -e '^ ' -e '^<')

missing=()
for pkg in "${!needed[@]}"; do
  [ -n "${installs[$pkg]:-}" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  for pkg in $(printf '%s\n' "${missing[@]}" | sort); do
    fail "package $pkg is neither in deploy/runtime-packages.txt nor a dependency of one there (provides ${needed[$pkg]})"
  done
fi
extra=()
for pkg in "${!listed[@]}"; do
  [ -n "${needed[$pkg]:-}" ] || extra+=("$pkg")
done
[ ${#extra[@]} -eq 0 ] || echo "note: listed but no binary loads a library of: $(printf '%s\n' "${extra[@]}" | sort | tr '\n' ' ')"

# The Dockerfile must use what this test checked.
check_dockerfile() {
  local pattern="$1" what="$2"
  grep -Eq "$pattern" "$dockerfile" || fail "Dockerfile: $what (no match for /$pattern/)"
}
check_dockerfile '^FROM debian:12(\.[0-9]+)?(-slim)? +AS +builder' "builder stage on debian:12"
check_dockerfile 'scripts/setup\.sh' "builder runs scripts/setup.sh"
check_dockerfile 'scripts/build\.sh' "builder runs scripts/build.sh"
check_dockerfile 'deploy/runtime-packages\.txt' "runtime stage reads deploy/runtime-packages.txt"
check_dockerfile 'apt-get install.*runtime-packages|runtime-packages.*apt-get install' "runtime stage installs the packages of runtime-packages.txt"
check_dockerfile '^USER +[^0r]' "runtime stage runs as a non-root user"
check_dockerfile '^EXPOSE +50051 +9090' "EXPOSE 50051 9090"
check_dockerfile '^HEALTHCHECK .*mnemo.*health' "HEALTHCHECK with mnemo health"
check_dockerfile '^ENTRYPOINT .*mnemo-server' "ENTRYPOINT mnemo-server"
[ "$(grep -Ec '^FROM ' "$dockerfile")" -ge 2 ] || fail "Dockerfile is not multi-stage"
for binary in "$@"; do
  name="$(basename "$binary")"
  grep -q "$name" "$dockerfile" || fail "Dockerfile does not copy $name into the runtime stage"
done

echo "runtime_deps: ${#needed[@]} packages loaded by $# binaries; ${#listed[@]} listed, ${#installs[@]} with dependencies"
if [ "$failures" -gt 0 ]; then
  echo "runtime_deps: FAILED ($failures problems)"
  exit 1
fi
echo "runtime_deps: OK"
