// Full-attention baseline memory (issue 5): every query sees all past positions up to
// `history`, with no compressed or kNN memory: a SessionMemory whose XL window (mem_len) is the
// whole history. Built from the public SessionMemory API, so Model::Forward runs on it
// unchanged; its per-token cost grows with history (that is what the baseline shows).
#ifndef MNEMO_TOOLS_DECODE_BENCH_FULL_ATTENTION_MEMORY_H_
#define MNEMO_TOOLS_DECODE_BENCH_FULL_ATTENTION_MEMORY_H_

#include <cstdint>

#include "engine/memory/session_memory.h"
#include "engine/model/model_config.h"

namespace mnemo::tools {

// An empty memory whose queries attend to the last `history` positions (mem_len = history;
// ring of history + seg_len slots per layer: 2 * heads * d_head * 4 bytes per slot and layer).
// Relative distances are clamped at the model's MaxDistance, as in every memory.
memory::SessionMemory NewFullAttentionMemory(const model::ModelConfig& config, int64_t history);

// Marks positions [0, positions) of a fresh full-attention memory as held, with synthetic keys
// and values drawn from N(0, 1), without running the model (a real prefill over a full-attention
// memory costs O(history^2)). Attention's cost does not depend on the values, only on how many
// positions are visible, so decode timings on it match a real prefill's (the bench checks this
// at the sizes it can prefill for real). positions <= history.
void FillSynthetic(memory::SessionMemory& memory, int64_t positions);

}  // namespace mnemo::tools

#endif  // MNEMO_TOOLS_DECODE_BENCH_FULL_ATTENTION_MEMORY_H_
