// A static initializer for binaries whose main() we do not own (GoogleTest's): applies
// util::ConfigureCpuRuntime with the process's own command line.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/util/cpu_backend.h"

namespace {

const bool kFastBlas = [] {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  mnemo::util::ConfigureCpuRuntime(argv.data());
  return true;
}();

}  // namespace
