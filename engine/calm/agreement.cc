#include "engine/calm/agreement.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model_config.h"
#include "engine/util/status_macros.h"

namespace mnemo::calm {
namespace {

// argmax over the vocabulary of each row of [n, vocab] log-probs.
std::vector<int> RowArgmax(const torch::Tensor& logprobs) {
  torch::Tensor best = logprobs.argmax(-1).to(torch::kInt64).contiguous();  // [n]
  const int64_t* data = best.data_ptr<int64_t>();
  return std::vector<int>(data, data + best.size(0));
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

CalibrationText TextFromBytes(std::string name, const std::string& bytes) {
  CalibrationText text{std::move(name), {model::kBosId}};
  if (bytes.empty()) return text;
  text.tokens.reserve(bytes.size());
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    text.tokens.push_back(static_cast<unsigned char>(bytes[i]));
  }
  return text;
}

CalibrationText TextFromTokenizer(std::string name, const std::string& text,
                                  const tokenizer::Tokenizer& tokenizer) {
  CalibrationText out{std::move(name), tokenizer.EncodeWithSpecials(text)};
  if (!out.tokens.empty()) out.tokens.pop_back();
  return out;
}

double TextAgreement::Risk() const {
  if (positions == 0) return 0.0;
  return 1.0 - static_cast<double>(agreeing) / static_cast<double>(positions);
}

double CandidateMeasurement::MeanRisk() const {
  if (texts.empty()) return 0.0;
  double sum = 0.0;
  for (const TextAgreement& t : texts) sum += t.Risk();
  return sum / static_cast<double>(texts.size());
}

int64_t CandidateMeasurement::Positions() const {
  int64_t n = 0;
  for (const TextAgreement& t : texts) n += t.positions;
  return n;
}

double CandidateMeasurement::PooledRisk() const {
  int64_t agreeing = 0;
  for (const TextAgreement& t : texts) agreeing += t.agreeing;
  const int64_t n = Positions();
  return n == 0 ? 0.0 : 1.0 - static_cast<double>(agreeing) / static_cast<double>(n);
}

double CandidateMeasurement::MeanExitLayer() const {
  int64_t layers = 0;
  for (const TextAgreement& t : texts) layers += t.exit_layer_sum;
  const int64_t n = Positions();
  return n == 0 ? 0.0 : static_cast<double>(layers) / static_cast<double>(n);
}

absl::StatusOr<std::vector<int>> FullDepthArgmax(model::Model& model,
                                                 absl::Span<const int> tokens,
                                                 const AgreementOptions& options) {
  memory::SessionMemory memory = model.NewMemory(options.memory);
  std::vector<int> argmax;
  argmax.reserve(tokens.size());
  const size_t chunk = static_cast<size_t>(std::max(1, options.chunk));
  for (size_t start = 0; start < tokens.size(); start += chunk) {
    MNEMO_ASSIGN_OR_RETURN(torch::Tensor logprobs,
                           model.Forward(tokens.subspan(start, chunk), memory));  // [c, vocab]
    std::vector<int> part = RowArgmax(logprobs);
    argmax.insert(argmax.end(), part.begin(), part.end());
  }
  return argmax;
}

absl::StatusOr<TextAgreement> ExitAgreement(model::Model& model, absl::Span<const int> tokens,
                                            absl::Span<const int> reference, float threshold,
                                            const AgreementOptions& options) {
  if (reference.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("reference has ", reference.size(),
                                                   " tokens, the text ", tokens.size()));
  }
  memory::SessionMemory memory = model.NewMemory(options.memory);
  TextAgreement result;
  const size_t chunk = static_cast<size_t>(std::max(1, options.chunk));
  for (size_t start = 0; start < tokens.size(); start += chunk) {
    MNEMO_ASSIGN_OR_RETURN(model::ExitForward out,
                           model.ForwardWithExit(tokens.subspan(start, chunk), memory, threshold,
                                                 options.measure));
    const std::vector<int> argmax = RowArgmax(out.logprobs);  // [c]
    for (size_t i = 0; i < argmax.size(); ++i) {
      result.agreeing += argmax[i] == reference[start + i];
      result.exit_layer_sum += out.exit_layers[i];
    }
    result.positions += static_cast<int64_t>(argmax.size());
  }
  return result;
}

absl::StatusOr<std::vector<CandidateMeasurement>> MeasureAgreement(
    model::Model& model, const std::vector<CalibrationText>& texts,
    absl::Span<const float> thresholds, const AgreementOptions& options,
    const AgreementProgress& progress) {
  std::vector<CandidateMeasurement> results(thresholds.size());
  for (size_t j = 0; j < thresholds.size(); ++j) results[j].threshold = thresholds[j];
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int>& tokens = texts[i].tokens;
    const std::string where = absl::StrFormat("text %d/%d", i + 1, texts.size());
    absl::StatusOr<std::vector<int>> reference = FullDepthArgmax(model, tokens, options);
    if (!reference.ok()) {
      return absl::Status(reference.status().code(),
                          absl::StrCat(texts[i].name, ": ", reference.status().message()));
    }
    if (progress) progress(absl::StrCat(where, " full depth"), tokens.size());
    for (size_t j = 0; j < thresholds.size(); ++j) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<TextAgreement> agreement =
          ExitAgreement(model, tokens, *reference, thresholds[j], options);
      if (!agreement.ok()) {
        return absl::Status(agreement.status().code(),
                            absl::StrCat(texts[i].name, " at threshold ", thresholds[j], ": ",
                                         agreement.status().message()));
      }
      results[j].texts.push_back(*agreement);
      results[j].seconds += SecondsSince(start);
      if (progress) {
        progress(absl::StrFormat("%s threshold %g", where, thresholds[j]), tokens.size());
      }
    }
  }
  return results;
}

}  // namespace mnemo::calm
