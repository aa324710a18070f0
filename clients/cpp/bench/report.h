// Report: mnemo-bench's outputs — the human-readable tables on stdout and the JSON document.
//
// The JSON holds every setting and every number the tables show, in seconds (tables show
// milliseconds); its layout is documented in docs/bench.md and versioned by "format".
// Pure functions of their arguments.
#ifndef MNEMO_CLIENTS_CPP_BENCH_REPORT_H_
#define MNEMO_CLIENTS_CPP_BENCH_REPORT_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clients/cpp/bench/level_result.h"
#include "clients/cpp/bench/load_config.h"

namespace mnemo::bench {

// The run's settings that are not per level, and what the server said about itself.
struct RunInfo {
  std::string target;
  int channels = 1;
  std::vector<int> concurrency;  // the levels, in the order they ran
  std::string prompts;           // "synthetic" or the prompt file
  int prompt_tokens = 0;         // requested bytes per prompt (0 with a file = the whole file)
  std::string model_name;        // from Models.ListModels; empty if it failed
  int model_layers = 0;
  std::string started_at;  // RFC 3339, UTC
  std::string command_line;
};

// One line describing the load: streams, requests or duration, lengths, modes.
std::string FormatSettings(const RunInfo& info, const LoadConfig& config);
// The block of numbers for one level.
std::string FormatLevel(const LevelResult& level, const RunInfo& info);
// One row per level, with the throughput relative to the first level.
std::string FormatSweep(const std::vector<LevelResult>& levels);

nlohmann::json ToJson(const RunInfo& info, const std::vector<LevelResult>& levels);

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_REPORT_H_
