// The model-family seam (docs/design.md §11, docs/adding-a-model-family.md): what the engine
// asks of an architecture, so that a new family (RoPE, grouped-query attention, sliding
// windows, learned positions, BPE or SentencePiece vocabularies) plugs in without touching the
// scheduler, the server or the memory code.
//
// A family is
//   - ModelFamily: stateless, one static instance per architecture, listed in
//     family_registry.cc. It parses config.json, makes the directory's tokenizer, and builds
//     the Network with its weights (its own tensor names).
//   - Network: one loaded network. Model (model.h) owns it and calls it for every forward
//     pass: prefill segments over a SessionMemory, the shared exit head, the pieces of a
//     batched decode step, and the memory layout a session of it needs.
// The native family is mnemo_xl_family.h ("mnemo-xl": Transformer-XL relative attention with
// compressive and kNN memory, byte vocabulary).
//
// Ownership and threads: a Network belongs to its Model and follows the Model's thread rules
// (model.h): one forward call at a time per memory, the weights read-only once served (batched
// decode shards read them from several workers at once). A ModelFamily holds no state and may
// be used from any thread.
#ifndef MNEMO_ENGINE_MODEL_FAMILY_H_
#define MNEMO_ENGINE_MODEL_FAMILY_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/memory/session_memory.h"
#include "engine/model/decode_step_state.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::model {

// One loaded network of a family: the forward entry points Model and BatchDecoder call.
// Shapes: B rows (sequences), S positions of a segment, d = config.d_model, V = vocab_size.
class Network {
 public:
  virtual ~Network() = default;

  // ---- Prefill: one segment of one sequence ----
  // tokens [1, S] int64 on the model's device, S <= config.seg_len, at positions
  // memory.next_position()...: runs every layer, appends the segment to `memory` (and commits
  // it), and returns the last layer's hidden states [1, S, d] before the final norm. If
  // `knn_lm_keys` is set it receives the kNN-LM datastore key of each position [1, S, d] (the
  // native family: the last layer's normed feed-forward input). Results must not depend on how
  // a sequence is split into segments (docs/design.md §2).
  virtual torch::Tensor ForwardSegment(const torch::Tensor& tokens, memory::SessionMemory& memory,
                                       torch::Tensor* knn_lm_keys) = 0;
  // CALM early exit with state propagation (Model::ForwardWithExit): each position leaves
  // after the first layer whose `measure` confidence reaches `threshold`; the layers it skips
  // still get its key/value from its exit state. `classifier` is set for kClassifier only.
  // Returns each position's exit hidden state [1, S, d]; exit_layers gets [1, S] int64,
  // 1-based.
  virtual torch::Tensor ForwardSegmentWithExit(const torch::Tensor& tokens,
                                               memory::SessionMemory& memory, float threshold,
                                               ExitMeasure measure,
                                               const ExitClassifierImpl* classifier,
                                               torch::Tensor* exit_layers) = 0;
  // The shared exit head (final norm + LM head): [..., d] -> [..., V] logits.
  virtual torch::Tensor Logits(const torch::Tensor& hidden) = 0;

  // ---- Memory layout ----
  // An empty batch-1 inference memory for one sequence of this network, laid out for
  // `options` (which rings, kNN store, float16 rings), on `device`.
  virtual memory::SessionMemory NewMemory(const MemoryOptions& options,
                                          const torch::Device& device) const = 0;
  // The shape NewMemory(options, ...) makes (memory::MemoryPool keys recycled memories by it).
  virtual memory::MemoryShape MemoryShapeFor(const MemoryOptions& options) const = 0;

  // ---- Decode rows: the pieces of a batched decode step (BatchDecoder) ----
  // BatchDecoder runs the loop (rows, CALM exits, commits); a family supplies each layer.
  virtual int num_layers() const = 0;
  // tokens [B] int64 -> [B, d], the first layer's input.
  virtual torch::Tensor Embed(const torch::Tensor& tokens) = 0;
  // Layer `layer` for the rows of one step: h [B, d] is every row's input (rows that exited
  // early included, so their keys/values still reach this layer's memory); returns the output
  // of the active rows [A, d]; `ffn_input` (if set) gets their kNN-LM keys [A, d].
  virtual torch::Tensor DecodeLayer(int layer, const torch::Tensor& h, DecodeStepState& rows,
                                    const ActiveRows& active, torch::Tensor* ffn_input) = 0;

  // Positions a sequence may reach: -1 = unbounded (relative or rotary positions over a
  // ring); a learned position table's size (GPT-2's n_positions) otherwise. Model::Forward
  // and BatchDecoder refuse to go past it (OUT_OF_RANGE).
  virtual int64_t max_sequence() const { return -1; }

  // ---- Weights ----
  virtual int64_t ParameterCount() const = 0;
  // Identifies the weights (an exit classifier records the weights it was trained for).
  virtual std::string WeightsChecksum() const = 0;
  // Readies the network for serving, once, before any forward call: rounds the weights for
  // `weight_dtype` (LoadOptions::weight_dtype; INVALID_ARGUMENT when they do not fit), moves
  // them to `device`, and caches what serving derives from them (packed products, tables).
  virtual absl::Status PrepareForServing(const torch::Device& device,
                                         torch::ScalarType weight_dtype) = 0;
  // Writes the model directory (config.json and weights) `config` describes into `dir`.
  // UNIMPLEMENTED for families mnemo only serves.
  virtual absl::Status Save(const std::string& dir, const ModelConfig& config) const = 0;
};

// One architecture: how its directories read. Stateless; see the header comment.
class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  // The config.json architecture this family serves ("mnemo-xl"; Hugging Face folders name
  // theirs in "architectures", e.g. "LlamaForCausalLM"). Unique among the registered families.
  virtual std::string_view architecture() const = 0;

  // config.json's text -> the config the engine reads (sizes, seg_len, the memory window, exit
  // thresholds). INVALID_ARGUMENT naming the field at fault; the caller prefixes the path.
  virtual absl::StatusOr<ModelConfig> ParseConfig(const std::string& json_text) const = 0;

  // The tokenizer of model directory `dir` (NOT_FOUND / INVALID_ARGUMENT naming the file).
  virtual absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> MakeTokenizer(
      const std::string& dir, const ModelConfig& config) const = 0;

  // Builds the network `config` describes and reads its weights from `dir` (the family's own
  // file and tensor names), on the CPU in float32; Model then calls PrepareForServing. Errors
  // name the file and the tensor (missing, unexpected, wrong shape or dtype, not finite).
  virtual absl::StatusOr<std::unique_ptr<Network>> LoadNetwork(const std::string& dir,
                                                               const ModelConfig& config) const = 0;

  // A randomly initialised network (tests, `mnemo-model init`), deterministic in `seed`.
  virtual std::unique_ptr<Network> RandomNetwork(const ModelConfig& config,
                                                 uint64_t seed) const = 0;

  // Applies the serving window (LoadOptions::window, ::sink_tokens; 0 and -1 = the config's)
  // to `config` before the network is built. INVALID_ARGUMENT when the family cannot (the
  // default: a window is part of what the native family was trained with).
  virtual absl::Status SetWindow(ModelConfig& config, int window, int sink_tokens) const;
};

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_FAMILY_H_
