#include "clients/cpp/bench/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mnemo::bench {
namespace {

constexpr int kJsonFormat = 1;

double Ms(double seconds) { return seconds * 1e3; }

std::string DistributionRow(const std::string& name, const Distribution& d) {
  return absl::StrFormat("  %-10s %9.2f %9.2f %9.2f %9.2f %9.2f %9d\n", name, Ms(d.mean),
                         Ms(d.p50), Ms(d.p90), Ms(d.p99), Ms(d.max), d.count);
}

std::string OneLine(const std::string& message) {
  std::string out;
  for (char c : message) out += (c == '\n' || c == '\r') ? ' ' : c;
  constexpr size_t kMax = 160;
  if (out.size() > kMax) out = out.substr(0, kMax) + "...";
  return out;
}

std::string ErrorsLine(const std::map<std::string, ErrorSummary>& errors) {
  if (errors.empty()) return "none\n";
  std::string out;
  bool first = true;
  for (const auto& [code, summary] : errors) {
    absl::StrAppendFormat(&out, "%s%s %d  first: \"%s\"\n", first ? "" : "             ", code,
                          summary.count, OneLine(summary.first_message));
    first = false;
  }
  return out;
}

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90},
          {"p99", d.p99},     {"max", d.max}};
}

nlohmann::json ErrorsJson(const std::map<std::string, ErrorSummary>& errors) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [code, summary] : errors) {
    out[code] = {{"count", summary.count}, {"first_message", summary.first_message}};
  }
  return out;
}

nlohmann::json ConfigJson(const RunInfo& info, const LoadConfig& c) {
  nlohmann::json j = {
      {"target", info.target},
      {"channels", info.channels},
      {"concurrency", info.concurrency},
      {"requests_per_stream", c.duration_mode() ? nlohmann::json(nullptr)
                                                : nlohmann::json(c.requests_per_stream)},
      {"duration_s", c.duration_mode() ? nlohmann::json(absl::ToDoubleSeconds(c.duration))
                                       : nlohmann::json(nullptr)},
      {"warmup_per_stream", c.warmup_per_stream},
      {"prompts", info.prompts},
      {"prompt_tokens", info.prompt_tokens},
      {"max_new_tokens", c.max_new_tokens},
      {"sessions", SessionModeName(c.sessions)},
      {"early_exit", c.early_exit},
      {"exit_threshold",
       c.exit_threshold ? nlohmann::json(*c.exit_threshold) : nlohmann::json(nullptr)},
      {"exit_measure",
       c.exit_measure.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.exit_measure)},
      {"temperature", c.temperature},
      {"seed", c.seed ? nlohmann::json(*c.seed) : nlohmann::json(nullptr)},
      {"stop_at_eos", c.stop_at_eos},
      {"deadline_s", absl::ToDoubleSeconds(c.deadline)},
      {"max_errors", c.max_errors},
  };
  return j;
}

}  // namespace

std::string FormatSettings(const RunInfo& info, const LoadConfig& c) {
  std::string load =
      c.duration_mode()
          ? absl::StrFormat("%s per level", absl::FormatDuration(c.duration))
          : absl::StrFormat("%d requests per stream", c.requests_per_stream);
  if (c.warmup_per_stream > 0) absl::StrAppendFormat(&load, " (+%d warmup)", c.warmup_per_stream);
  std::string prompt = info.prompts == "synthetic"
                           ? absl::StrFormat("%d-token synthetic prompts", info.prompt_tokens)
                           : absl::StrFormat("prompts from %s (%d tokens)", info.prompts,
                                             info.prompt_tokens);
  std::string sampling = c.temperature == 0.0f
                             ? std::string("greedy")
                             : absl::StrFormat("temperature %g", c.temperature);
  const std::string measure =
      c.exit_measure.empty() ? std::string("model's measure") : c.exit_measure;
  std::string exit = c.early_exit ? (c.exit_threshold
                                         ? absl::StrFormat("early exit on (%s, threshold %g)",
                                                           measure, *c.exit_threshold)
                                         : absl::StrFormat("early exit on (%s, model threshold)",
                                                           measure))
                                  : std::string("early exit off");
  std::string model = info.model_name.empty()
                          ? std::string("model unknown")
                          : absl::StrFormat("model %s (%d layers)", info.model_name,
                                            info.model_layers);
  return absl::StrFormat(
      "mnemo-bench -> %s, %s\n  %s, %s, max_new_tokens %d, sessions %s, %s, %s\n", info.target,
      model, load, prompt, c.max_new_tokens, SessionModeName(c.sessions), exit, sampling);
}

