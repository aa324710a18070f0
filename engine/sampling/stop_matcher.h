// StopMatcher: tells when the text generated so far contains one of the request's stop strings.
//
// Matches raw bytes, so a stop string is found however it is split across tokens (one byte per
// token for the byte tokenizer, several for BPE later). It keeps only the last
// (longest stop - 1) bytes, so each Feed costs O(new bytes × stops × longest stop), independent
// of how much was generated. The matched text stays in the output (finish reason STOP).
//
// A value type owned by one request; not thread-safe.
#ifndef MNEMO_ENGINE_SAMPLING_STOP_MATCHER_H_
#define MNEMO_ENGINE_SAMPLING_STOP_MATCHER_H_

#include <string>
#include <string_view>
#include <vector>

namespace mnemo::sampling {

class StopMatcher {
 public:
  // Empty stop strings are ignored (the engine rejects them earlier).
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends the bytes of the next token; true when a stop string ends within them, i.e. the
  // generated text now contains a stop string that it did not contain before.
  bool Feed(std::string_view bytes);

  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string tail_;  // the last (max_len_ - 1) bytes fed, at most
};

}  // namespace mnemo::sampling

#endif  // MNEMO_ENGINE_SAMPLING_STOP_MATCHER_H_
