#!/usr/bin/env bash
# mnemo-cpu-env prints the runtime environment ConfigureCpuRuntime gives each workload: serving
# sleeps OpenMP threads (PASSIVE, no spin), training adds a short spin, and a policy or spin
# count the user set is kept.
set -euo pipefail
cpu_env="$1"
fail=0
check() {  # check NAME WANTED-REGEX UNWANTED-REGEX [VAR=VALUE...] COMMAND [ARGS...] (clean env)
  local name="$1" want="$2" unwanted="$3"; shift 3
  local out
  out=$(env -i PATH=/usr/bin:/bin "$@")
  if ! grep -Eq "$want" <<<"$out"; then
    echo "FAIL $name: no match for '$want' in:"; echo "$out"; fail=1
  elif [[ -n "$unwanted" ]] && grep -Eq "$unwanted" <<<"$out"; then
    echo "FAIL $name: unexpected '$unwanted' in:"; echo "$out"; fail=1
  else
    echo "ok   $name"
  fi
}
check serving '^export OMP_WAIT_POLICY=PASSIVE$' 'GOMP_SPINCOUNT' "$cpu_env"
check training '^export GOMP_SPINCOUNT=1000$' '' "$cpu_env" --training
check training-passive '^export OMP_WAIT_POLICY=PASSIVE$' '' "$cpu_env" --training
check user-policy '^export OMP_WAIT_POLICY=ACTIVE$' 'GOMP_SPINCOUNT' OMP_WAIT_POLICY=ACTIVE "$cpu_env" --training
check user-passive-policy '^export GOMP_SPINCOUNT=1000$' '' OMP_WAIT_POLICY=passive "$cpu_env" --training
check user-spin '^export GOMP_SPINCOUNT=0$' '' GOMP_SPINCOUNT=0 "$cpu_env" --training
if "$cpu_env" --bogus 2>/dev/null; then echo "FAIL bad argument accepted"; fail=1; else echo "ok   bad-argument"; fi
exit "$fail"
