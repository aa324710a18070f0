#include "engine/datastore/history_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace mnemo::datastore {
namespace {

constexpr int64_t kMinBuckets = 1024;

uint64_t Mix(uint64_t h, uint32_t token) {
  h ^= token + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

}  // namespace

HistoryIndex::HistoryIndex(int64_t capacity) : capacity_(std::max<int64_t>(1, capacity)) {
  // About one bucket per two remembered tokens at capacity, fixed from the start: growing the
  // tables would mean rehashing everything, a pause of seconds at millions of tokens.
  int64_t buckets = kMinBuckets;
  while (buckets * 2 < capacity_) buckets *= 2;
  for (size_t t = 0; t < kLengths.size(); ++t) heads_[t].assign(static_cast<size_t>(buckets), -1);
  bucket_mask_ = static_cast<uint64_t>(buckets - 1);
}

uint64_t HistoryIndex::HashEndingAt(int64_t end, int length) const {
  uint64_t h = static_cast<uint64_t>(length);
  for (int64_t p = end - length; p < end; ++p) h = Mix(h, static_cast<uint32_t>(token_at(p)));
  return h;
}

int64_t HistoryIndex::CommonSuffix(int64_t a, int64_t b) const {
  const int64_t limit = std::min<int64_t>(kMaxMatch, a - oldest());
  int64_t n = 0;
  while (n < limit && token_at(a - 1 - n) == token_at(b - 1 - n)) ++n;
  return n;
}

void HistoryIndex::Append(int token, int bytes) {
  const int64_t p = next_;
  const size_t slot = static_cast<size_t>(p % capacity_);
  if (slot == tokens_.size()) {  // still growing towards capacity
    tokens_.push_back(token);
    bytes_.push_back(static_cast<uint8_t>(std::clamp(bytes, 1, 255)));
    for (auto& chain : chain_) chain.push_back(-1);
  } else {
    tokens_[slot] = token;
    bytes_[slot] = static_cast<uint8_t>(std::clamp(bytes, 1, 255));
  }
  ++next_;
  // The context of length ℓ before position p, with p's token as its value.
  for (size_t t = 0; t < kLengths.size(); ++t) {
    const int length = kLengths[t];
    if (p - length < oldest()) {
      chain_[t][slot] = -1;
      continue;
    }
    const uint64_t bucket = HashEndingAt(p, length) & bucket_mask_;
    chain_[t][slot] = heads_[t][bucket];
    heads_[t][bucket] = p;
  }
}

RecallPrediction HistoryIndex::Query() const {
  RecallPrediction out;
  const int64_t end = next_;
  std::vector<std::pair<int64_t, int>> found;  // (common suffix length, next token)
  found.reserve(kMaxOccurrences);
  for (int t = static_cast<int>(kLengths.size()) - 1; t >= 0; --t) {
    const int length = kLengths[t];
    if (end - length < oldest()) continue;
    const uint64_t bucket = HashEndingAt(end, length) & bucket_mask_;
    found.clear();
    int examined = 0;
    // Every entry p < end: it is written only once its value (the token at p) is appended.
    for (int64_t p = heads_[t][bucket]; p >= oldest() && examined < kMaxOccurrences;
         p = chain_[t][p % capacity_], ++examined) {
      const int64_t common = CommonSuffix(p, end);
      if (common >= length) found.emplace_back(common, token_at(p));
    }
    if (found.empty()) continue;
    int64_t best = 0;
    for (const auto& [common, token] : found) best = std::max(best, common);
    out.match_tokens = best;
    for (int64_t i = 0; i < best; ++i) out.match_bytes += bytes_[(end - 1 - i) % capacity_];
    for (const auto& [common, token] : found) {
      if (common != best) continue;
      auto it = std::find_if(out.next.begin(), out.next.end(),
                             [token = token](const auto& entry) { return entry.first == token; });
      if (it == out.next.end()) {
        out.next.emplace_back(token, 1);
      } else {
        ++it->second;
      }
      ++out.occurrences;
    }
    std::sort(out.next.begin(), out.next.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }
  return out;
}

int64_t HistoryIndex::bytes() const {
  int64_t total = static_cast<int64_t>(tokens_.capacity() * sizeof(int32_t) + bytes_.capacity());
  for (size_t t = 0; t < kLengths.size(); ++t) {
    total += static_cast<int64_t>((heads_[t].capacity() + chain_[t].capacity()) * sizeof(int64_t));
  }
  return total;
}

float RecallLambda(const RecallPrediction& prediction, const RecallOptions& options) {
  if (prediction.occurrences == 0 || prediction.match_bytes < options.min_match_bytes) return 0.0f;
  const float span = static_cast<float>(std::max(1, options.full_match_bytes - options.min_match_bytes));
  const float ramp = std::min(
      1.0f, static_cast<float>(prediction.match_bytes - options.min_match_bytes + 1) / span);
  const float agreement =
      static_cast<float>(prediction.next.front().second) / static_cast<float>(prediction.occurrences);
  return options.max_lambda * ramp * agreement;
}

float MixRecall(absl::Span<float> logprobs, const RecallPrediction& prediction,
                const RecallOptions& options) {
  const float lambda = RecallLambda(prediction, options);
  if (lambda <= 0.0f) return 0.0f;
  const float keep = std::log1p(-std::min(lambda, 0.999999f));  // log(1 - λ)
  for (float& lp : logprobs) lp += keep;
  for (const auto& [token, count] : prediction.next) {
    if (token < 0 || static_cast<size_t>(token) >= logprobs.size()) continue;
    const float recall = std::log(lambda * static_cast<float>(count) / prediction.occurrences);
    float& lp = logprobs[static_cast<size_t>(token)];
    const float hi = std::max(lp, recall), lo = std::min(lp, recall);
    lp = hi + std::log1p(std::exp(lo - hi));
  }
  return lambda;
}

}  // namespace mnemo::datastore

namespace mnemo::datastore {

void HistoryIndex::WriteTo(util::BinaryWriter& out) const {
  out.I64(capacity_);
  out.I64(next_);
  out.Pod(tokens_);
  out.Pod(bytes_);
  for (size_t t = 0; t < kLengths.size(); ++t) {
    out.Pod(heads_[t]);
    out.Pod(chain_[t]);
  }
}

absl::Status HistoryIndex::ReadFrom(util::BinaryReader& in) {
  absl::StatusOr<int64_t> capacity = in.I64("recall history capacity");
  if (!capacity.ok()) return capacity.status();
  if (*capacity != capacity_) {
    return absl::FailedPreconditionError(
        absl::StrCat("recall history: the file's capacity is ", *capacity, " tokens, this "
                     "session's ", capacity_));
  }
  absl::StatusOr<int64_t> next = in.I64("recall history position");
  absl::StatusOr<std::vector<int32_t>> tokens =
      next.ok() ? in.Pod<int32_t>("recall history tokens") : next.status();
  absl::StatusOr<std::vector<uint8_t>> bytes =
      tokens.ok() ? in.Pod<uint8_t>("recall history bytes") : tokens.status();
  if (!bytes.ok()) return bytes.status();
  const size_t held = static_cast<size_t>(std::min(std::max<int64_t>(*next, 0), capacity_));
  if (*next < 0 || tokens->size() != held || bytes->size() != held) {
    return absl::DataLossError("recall history: ring sizes do not match its position");
  }
  std::array<std::vector<int64_t>, kLengths.size()> heads, chain;
  for (size_t t = 0; t < kLengths.size(); ++t) {
    absl::StatusOr<std::vector<int64_t>> h = in.Pod<int64_t>("recall history hash heads");
    absl::StatusOr<std::vector<int64_t>> c =
        h.ok() ? in.Pod<int64_t>("recall history chains") : h.status();
    if (!c.ok()) return c.status();
    if (h->size() != heads_[t].size() || c->size() != held) {
      return absl::DataLossError("recall history: hash table sizes do not match");
    }
    for (const std::vector<int64_t>* v : {&*h, &*c}) {
      for (int64_t p : *v) {
        if (p < -1 || p >= *next) return absl::DataLossError("recall history: bad chain entry");
      }
    }
    heads[t] = std::move(*h);
    chain[t] = std::move(*c);
  }
  next_ = *next;
  tokens_ = std::move(*tokens);
  bytes_ = std::move(*bytes);
  heads_ = std::move(heads);
  chain_ = std::move(chain);
  return absl::OkStatus();
}

}  // namespace mnemo::datastore
