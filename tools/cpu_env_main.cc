// mnemo-cpu-env: prints, as shell `export` lines, the environment util::ConfigureCpuRuntime gives
// a mnemo process on this machine (the OpenBLAS kernels, OpenMP's wait policy), which it
// otherwise sets by restarting the process once. Processes started with it already set do not
// restart: scripts/test.sh exports it before CTest, which starts ~600 test processes, each of
// whose restarts would run LibTorch's start-up a second time (~0.5 s of CPU).
//
//   eval "$(build/tools/mnemo-cpu-env)"              # what the server and the tools get
//   eval "$(build/tools/mnemo-cpu-env --training)"   # what mnemo-train gets
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/util/cpu_backend.h"

int main(int argc, char** argv) {
  const bool training = argc > 1 && std::strcmp(argv[1], "--training") == 0;
  if (argc > 2 || (argc == 2 && !training)) {
    std::fprintf(stderr, "usage: mnemo-cpu-env [--training]\n");
    return 2;
  }
  // Restarts this program with the variables set.
  mnemo::util::ConfigureCpuRuntime(
      argv, training ? mnemo::util::CpuWorkload::kTraining : mnemo::util::CpuWorkload::kServing);
  for (const char* name : mnemo::util::kCpuRuntimeVariables) {
    if (const char* value = std::getenv(name)) std::printf("export %s=%s\n", name, value);
  }
  return 0;
}
