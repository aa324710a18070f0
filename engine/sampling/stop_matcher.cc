#include "engine/sampling/stop_matcher.h"

#include <algorithm>

namespace mnemo::sampling {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (stop.empty()) continue;
    max_len_ = std::max(max_len_, stop.size());
    stops_.push_back(std::move(stop));
  }
}

bool StopMatcher::Feed(std::string_view bytes) {
  if (stops_.empty() || bytes.empty()) return false;
  const size_t old_size = tail_.size();
  tail_.append(bytes);
  bool matched = false;
  for (const std::string& stop : stops_) {
    // Only matches that end inside the new bytes are new: start the search where such a
    // match could begin.
    const size_t earliest_end = old_size + 1;  // match end (exclusive) must be > old_size
    const size_t from = earliest_end >= stop.size() ? earliest_end - stop.size() : 0;
    if (tail_.find(stop, from) != std::string::npos) {
      matched = true;
      break;
    }
  }
  if (tail_.size() > max_len_ - 1) tail_.erase(0, tail_.size() - (max_len_ - 1));
  return matched;
}

}  // namespace mnemo::sampling
