// PromptSource: the prompt of each benchmark request, deterministic in the request's index.
//
// mnemo's native models are byte-level (1 token = 1 byte), so a prompt of N tokens is N bytes.
// Synthetic prompts are ASCII words drawn by a fixed hash of (index, position): exactly N bytes,
// different for every request, identical from run to run. File prompts are successive N-byte
// windows of the file (wrapping around), cut at UTF-8 character boundaries so the server accepts
// them (a window may be up to 3 bytes short); N = 0 sends the whole file.
//
// Immutable after Create; Get may be called from any thread.
#ifndef MNEMO_CLIENTS_CPP_BENCH_PROMPT_SOURCE_H_
#define MNEMO_CLIENTS_CPP_BENCH_PROMPT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::bench {

class PromptSource {
 public:
  // Synthetic prompts of `tokens` bytes each (0 = empty prompts).
  static std::unique_ptr<PromptSource> Synthetic(int tokens);
  // Windows of `tokens` bytes from `path` (0 = the whole file). NOT_FOUND when the file cannot
  // be read, INVALID_ARGUMENT when it is empty or not UTF-8.
  static absl::StatusOr<std::unique_ptr<PromptSource>> FromFile(const std::string& path,
                                                                int tokens);

  // The prompt of request `index` (counted over the whole run, warmup included).
  std::string Get(uint64_t index) const;

  // What the prompts are, for the report: "synthetic" or the file path.
  const std::string& description() const { return description_; }

 private:
  PromptSource(std::string text, int tokens, std::string description)
      : text_(std::move(text)), tokens_(tokens), description_(std::move(description)) {}

  std::string SyntheticPrompt(uint64_t index) const;
  std::string FileWindow(uint64_t index) const;

  std::string text_;  // the file's bytes; empty for synthetic prompts
  int tokens_;
  std::string description_;
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_PROMPT_SOURCE_H_
