// RelativeAttention: Transformer-XL multi-head attention with u/v biases and relative
// positions, over a layer's raw ring memory and compressed memory (docs/design.md §2).
//
//   score(t, j) = ((q_t + u) . k_j + (q_t + v) . r_{dist(t, j)}) / sqrt(d_head)
//
// r_d = W_r R_d with R the sinusoid of distance d (clamped). The same module serves training
// (autograd) and inference (r table cached). Not thread-safe.
//
// The kNN layer (Memorizing Transformer) also retrieves, per head, the top-k of its kNN memory
// by cosine similarity (queries and keys L2-normalised, a learned per-head scale instead of
// 1/sqrt(d)), softmaxes over those k alone, and mixes y = (1 - g) y_local + g y_knn with a
// learned per-head gate g = sigmoid(b). No gradient reaches the memory.
#ifndef MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_
#define MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include "engine/knn/l2_normalise.h"
#include "engine/memory/layer_memory.h"
#include "engine/memory/segment_plan.h"
#include "engine/memory/segment_write.h"
#include "engine/model/decode_step_state.h"
#include "engine/model/model_config.h"
#include "engine/model/small_matmul.h"

namespace mnemo::model {

// The kNN layer's epsilon for knn::L2Normalise of its keys and queries.
constexpr double kKnnNormEpsilon = 1e-6;

// Whether some query's kNN window [lo_i, hi_i) holds a retained entry of `store` (lo, hi: [Q]
// int64 CPU, as SegmentPlan::knn_lo / knn_hi).
bool AnyWindowHasEntries(const knn::KnnMemory& store, const torch::Tensor& lo,
                         const torch::Tensor& hi);

class RelativeAttentionImpl : public torch::nn::Module {
 public:
  RelativeAttentionImpl(const ModelConfig& config, int layer);

  // x: [B, S, d_model], the layer-normalised input of the segment write.plan() describes.
  // Appends the segment's keys/values (and any groups it completes, and kNN entries) through
  // `write`, then attends over the layer's rings (write.memory()).
  // sinusoid: [max_distance + 1, d_model]. Returns [B, S, d_model]. At inference on a batch-1
  // host memory the attention itself runs on the host (PrefillAttendHost), otherwise as
  // LibTorch ops (autograd, batches, other devices): the same function.
  torch::Tensor forward(const torch::Tensor& x, memory::LayerWrite write,
                        const torch::Tensor& sinusoid);

  // Batched decode (relative_attention_decode.cc): one new position per row, each row with its
  // own batch-1 memory. x: [B, d_model], the layer-normalised input of every row (exited rows
  // included: their keys/values still enter the memory, docs/design.md §5). Appends every row's
  // key/value (and completed compressed groups, and kNN entries) to memory layer `layer`, then
  // attends for the active rows only. Returns [A, d_model] for `active`. Inference only. With
  // packed weights an exited row's query is not computed: its share of the qkv product is the
  // key/value two thirds.
  torch::Tensor Decode(const torch::Tensor& x, int layer, DecodeStepState& rows,
                       const ActiveRows& active, const torch::Tensor& sinusoid);

  // Inference: computes the relative-position table once, and packs the weights the decode
  // path multiplies (small_matmul.h; strips of strip_type), and reuses them until cleared.
  void CachePositionTable(const torch::Tensor& sinusoid, torch::ScalarType strip_type);
  void ClearPositionTable();
  // Appends the cached tensors (table, packed weights), for Transformer to relocate.
  void AppendInferenceBuffers(std::vector<torch::Tensor*>& buffers);

  // Training: the attention-reconstruction loss of groups compressed since the last call.
  torch::Tensor TakeReconstructionLoss();

  // Keys or values of whole groups [B, H, n * rate, d_head] -> one slot each [B, H, n, d_head].
  torch::Tensor Compress(const torch::Tensor& grouped, bool keys);

