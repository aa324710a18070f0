#!/usr/bin/env bash
# Rehearses the Dockerfile's runtime stage without a Docker engine: a minimal Debian 12 root
# (debootstrap), the packages of deploy/runtime-packages.txt installed the way the Dockerfile
# installs them, the stripped binaries and a random model copied in, then mnemo-server started
# as the non-root uid 10001 and checked with `mnemo health` and a short `mnemo generate`.
#
#   sudo scripts/runtime_stage_check.sh [ROOTFS]     (default /tmp/mnemo-runtime-rootfs)
#
# Needs root and Debian's mirror (a few minutes the first time; an existing ROOTFS is reused).
# Not part of scripts/test.sh: tests/integration/runtime_deps_test.sh is the offline check.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${MNEMO_BUILD_DIR:-$root/build}"
rootfs="${1:-/tmp/mnemo-runtime-rootfs}"
port=50151
[ "$(id -u)" -eq 0 ] || { echo "runtime_stage_check: run as root" >&2; exit 2; }

for bin in server/mnemo-server clients/cpp/mnemo tools/mnemo-model; do
  [ -x "$build_dir/$bin" ] || { echo "runtime_stage_check: build first ($build_dir/$bin)" >&2; exit 2; }
done
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap

if [ ! -x "$rootfs/bin/bash" ]; then
  echo "runtime_stage_check: debootstrap bookworm into $rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
fi
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
cp "$root/deploy/runtime-packages.txt" "$rootfs/tmp/runtime-packages.txt"
# The same commands as the Dockerfile's runtime stage.
chroot "$rootfs" /bin/bash -c "export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq \
  && sed -e 's/#.*//' /tmp/runtime-packages.txt | xargs apt-get install -y -qq --no-install-recommends \
  && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
  id mnemo >/dev/null 2>&1 || useradd --uid 10001 --user-group --home-dir /var/lib/mnemo --create-home --shell /usr/sbin/nologin mnemo" >/dev/null

install -m 755 "$build_dir/server/mnemo-server" "$build_dir/clients/cpp/mnemo" \
  "$build_dir/tools/mnemo-model" "$rootfs/usr/local/bin/"
strip --strip-unneeded "$rootfs"/usr/local/bin/mnemo*
mount -t proc proc "$rootfs/proc"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  umount "$rootfs/proc" 2>/dev/null || true
}
trap cleanup EXIT

rm -rf "$rootfs/opt/mnemo/models/default"
chroot "$rootfs" mnemo-model init --out /opt/mnemo/models/default --seed 1 >/dev/null

chroot --userspec=10001:10001 "$rootfs" /usr/local/bin/mnemo-server \
  --model /opt/mnemo/models/default --listen "127.0.0.1:$port" --metrics_listen "" \
  >"$rootfs/tmp/server.log" 2>&1 &
server_pid=$!
mnemo=(chroot --userspec=10001:10001 "$rootfs" /usr/local/bin/mnemo --address "127.0.0.1:$port" --timeout 5s)
for _ in $(seq 60); do
  "${mnemo[@]}" health >/dev/null 2>&1 && break
  sleep 1
done
"${mnemo[@]}" health
"${mnemo[@]}" generate --max_new_tokens 16 --seed 1 "hello" >/dev/null 2>&1
echo "runtime_stage_check: OK (runtime root $(du -sh --exclude=proc --exclude=var/cache "$rootfs" 2>/dev/null | cut -f1), as uid 10001)"
