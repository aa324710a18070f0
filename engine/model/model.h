// Model: a loaded model of any registered family (family.h, family_registry.h; the native one
// is mnemo-xl, docs/design.md §2) and its forward pass over session memory.
//
// Owns its family's Network (its weights, memory-mapped from the directory's files and
// converted to the compute dtype on the configured device), its tokenizer and, when the
// directory has one, its CALM exit classifier (exit_classifier.safetensors, see
// exit_classifier.h). Stateless between calls: all sequence state lives in the SessionMemory
// the caller passes in.
// Thread-safety: once made, the weights are only read, and the engine relies on that: its loop
// thread, the decode workers running BatchDecoder shards (ParallelDecoder) and worker threads
// prefilling one-shot or session sequences call Forward, ForwardWithExit and the decode step at
// the same time, each on memories no other thread touches. NewMemory, tokenizer() and the const
// accessors are safe from any thread. SetExitClassifier, Save and transformer() (mutable access
// to the weights) need the model to themselves. The recycled-memory pool is not here: see
// memory::MemoryPool (its owner, the scheduler, hands it to NewMemory).
#ifndef MNEMO_ENGINE_MODEL_MODEL_H_
#define MNEMO_ENGINE_MODEL_MODEL_H_

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/memory/memory_pool.h"
#include "engine/memory/memory_shape.h"
#include "engine/memory/session_memory.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model_config.h"
#include "engine/model/transformer.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::model {

class ModelFamily;  // family.h
class Network;      // family.h

struct LoadOptions {
  torch::Device device = torch::kCPU;
  // How the serving paths hold the weights (docs/results/weight_dtype.md):
  //   kFloat32   as loaded;
  //   kFloat16   rounded to float16 values at load, and the serving products' packed copies
  //              (small_matmul.h) kept as float16: half the bytes a decode step streams, the
  //              same multiply-adds in float32;
  //   kBFloat16  rounded to bfloat16 values at load, the packed copies kept as bfloat16, and
  //              each product's input rows rounded to bfloat16 as well: the products run as
  //              bfloat16 dot products (AVX512-BF16 where the CPU has it: twice the multiply-
  //              adds per instruction), summed in float32. A change of numerics beyond the
  //              weights': everything the packed products compute (every serving path) sees
  //              it; LibTorch's own products (training, autograd) do not round their inputs.
  // The parameters stay float32 tensors holding the rounded values, so every path computes
  // with the same weights (and Save writes them). The exit classifier keeps its own float32
  // weights. CPU only.
  torch::ScalarType weight_dtype = torch::kFloat32;
  // Bounded sessions for the Hugging Face families (`--window`, `--sink_tokens`,
  // docs/user-guide.md): a query sees itself and the window - 1 positions before it, plus the
  // sequence's first sink_tokens positions. 0 / -1 = the model's own (its sliding_window, or
  // min(max_position_embeddings, 4096) positions and no sinks). The native family refuses
  // both: its memory sizes are part of its training.
  int window = 0;
  int sink_tokens = -1;
};

// LoadOptions::weight_dtype for a `--weight_dtype` value: "float32", "float16" or "bfloat16";
// INVALID_ARGUMENT otherwise.
absl::StatusOr<torch::ScalarType> ParseWeightDtype(absl::string_view weight_dtype);
// The `--weight_dtype` spelling of LoadOptions::weight_dtype: "float32", "float16", "bfloat16".
std::string WeightDtypeName(torch::ScalarType weight_dtype);

// Which positions of a Forward call get output log-probabilities.
enum class Outputs { kAll, kLast };

// Inference-time switches on a session's memory (evaluation ablations, per-session kNN size).
struct MemoryOptions {
  bool compressive = true;  // use the compressed memory if the model has one
  bool knn = true;          // use the kNN layer's memory if the model has one
  int knn_mem_len = 0;      // retrievable kNN positions; 0 = the model's default
  // Up to this many entries the kNN memory is searched exactly, beyond it through a FAISS IVF
  // index (knn::KnnMemory); 0 = knn::KnnMemoryConfig's default.
  int64_t knn_exact_threshold = 0;
  // Keys and values of the attention rings in float16 (memory::MemoryShape::half_rings): half
  // a session's memory and of what decode attention reads, at a small change in the results
  // (docs/results/kv_dtype.md). CPU only.
  bool half_rings = false;

  bool operator==(const MemoryOptions& o) const {
    return compressive == o.compressive && knn == o.knn && knn_mem_len == o.knn_mem_len &&
           knn_exact_threshold == o.knn_exact_threshold && half_rings == o.half_rings;
  }
};

// MemoryOptions::half_rings for a `--kv_dtype` value: "float32" -> false, "float16" -> true;
// INVALID_ARGUMENT naming both for anything else.
absl::StatusOr<bool> ParseKvDtype(absl::string_view kv_dtype);

// Result of an early-exit forward pass (CALM with state propagation).
struct ExitForward {
  torch::Tensor logprobs;        // [n, vocab] float32 CPU, from each token's exit layer
  std::vector<int> exit_layers;  // [n], 1-based; n_layers when the token never exited
};