std::string FormatLevel(const LevelResult& r, const RunInfo& info) {
  std::string out = absl::StrFormat(
      "\n== %d streams: %d requests (%d ok, %d failed) in %.2f s%s\n", r.config.concurrency,
      r.requests, r.ok, r.failed, r.window_s,
      r.stopped == StopReason::kNone ? "" : absl::StrCat(", stopped: ", StopReasonName(r.stopped)));
  absl::StrAppendFormat(&out,
                        "throughput   %.1f output tokens/s  %.2f requests/s  (%d output tokens, "
                        "%d prompt tokens)\n",
                        r.output_tokens_per_s, r.requests_per_s, r.output_tokens,
                        r.usage_prompt_tokens);
  absl::StrAppendFormat(&out, "  %-10s %9s %9s %9s %9s %9s %9s\n", "ms", "mean", "p50", "p90",
                        "p99", "max", "samples");
  out += DistributionRow("TTFT", r.ttft);
  out += DistributionRow("ITL", r.itl);
  out += DistributionRow("request", r.latency);

  int64_t reported = 0;
  for (size_t layer = 1; layer < r.exit_layer_counts.size(); ++layer) {
    reported += r.exit_layer_counts[layer];
  }
  if (reported == 0) {
    out += "exit layer   not reported\n";
  } else {
    absl::StrAppendFormat(&out, "exit layer   mean %.2f", r.exit_layer_mean);
    if (info.model_layers > 0) absl::StrAppendFormat(&out, " of %d", info.model_layers);
    out += " ";
    for (size_t layer = 1; layer < r.exit_layer_counts.size(); ++layer) {
      if (r.exit_layer_counts[layer] == 0) continue;
      absl::StrAppendFormat(&out, "  L%d: %.1f%%", layer,
                            100.0 * r.exit_layer_counts[layer] / reported);
    }
    out += "\n";
  }
  std::string finish;
  for (const auto& [reason, count] : r.finish_reasons) {
    absl::StrAppendFormat(&finish, "%s%s %d", finish.empty() ? "" : "  ", reason, count);
  }
  absl::StrAppendFormat(&out, "finish       %s\n", finish.empty() ? "-" : finish);
  absl::StrAppend(&out, "errors       ", ErrorsLine(r.errors));
  if (!r.warmup_errors.empty()) {
    absl::StrAppend(&out, "warmup errs  ", ErrorsLine(r.warmup_errors));
  }
  absl::StrAppendFormat(&out, "client CPU   %.2f s = %.1f%% of one core", r.client_cpu_s,
                        r.client_cpu_percent);
  if (r.output_tokens > 0) {
    absl::StrAppendFormat(&out, " (%.0f us per output token)",
                          1e6 * r.client_cpu_s / r.output_tokens);
  }
  out += "\n";
  if (r.session_delete_failures > 0) {
    absl::StrAppendFormat(&out, "warning      %d sessions could not be deleted\n",
                          r.session_delete_failures);
  }
  return out;
}

std::string FormatSweep(const std::vector<LevelResult>& levels) {
  std::string out = absl::StrFormat("\n%7s %9s %7s %10s %8s %8s %9s %9s %9s %9s\n", "streams",
                                    "requests", "failed", "tokens/s", "speedup", "req/s",
                                    "TTFT p50", "TTFT p99", "ITL p50", "ITL p99");
  const double base = levels.empty() ? 0 : levels.front().output_tokens_per_s;
  for (const LevelResult& r : levels) {
    absl::StrAppendFormat(&out, "%7d %9d %7d %10.1f %7.2fx %8.2f %9.2f %9.2f %9.2f %9.2f\n",
                          r.config.concurrency, r.requests, r.failed, r.output_tokens_per_s,
                          base > 0 ? r.output_tokens_per_s / base : 0.0, r.requests_per_s,
                          Ms(r.ttft.p50), Ms(r.ttft.p99), Ms(r.itl.p50), Ms(r.itl.p99));
  }
  out += "(latencies in ms; speedup = tokens/s relative to the first row)\n";
  return out;
}

nlohmann::json ToJson(const RunInfo& info, const std::vector<LevelResult>& levels) {
  nlohmann::json out;
  out["tool"] = "mnemo-bench";
  out["format"] = kJsonFormat;
  out["started_at"] = info.started_at;
  out["command_line"] = info.command_line;
  out["model"] = {{"name", info.model_name}, {"layers", info.model_layers}};
  out["config"] = ConfigJson(info, levels.empty() ? LoadConfig() : levels.front().config);
  nlohmann::json rows = nlohmann::json::array();
  for (const LevelResult& r : levels) {
    nlohmann::json histogram = nlohmann::json::object();
    for (size_t layer = 0; layer < r.exit_layer_counts.size(); ++layer) {
      if (r.exit_layer_counts[layer] > 0) {
        histogram[std::to_string(layer)] = r.exit_layer_counts[layer];
      }
    }
    rows.push_back({
        {"concurrency", r.config.concurrency},
        {"stopped", StopReasonName(r.stopped)},
        {"requests", {{"total", r.requests}, {"ok", r.ok}, {"failed", r.failed}}},
        {"window_s", r.window_s},
        {"output_tokens", r.output_tokens},
        {"usage_generated_tokens", r.usage_generated_tokens},
        {"usage_prompt_tokens", r.usage_prompt_tokens},
        {"output_tokens_per_s", r.output_tokens_per_s},
        {"requests_per_s", r.requests_per_s},
        {"ttft_s", DistributionJson(r.ttft)},
        {"itl_s", DistributionJson(r.itl)},
        {"latency_s", DistributionJson(r.latency)},
        {"exit_layer", {{"histogram", histogram}, {"mean", r.exit_layer_mean}}},
        {"finish_reasons", r.finish_reasons},
        {"errors", ErrorsJson(r.errors)},
        {"warmup", {{"requests", r.warmup_requests}, {"errors", ErrorsJson(r.warmup_errors)}}},
        {"client_cpu_s", r.client_cpu_s},
        {"client_cpu_percent", r.client_cpu_percent},
        {"timeline", {{"bucket_s", r.timeline_bucket_s},
                      {"output_tokens_per_s", r.timeline_tokens_per_s}}},
        {"session_delete_failures", r.session_delete_failures},
    });
  }
  out["levels"] = rows;
  return out;
}

}  // namespace mnemo::bench
