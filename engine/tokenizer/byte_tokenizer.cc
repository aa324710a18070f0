#include "engine/tokenizer/byte_tokenizer.h"

namespace mnemo::tokenizer {

std::vector<int> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::Decode(absl::Span<const int> ids) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (int id : ids) {
    if (IsByte(id)) bytes.push_back(static_cast<char>(id));
  }
  return bytes;
}

std::string ByteTokenizer::TokenBytes(int id) const {
  return IsByte(id) ? std::string(1, static_cast<char>(id)) : std::string();
}

std::string_view ByteTokenizer::SpecialName(int id) const {
  switch (id) {
    case kBosId:
      return "<bos>";
    case kEosId:
      return "<eos>";
    case kPadId:
      return "<pad>";
    default:
      return "";
  }
}

}  // namespace mnemo::tokenizer
