#include "engine/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <utility>

namespace mnemo::tokenizer {
namespace {

// `text` in Unicode normalization form `kind`; unchanged if ICU fails.
void UnicodeNormalize(NormalizerStep::Kind kind, std::string& text) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (kind) {
    case NormalizerStep::Kind::kNfc:
      normalizer = icu::Normalizer2::getNFCInstance(error);
      break;
    case NormalizerStep::Kind::kNfd:
      normalizer = icu::Normalizer2::getNFDInstance(error);
      break;
    case NormalizerStep::Kind::kNfkc:
      normalizer = icu::Normalizer2::getNFKCInstance(error);
      break;
    case NormalizerStep::Kind::kNfkd:
      normalizer = icu::Normalizer2::getNFKDInstance(error);
      break;
    default:
      return;
  }
  if (U_FAILURE(error) || normalizer == nullptr) return;
  if (normalizer->isNormalizedUTF8(text, error) && U_SUCCESS(error)) return;
  error = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  normalizer->normalizeUTF8(0, text, sink, nullptr, error);
  if (U_SUCCESS(error)) text = std::move(out);
}

}  // namespace

void Normalizer::Apply(std::string& text) const {
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace: {
        absl::StatusOr<std::vector<std::pair<size_t, size_t>>> found = step.pattern->FindAll(text);
        if (!found.ok() || found->empty()) break;
        const std::vector<std::pair<size_t, size_t>>& matches = *found;
        std::string out;
        out.reserve(text.size());
        size_t at = 0;
        for (const auto& [begin, end] : matches) {
          out.append(text, at, begin - at);
          out += step.text;
          at = end;
        }
        out.append(text, at, std::string::npos);
        text = std::move(out);
        break;
      }
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkc:
      case NormalizerStep::Kind::kNfkd:
        UnicodeNormalize(step.kind, text);
        break;
    }
  }
}

}  // namespace mnemo::tokenizer
