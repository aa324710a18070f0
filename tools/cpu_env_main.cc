// mnemo-cpu-env: prints, as shell `export` lines, the environment util::ConfigureCpuRuntime gives
// a mnemo process on this machine (the OpenBLAS kernels, OpenMP's wait policy), which it
// otherwise sets by restarting the process once. Processes started with it already set do not
// restart: scripts/test.sh exports it before CTest, which starts ~600 test processes, each of
// whose restarts would run LibTorch's start-up a second time (~0.5 s of CPU).
//
//   eval "$(build/tools/mnemo-cpu-env)"
#include <cstdio>
#include <cstdlib>

#include "engine/util/cpu_backend.h"

int main(int, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);  // restarts this program with the variables set
  for (const char* name : mnemo::util::kCpuRuntimeVariables) {
    if (const char* value = std::getenv(name)) std::printf("export %s=%s\n", name, value);
  }
  return 0;
}