class Model {
 public:
  // Reads DIR/config.json, picks the family its architecture names (FamilyForConfig: an
  // unknown one fails naming the file, the field and the supported architectures), and lets
  // the family read the weights (the native one: DIR/model.safetensors) and make the
  // tokenizer; then DIR/exit_classifier.safetensors if present (it must have been trained for
  // these weights). Errors name the file or tensor at fault; FAILED_PRECONDITION when
  // config.json's exit_measure is "classifier" but the directory has no classifier.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                                     const LoadOptions& options);
  // Wraps a trained native network (the trainer's) for inference.
  static std::unique_ptr<Model> FromTransformer(Transformer transformer,
                                               const LoadOptions& options = {});
  // A randomly initialised native model (tests, `mnemo-model init`).
  static std::unique_ptr<Model> Random(const ModelConfig& config, uint64_t seed,
                                       const LoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  // The family that loaded this model, and its network (what every forward pass runs).
  const ModelFamily& family() const { return *family_; }
  Network& network() { return *network_; }
  // The model's vocabulary: how text becomes its ids and ids become bytes. Immutable, and
  // thread-safe unlike the Model (see tokenizer.h); lives as long as the Model, or as long as
  // a holder of shared_tokenizer().
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const tokenizer::Tokenizer> shared_tokenizer() const { return tokenizer_; }
  torch::Device device() const { return device_; }
  // LoadOptions::weight_dtype as loaded.
  torch::ScalarType weight_dtype() const { return weight_dtype_; }

  // The factory of this model's memories. An empty memory for one sequence with `options`:
  // one `pool` holds of that shape, when given one that does (recycled, emptied), else a new
  // one (zero-filled rings, ~7.7 MB for the bundled model). Thread-safe.
  memory::SessionMemory NewMemory(const MemoryOptions& options = {},
                                  memory::MemoryPool* pool = nullptr) const;
  // The shape of the memories NewMemory(options) makes.
  memory::MemoryShape MemoryShapeFor(const MemoryOptions& options) const;

  // Feeds `tokens` (any count >= 1) through the model in segments of seg_len, appending each
  // position to `memory`. Returns next-token log-probabilities, float32 on CPU:
  // [tokens.size(), vocab] for Outputs::kAll, [1, vocab] for Outputs::kLast.
  // Results do not depend on how a sequence is split across calls (docs/design.md §2).
  // If `knn_lm_keys` is set it receives, for the same positions, the last layer's
  // post-LayerNorm feed-forward input ([n or 1, d_model] float32 CPU): the kNN-LM key.
  absl::StatusOr<torch::Tensor> Forward(absl::Span<const int> tokens,
                                        memory::SessionMemory& memory,
                                        Outputs outputs = Outputs::kAll,
                                        torch::Tensor* knn_lm_keys = nullptr);

  // Like Forward with Outputs::kAll, but each token leaves the network after the first layer
  // whose CALM confidence (`measure`, see exit_measure.h and exit_confidence.h) reaches
  // `threshold`. Layers a token skips still get its key/value from its exit hidden state
  // (state propagation), so what follows sees no holes. threshold > 1 never exits early.
  // FAILED_PRECONDITION for ExitMeasure::kClassifier on a model without a classifier.
  absl::StatusOr<ExitForward> ForwardWithExit(
      absl::Span<const int> tokens, memory::SessionMemory& memory, float threshold,
      ExitMeasure measure = ExitMeasure::kSoftmaxResponse);

  // The exit classifier, or nullptr when the model has none.
  const ExitClassifierImpl* exit_classifier() const {
    return exit_classifier_ ? exit_classifier_.get() : nullptr;
  }
  // Installs (or, with an empty holder, removes) the exit classifier; moved to the model's
  // device. The trainer and tests use it; Load reads the model directory's file.
  void SetExitClassifier(ExitClassifier classifier);
  // OK when `measure` can be computed for this model; FAILED_PRECONDITION naming the missing
  // classifier (and how to train one) otherwise.
  absl::Status CheckExitMeasure(ExitMeasure measure) const;
  // The most positions a sequence may reach (Network::max_sequence()); -1 = unbounded.
  int64_t max_sequence() const;
  // OUT_OF_RANGE when feeding `count` more tokens at `position` passes max_sequence() (a
  // learned position table, GPT-2's n_positions).
  absl::Status CheckLength(int64_t position, int64_t count) const;

  // Writes config.json + model.safetensors (float32) into `dir`, creating it.
  absl::Status Save(const std::string& dir) const;

  // Learned parameters, in file order.
  int64_t ParameterCount() const;

  // The native family's network, for code that trains it or runs its layers itself (the
  // trainer, BatchDecoder). Throws (c10::Error) for a model of another family.
  Transformer& transformer();

 private:
  // Readies `network` for serving (Network::PrepareForServing: rounds its weights for
  // options.weight_dtype, INVALID_ARGUMENT beyond float16's range or off the CPU; moves it to
  // the device; caches its inference tables).
  static absl::StatusOr<std::unique_ptr<Model>> Make(
      ModelConfig config, const LoadOptions& options, const ModelFamily& family,
      std::unique_ptr<Network> network, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);
  Model(ModelConfig config, const LoadOptions& options, const ModelFamily& family,
        std::unique_ptr<Network> network, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);
  absl::Status CheckTokens(absl::Span<const int> tokens) const;
  torch::Tensor TokenTensor(absl::Span<const int> tokens) const;  // [1, n] on device_

  const ModelConfig config_;
  const torch::Device device_;
  const torch::ScalarType weight_dtype_;
  const ModelFamily* const family_;  // a registered family: lives for the whole program
  const std::unique_ptr<Network> network_;  // never null; ready for serving
  const std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;  // never null
  ExitClassifier exit_classifier_{nullptr};  // empty when the model has none
};

// Directory I/O shared by Model and the trainer.
// DIR/config.json parsed by the family its architecture names (errors prefixed with the path).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);
// Native family: copies DIR/model.safetensors into `transformer` (every parameter, exact
// shapes).
absl::Status LoadWeights(const std::string& dir, TransformerImpl& transformer);
// Writes DIR/config.json and DIR/model.safetensors (float32, or bfloat16 if `bf16`).
absl::Status SaveModelDirectory(const std::string& dir, const ModelConfig& config,
                                const TransformerImpl& transformer, bool bf16 = false);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_MODEL_H_
