// ModelConfig: the architecture and memory settings read from a model directory's config.json.
#ifndef MNEMO_ENGINE_MODEL_MODEL_CONFIG_H_
#define MNEMO_ENGINE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/exit_measure.h"
#include "engine/model/hf/decoder_config.h"
#include "engine/tokenizer/byte_tokenizer.h"

namespace mnemo::model {

// The native family's byte-level vocabulary (tokenizer::ByteTokenizer): ids 0..255 are bytes,
// then the specials. Native-only code (trainer, evaluator, tools) uses these names; code that
// serves any family asks the model's tokenizer (Model::tokenizer()) instead.
inline constexpr int kBosId = tokenizer::ByteTokenizer::kBosId;
inline constexpr int kEosId = tokenizer::ByteTokenizer::kEosId;
inline constexpr int kPadId = tokenizer::ByteTokenizer::kPadId;
inline constexpr int kByteVocabSize = tokenizer::ByteTokenizer::kVocabSize;

enum class Compression { kMean, kMax, kConv };

struct ModelConfig {
  std::string name = "mnemo";
  int vocab_size = kByteVocabSize;
  int n_layers = 4;
  int d_model = 128;
  int n_heads = 4;
  int d_head = 32;        // d_model / n_heads unless set
  int d_ff = 512;         // 4 * d_model unless set
  float layer_norm_eps = 1e-5f;

  // Memory (docs/design.md §2): query t attends to raw positions [t - mem_len, t] and to the last
  // cmem_len compressed slots whose cmem_rate positions all lie before t - mem_len.
  int seg_len = 128;      // positions per ingestion segment
  int mem_len = 128;      // raw recurrence memory (positions)
  int cmem_len = 0;       // compressed memory (slots); 0 = off
  int cmem_rate = 4;      // positions per compressed slot
  Compression compression = Compression::kMean;
  int clamp_len = 1024;   // relative distances beyond this share one embedding

  // Memorizing-Transformer kNN layer: query t retrieves the knn_topk best (normalised) keys
  // among the knn_mem_len positions just before its raw window [t - mem_len, t].
  int knn_layer = -1;     // 0-based layer with kNN attention; -1 = none
  int knn_topk = 32;
  int knn_mem_len = 4096; // default retrievable positions per head (inference may override)

  // CALM: trained with the shared exit head at every layer (any layer can emit anyway).
  bool exit_heads = false;
  // Calibrated CALM exit thresholds λ (mnemo-calibrate, engine/calm), one per confidence
  // measure (exit_measure.h): a token may leave once that measure reaches the schedule's λ_t.
  // 1.0 (or more) means uncalibrated: never exit. In config.json softmax response's is
  // "exit_threshold" (configs from before the other measures have only it; they read as 1.0
  // if older still); the others are "exit_thresholds": {"saturation": λ, "classifier": λ},
  // written only for calibrated measures.
  float exit_threshold = 1.0f;             // softmax response
  float saturation_exit_threshold = 1.0f;  // hidden-state saturation
  float classifier_exit_threshold = 1.0f;  // learned exit classifier
  // The measure a request that names none is served with ("exit_measure", written only when
  // it is not softmax response).
  ExitMeasure exit_measure = ExitMeasure::kSoftmaxResponse;

  // The Hugging Face families' own settings (engine/model/hf/); default (architecture empty)
  // for mnemo-xl. For those families d_ff is the feed-forward width, n_heads the query heads,
  // mem_len + 1 the positions a query sees (its window) and clamp_len unused.
  hf::DecoderConfig decoder;

  float ExitThreshold(ExitMeasure measure) const;
  void SetExitThreshold(ExitMeasure measure, float threshold);

  bool knn_enabled() const { return knn_layer >= 0 && knn_mem_len > 0; }

  // Number of learned parameters this config implies.
  int64_t ParameterCount() const;
  // Largest relative distance any query can see (raw window or compressed slot).
  int MaxDistance() const;
};

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);
// The CALM fields mnemo-calibrate writes into any family's config.json (exit_threshold,
// exit_thresholds, exit_measure; see ModelConfig) into `config`; absent fields keep its values.
absl::Status ParseExitSettings(const std::string& json_text, ModelConfig& config);
// INVALID_ARGUMENT naming the first field that is out of range.
absl::Status ValidateModelConfig(const ModelConfig& config);
absl::StatusOr<Compression> ParseCompression(const std::string& name);
std::string ModelConfigToJson(const ModelConfig& config);
const char* CompressionName(Compression compression);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_MODEL_CONFIG_H_
