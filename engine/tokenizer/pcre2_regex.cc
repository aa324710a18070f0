#include "engine/tokenizer/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace mnemo::tokenizer {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Frees what it holds when it goes out of scope.
struct MatchResources {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchResources() {
    if (data != nullptr) pcre2_match_data_free(data);
    if (context != nullptr) pcre2_match_context_free(context);
    if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Pcre2Regex>> Pcre2Regex::Create(const std::string& pattern,
                                                               bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL admits no UCP (nothing in a literal is a class).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex \"", pattern, "\" does not compile at ",
                                                   offset, ": ", ErrorMessage(error)));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Pcre2Regex>(new Pcre2Regex(pattern, code, jit));
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(Code(code_)); }

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Pcre2Regex::FindAll(
    std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  MatchResources res;
  res.data = pcre2_match_data_create_from_pattern(Code(code_), nullptr);
  if (res.data == nullptr) return absl::ResourceExhaustedError("pcre2: no memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(Code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, res.data,
                         res.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_ && res.jit_stack == nullptr) {
      // Long runs can outgrow the JIT's default 32 KiB stack: retry with a growable one.
      res.jit_stack = pcre2_jit_stack_create(32 * 1024, 256 * 1024 * 1024, nullptr);
      res.context = pcre2_match_context_create(nullptr);
      if (res.jit_stack == nullptr || res.context == nullptr) {
        return absl::ResourceExhaustedError("pcre2: no memory for a JIT stack");
      }
      pcre2_jit_stack_assign(res.context, nullptr, res.jit_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(
          absl::StrCat("regex \"", pattern_, "\" failed: ", ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(res.data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: step over one UTF-8 character
      if (begin >= text.size()) break;
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
  return matches;
}

}  // namespace mnemo::tokenizer
