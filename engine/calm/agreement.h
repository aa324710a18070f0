// Token agreement between early exit and the full model: the risk CALM calibration controls.
//
// Teacher-forced: every text is fed as written (not generated), once at full depth with
// Model::Forward and once per candidate threshold with Model::ForwardWithExit on one
// confidence measure (fresh memory each time, same MemoryOptions). At each position the greedy
// token (argmax of the log-probs) of the early-exit pass is compared with the full pass's. The
// risk of a text is 1 − (agreeing positions / positions); the calibration risk of a threshold
// is the mean over texts, so each text is one sample in [0, 1] for the p-values
// (engine/calm/p_values.h).
// This is the teacher-forced token-agreement risk: in generation an early disagreement also
// changes what follows, which teacher forcing does not see.
//
// Borrows the model for the duration of a call; not thread-safe (the model is not).
#ifndef MNEMO_ENGINE_CALM_AGREEMENT_H_
#define MNEMO_ENGINE_CALM_AGREEMENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::calm {

// One calibration sample. tokens = [BOS, b0, ..., b(n-2)] for bytes b0..b(n-1), so position
// i predicts byte i (mnemo-eval's and the Score RPC's convention).
struct CalibrationText {
  std::string name;
  std::vector<int> tokens;
};
CalibrationText TextFromBytes(std::string name, const std::string& bytes);
// The same for any model's vocabulary: `text` encoded as the model reads a text
// (Tokenizer::EncodeWithSpecials: BOS first when the tokenizer adds one), without the last
// token (nothing after it to predict).
CalibrationText TextFromTokenizer(std::string name, const std::string& text,
                                  const tokenizer::Tokenizer& tokenizer);

// Counts for one text at one threshold.
struct TextAgreement {
  int64_t positions = 0;
  int64_t agreeing = 0;        // early-exit argmax == full-depth argmax
  int64_t exit_layer_sum = 0;  // sum of 1-based exit layers

  double Risk() const;  // 1 − agreeing / positions (0 for an empty text)
};

// One candidate threshold over every text.
struct CandidateMeasurement {
  float threshold = 0.0f;
  std::vector<TextAgreement> texts;  // [texts], in input order
  double seconds = 0.0;              // ForwardWithExit time over all texts

  double MeanRisk() const;       // mean of per-text risks: the risk the p-values test
  double PooledRisk() const;     // 1 − all agreeing / all positions (for reference)
  double MeanExitLayer() const;  // over all positions
  int64_t Positions() const;
};

struct AgreementOptions {
  model::MemoryOptions memory;  // the model's defaults unless set
  int chunk = 4096;             // tokens per model call (results do not depend on it)
  // The confidence the early-exit passes exit on (the classifier needs a model with one).
  model::ExitMeasure measure = model::ExitMeasure::kSoftmaxResponse;
};

// (stage, positions just processed), after every model call.
using AgreementProgress = std::function<void(const std::string& stage, int64_t positions)>;

// Greedy full-depth tokens at every position of `tokens`: [tokens.size()].
absl::StatusOr<std::vector<int>> FullDepthArgmax(model::Model& model,
                                                 absl::Span<const int> tokens,
                                                 const AgreementOptions& options);

// Runs ForwardWithExit at `threshold` (options.measure) and compares with `reference`
// (FullDepthArgmax).
absl::StatusOr<TextAgreement> ExitAgreement(model::Model& model, absl::Span<const int> tokens,
                                            absl::Span<const int> reference, float threshold,
                                            const AgreementOptions& options);

// Every threshold on every text, in the order given: per text one full pass, then one
// early-exit pass per threshold. Work: texts × (thresholds + 1) forward passes.
absl::StatusOr<std::vector<CandidateMeasurement>> MeasureAgreement(
    model::Model& model, const std::vector<CalibrationText>& texts,
    absl::Span<const float> thresholds, const AgreementOptions& options,
    const AgreementProgress& progress = nullptr);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_AGREEMENT_H_
