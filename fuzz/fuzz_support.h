// What the fuzz harnesses share: FUZZ_CHECK, their assertion, and a scratch folder for the
// loaders that read files.
//
// A failed FUZZ_CHECK prints the condition and the harness's explanation and aborts; libFuzzer
// reports that as a crash and saves the input, like a sanitizer report. Harnesses check only
// what the code's own headers promise, so a failure is a bug in the code, not in the harness.
//
// Header-only; a harness is single-threaded, and so is everything here.
#ifndef MNEMO_FUZZ_FUZZ_SUPPORT_H_
#define MNEMO_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace mnemo::fuzz {

[[noreturn]] inline void Fail(const char* file, int line, const char* condition,
                              const std::string& why) {
  std::fprintf(stderr, "\n%s:%d: FUZZ_CHECK(%s) failed: %s\n", file, line, condition, why.c_str());
  std::abort();
}

// A folder of its own for this process (under $TMPDIR, else /tmp), made on first use and
// removed at exit. Loaders that take a path read the input from files written here.
inline const std::string& ScratchDir() {
  static const std::string* const dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/mnemo-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      Fail(__FILE__, __LINE__, "mkdtemp", "cannot make a scratch folder under " + pattern);
    }
    std::atexit([] { std::filesystem::remove_all(*dir); });
    return new std::string(pattern);
  }();
  return *dir;
}

// MNEMO_FUZZ_VERBOSE=1 in the environment: harnesses say how far each input got (Note), to
// check that seeds reach what they are meant to.
inline bool Verbose() {
  static const bool verbose = [] {
    const char* value = std::getenv("MNEMO_FUZZ_VERBOSE");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return verbose;
}

inline void Note(const std::string& what) {
  if (Verbose()) std::fprintf(stderr, "fuzz: %s\n", what.c_str());
}

// Replaces `path` with `bytes`. The old file is unlinked rather than truncated: ext4 flushes a
// file truncated while it holds unwritten data, which would cost more than the whole input.
inline void WriteFile(const std::string& path, std::string_view bytes) {
  ::unlink(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Fail(__FILE__, __LINE__, "WriteFile", "cannot write " + path);
}

}  // namespace mnemo::fuzz

// Aborts with `why` (anything std::string can be built from) unless `condition` holds.
#define FUZZ_CHECK(condition, why)                                              \
  do {                                                                          \
    if (!(condition)) ::mnemo::fuzz::Fail(__FILE__, __LINE__, #condition, why); \
  } while (0)

#endif  // MNEMO_FUZZ_FUZZ_SUPPORT_H_
