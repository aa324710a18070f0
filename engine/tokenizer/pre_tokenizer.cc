#include "engine/tokenizer/pre_tokenizer.h"

#include <string_view>
#include <utility>

#include "absl/strings/str_replace.h"
#include "engine/tokenizer/byte_level.h"

namespace mnemo::tokenizer {
namespace {

struct Range {
  size_t begin;
  size_t end;
  bool is_match;
};

// `text` cut at `matches` into consecutive ranges covering it, each flagged as a match
// (inverted with `invert`); empty ranges are left out.
std::vector<Range> Cover(std::string_view text,
                         const std::vector<std::pair<size_t, size_t>>& matches, bool invert) {
  std::vector<Range> ranges;
  size_t at = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > at) ranges.push_back({at, begin, invert});
    ranges.push_back({begin, end, !invert});
    at = end;
  }
  if (at < text.size()) ranges.push_back({at, text.size(), invert});
  return ranges;
}

// The ranges of the pieces a split with `behavior` keeps.
std::vector<Range> ApplyBehavior(std::vector<Range> ranges, SplitBehavior behavior) {
  std::vector<Range> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return ranges;
    case SplitBehavior::kRemoved:
      for (const Range& r : ranges) {
        if (!r.is_match) out.push_back(r);
      }
      return out;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Range& r : ranges) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().end = r.end;
        } else {
          out.push_back(r);
        }
        previous_match = r.is_match;
      }
      return out;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;  // walking backwards: the range after
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return std::vector<Range>(out.rbegin(), out.rend());
    }
    case SplitBehavior::kContiguous: {
      for (const Range& r : ranges) {
        if (!out.empty() && out.back().is_match && r.is_match) {
          out.back().end = r.end;
        } else {
          out.push_back(r);
        }
      }
      return out;
    }
  }
  return ranges;
}

// Splits every piece of `pieces` by `regex` with `behavior` (a piece the regex fails on stays
// whole).
void SplitAll(const Pcre2Regex& regex, SplitBehavior behavior, bool invert,
              std::vector<PreToken>& pieces) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (PreToken& piece : pieces) {
    absl::StatusOr<std::vector<std::pair<size_t, size_t>>> matches = regex.FindAll(piece.text);
    if (!matches.ok()) {
      out.push_back(std::move(piece));
      continue;
    }
    for (const Range& r : ApplyBehavior(Cover(piece.text, *matches, invert), behavior)) {
      out.push_back(
          {piece.text.substr(r.begin, r.end - r.begin), piece.at_text_start && r.begin == 0});
    }
  }
  pieces = std::move(out);
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

void PreTokenizer::Run(PreToken piece, std::vector<PreToken>& out) const {
  std::vector<PreToken> pieces;
  pieces.push_back(std::move(piece));
  for (const PreTokenizerStep& step : steps_) {
    switch (step.kind) {
      case PreTokenizerStep::Kind::kSplit:
        SplitAll(*step.regex, step.behavior, step.invert, pieces);
        break;
      case PreTokenizerStep::Kind::kByteLevel: {
        if (step.add_prefix_space) {
          for (PreToken& p : pieces) {
            if (!StartsWith(p.text, " ")) p.text.insert(0, " ");
          }
        }
        if (step.regex != nullptr) {
          SplitAll(*step.regex, SplitBehavior::kIsolated, false, pieces);
        }
        for (PreToken& p : pieces) {
          std::string mapped;
          mapped.reserve(p.text.size() * 2);
          AppendByteLevel(p.text, mapped);
          p.text = std::move(mapped);
        }
        break;
      }
      case PreTokenizerStep::Kind::kMetaspace: {
        for (PreToken& p : pieces) {
          p.text = absl::StrReplaceAll(p.text, {{" ", step.replacement}});
          const bool prepend = step.prepend == PrependScheme::kAlways ||
                               (step.prepend == PrependScheme::kFirst && p.at_text_start);
          if (prepend && !StartsWith(p.text, step.replacement)) p.text.insert(0, step.replacement);
        }
        if (step.split) {
          std::vector<PreToken> split;
          for (PreToken& p : pieces) {
            size_t begin = 0;
            for (size_t at = p.text.find(step.replacement, 1); at != std::string::npos;
                 at = p.text.find(step.replacement, at + 1)) {
              split.push_back({p.text.substr(begin, at - begin), p.at_text_start && begin == 0});
              begin = at;
            }
            split.push_back({p.text.substr(begin), p.at_text_start && begin == 0});
          }
          pieces = std::move(split);
        }
        break;
      }
    }
  }
  for (PreToken& p : pieces) {
    if (!p.text.empty()) out.push_back(std::move(p));
  }
}

}  // namespace mnemo::tokenizer
