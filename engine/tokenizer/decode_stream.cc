#include "engine/tokenizer/decode_stream.h"

#include <string_view>

namespace mnemo::tokenizer {

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool starts_text)
    : tokenizer_(&tokenizer),
      spaces_to_drop_(starts_text ? tokenizer.leading_spaces_dropped() : 0) {}

std::string DecodeStream::Feed(int id) {
  const std::string bytes = tokenizer_->TokenBytes(id);
  std::string_view rest = bytes;
  while (spaces_to_drop_ > 0 && !rest.empty()) {
    if (rest.front() == ' ') {
      rest.remove_prefix(1);
      --spaces_to_drop_;
    } else {
      spaces_to_drop_ = 0;  // the text has started: later spaces are text
    }
  }
  return utf8_.Feed(rest);
}

}  // namespace mnemo::tokenizer
