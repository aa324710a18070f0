#include "engine/eval/passkey.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"

namespace mnemo::eval {

absl::StatusOr<PasskeyDocument> BuildPasskeyDocument(const std::vector<Document>& held_out,
                                                     int64_t distance, uint64_t seed) {
  if (distance <= 0) return absl::InvalidArgumentError("passkey distance must be positive");
  const int64_t available = TotalBytes(held_out);
  if (held_out.empty() || available < distance + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "passkey at distance ", distance, " needs that much held-out text; have ", available));
  }
  std::mt19937_64 rng(seed);
  PasskeyDocument doc;
  std::uniform_int_distribution<int> digit('0', '9');
  for (int i = 0; i < kPasskeyDigits; ++i) doc.digits.push_back(static_cast<char>(digit(rng)));

  std::vector<size_t> order(held_out.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  // Start at a random line of the first file, then wrap around the shuffled files.
  const std::string& first = held_out[order[0]].bytes;
  size_t offset = std::uniform_int_distribution<size_t>(0, first.size() - 1)(rng);
  if (offset > 0) {
    const size_t line_end = first.find('\n', offset - 1);
    offset = line_end == std::string::npos ? 0 : line_end + 1;
  }

  std::string filler;
  filler.reserve(static_cast<size_t>(distance) + 4096);
  for (size_t k = 0; static_cast<int64_t>(filler.size()) < distance; ++k) {
    const std::string& bytes = held_out[order[k % order.size()]].bytes;
    const size_t from = k == 0 ? offset : 0;
    filler.append(bytes, from, std::string::npos);
    if (!filler.empty() && filler.back() != '\n') filler.push_back('\n');
  }
  // Cut after the first line end at or beyond `distance` so the prompt starts a line.
  const size_t cut = filler.find('\n', static_cast<size_t>(distance) - 1);
  if (cut != std::string::npos) filler.resize(cut + 1);

  doc.filler_bytes = static_cast<int64_t>(filler.size());
  doc.text = absl::StrCat(kPasskeyPrompt, doc.digits, "\"\n", filler, kPasskeyPrompt);
  return doc;
}

int KnnMemLenFor(int64_t distance) {
  int64_t n = 1;
  while (n <= distance + 64) n *= 2;
  return static_cast<int>(n);
}

absl::StatusOr<std::string> GreedyContinue(model::Model& model,
                                           const model::MemoryOptions& memory_options,
                                           std::string_view prompt, int n,
                                           const PasskeyOptions& options) {
  std::vector<int> inputs;  // [BOS, prompt bytes...]
  inputs.reserve(prompt.size() + 1);
  inputs.push_back(model::kBosId);
  for (char c : prompt) inputs.push_back(static_cast<unsigned char>(c));

  memory::SessionMemory memory = model.NewMemory(memory_options);
  const size_t chunk = static_cast<size_t>(std::max(1, options.chunk));
  torch::Tensor last;  // [1, vocab] log-probs after the latest fed token
  for (size_t start = 0; start < inputs.size(); start += chunk) {
    const size_t count = std::min(chunk, inputs.size() - start);
    absl::StatusOr<torch::Tensor> out =
        model.Forward(absl::MakeConstSpan(inputs).subspan(start, count), memory,
                      model::Outputs::kLast);
    if (!out.ok()) return out.status();
    last = *out;
    if (options.on_progress) options.on_progress(static_cast<int64_t>(count));
  }
  std::string generated;
  for (int i = 0; i < n; ++i) {
    // Greedy over bytes only: specials (BOS/EOS/PAD) are never a passkey answer.
    const int byte = static_cast<int>(last.reshape({-1}).narrow(0, 0, 256).argmax().item<int64_t>());
    generated.push_back(static_cast<char>(byte));
    if (i + 1 == n) break;
    const int token = byte;
    absl::StatusOr<torch::Tensor> out =
        model.Forward(absl::MakeConstSpan(&token, 1), memory, model::Outputs::kLast);
    if (!out.ok()) return out.status();
    last = *out;
  }
  return generated;
}

}  // namespace mnemo::eval