 private:
  // [H, max_distance + 1, d_head]
  torch::Tensor PositionTable(const torch::Tensor& sinusoid);
  // The top-k entries of the kNN memory for each (normalised) query: keys/values
  // [B, H, S, k, dh], valid [B, H, S, k].
  struct KnnHits {
    torch::Tensor keys, values, valid;
  };
  // Both write the segment's normalised keys/values to the memory first; queries only see
  // positions before their raw window. Dense ring: exact, batched, per-row document starts.
  KnnHits RetrieveFromRing(const torch::Tensor& qn, const torch::Tensor& k, const torch::Tensor& v,
                           memory::LayerWrite write);
  // knn::KnnMemory (batch 1): exact while small, FAISS IVF beyond its threshold. Undefined
  // hits when no query's window holds an entry yet (a session younger than mem_len): the
  // search and the mix are skipped, as their gates would all be 0.
  KnnHits RetrieveFromStore(const torch::Tensor& qn, const torch::Tensor& k, const torch::Tensor& v,
                            memory::LayerWrite write);
  // Retrieves for the segment and returns y_knn mixed into y_local ([B, H, S, dh] both).
  // relative_attention_knn.cc, as the other kNN functions.
  torch::Tensor MixKnn(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& y_local, memory::LayerWrite write);
  // A segment's attention in one host pass (host_attention.h) for a batch-1 host float32
  // memory at inference (no autograd, cached position table): qkv [1, S, 3 * H * dh]
  // contiguous, the rings already holding the segment; each query's visible slots and
  // distances are read off the plan's masks, so it is the op path's function. Returns
  // [S, H * dh]. PrefillOnHost says whether it applies.
  bool PrefillOnHost(const torch::Tensor& x, const memory::LayerMemory& memory) const;
  torch::Tensor PrefillAttendHost(const torch::Tensor& qkv, const memory::LayerMemory& memory,
                                  const memory::SegmentPlan& plan, int64_t raw_used,
                                  int64_t cmp_used);
  // The reference attention, LibTorch ops over the rings: queries q [B, H, S, dh] of the
  // segment `plan` describes, over `memory`'s rings as they hold the segment (its keys and
  // values already written), each query seeing the slots and distances of the plan's masks.
  // Training, other devices and decode rows off the host use it; the host kernels
  // (PrefillAttendHost, DecodeAttendHost: host_attention.h) are its fast paths and are tested
  // against it. Returns [B, H, S, dh].
  torch::Tensor Attend(const torch::Tensor& q, const memory::LayerMemory& memory,
                       const memory::SegmentPlan& plan, const torch::Tensor& sinusoid);
  // Decode helpers: append every row's key/value; attend one way or the other.
  void DecodeAppend(const torch::Tensor& k, const torch::Tensor& v, int layer,
                    DecodeStepState& rows);
  // The active rows' queries q [A, H, dh] through Attend, row by row (each over its own
  // memory). Returns [A, H, dh].
  torch::Tensor DecodeAttendReference(const torch::Tensor& q, const torch::Tensor& sinusoid,
                                      int layer, DecodeStepState& rows, const ActiveRows& active);
  // DecodeStepState::host: the same over the rings in place (host_attention.h), from the active
  // rows' raw queries q [A, H, dh] (the kernel adds the biases and the scale); table [H, D, dh]
  // contiguous. Returns [A, H * dh].
  torch::Tensor DecodeAttendHost(const torch::Tensor& q, const torch::Tensor& table, int layer,
                                 DecodeStepState& rows, const ActiveRows& active);
  // The kNN mix itself, the reference for every path: y_local (qn's shape) mixed with the
  // softmax, over the valid hits, of scale * (qn . key), by the per-head gate. qn: L2-normalised
  // queries, [B, H, S, dh] (segments) or [A, H, dh] (decode rows); keys, values: qn's shape with
  // k before the last dimension; valid: the keys' shape without the last dimension.
  torch::Tensor MixKnnHits(const torch::Tensor& qn, const torch::Tensor& keys,
                           const torch::Tensor& values, const torch::Tensor& valid,
                           const torch::Tensor& y_local);
  // y [A, H, dh] mixed with the kNN hits of the active rows' queries q [A, H, dh].
  torch::Tensor DecodeMixKnn(const torch::Tensor& q, const torch::Tensor& y, int layer,
                             DecodeStepState& rows, const ActiveRows& active);
  // DecodeMixKnn's fast path for host rows (DecodeStepState::host): MixKnnHits in plain loops,
  // searching exact-mode stores with KnnMemory::SearchOne (no LibTorch op per row);
  // `searched[a]` says whether row a's window holds any entry.
  torch::Tensor DecodeMixKnnHost(const torch::Tensor& q, const torch::Tensor& y, int layer,
                                 DecodeStepState& rows, const ActiveRows& active,
                                 const std::vector<bool>& searched);
  // ||attn(q, old) - attn(q, compress(old))||^2 on detached inputs: trains the conv alone.
  void AddReconstructionLoss(const torch::Tensor& q, const torch::Tensor& k_groups,
                             const torch::Tensor& v_groups);

  const int heads_;
  const int d_head_;
  const int cmem_rate_;
  const Compression compression_;
  const float scale_;
  const int knn_topk_;

  torch::nn::Linear qkv_{nullptr};     // d_model -> 3 * H * d_head
  torch::nn::Linear out_{nullptr};     // H * d_head -> d_model
  torch::nn::Linear r_net_{nullptr};   // d_model -> H * d_head (W_r)
  torch::Tensor u_bias_;               // [H, d_head]
  torch::Tensor v_bias_;               // [H, d_head]
  torch::nn::Conv1d compress_k_{nullptr};  // conv compression only: H*d_head -> H*d_head
  torch::nn::Conv1d compress_v_{nullptr};
  torch::Tensor knn_scale_;            // [H], kNN layer only
  torch::Tensor knn_gate_;             // [H] gate logits b, kNN layer only
  torch::Tensor position_table_;       // cached [H, max_distance + 1, d_head]
  // Decode's packed copies of qkv, out and (conv compression) the kernels viewed [C, C * rate].
  PackedLinear packed_qkv_, packed_out_, packed_compress_k_, packed_compress_v_;
  torch::Tensor reconstruction_loss_;  // accumulated in training
};
TORCH_MODULE(RelativeAttention);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_
