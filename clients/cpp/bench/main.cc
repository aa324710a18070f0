// mnemo-bench — a gRPC load generator for a mnemo deployment. Flags, wiring and printing only:
// the load is driven by LoadRunner, the numbers come from Aggregate, the outputs from report.h
// and plot.h. Usage and the meaning of every number: docs/bench.md.
//
//   mnemo-bench [--target HOST:PORT] [--concurrency N|N,N,...] [--requests N | --duration 30s]
//               [--prompt_tokens N | --prompt_file F] [--max_new_tokens N] [--sessions fresh|reuse|remember]
//               [--early_exit on|off] [--exit_threshold T] [--json PATH] [--plot PATH.png] ...
//
// Exit status: 0 when every request succeeded; 1 when any failed or the run could not start or
// its outputs could not be written; 2 for invalid settings; 130 when interrupted (Ctrl-C: the
// requests in flight are cancelled and the partial results reported; a second Ctrl-C kills).
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "clients/cpp/bench/level_result.h"
#include "clients/cpp/bench/load_config.h"
#include "clients/cpp/bench/load_runner.h"
#include "clients/cpp/bench/plot.h"
#include "clients/cpp/bench/progress_line.h"
#include "clients/cpp/bench/prompt_source.h"
#include "clients/cpp/bench/report.h"
#include "clients/cpp/connection_flags.h"
#include "clients/cpp/mnemo_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address (any gRPC target).");
ABSL_FLAG(std::string, concurrency, "1",
          "Concurrent streams, or a comma-separated sweep (1,4,16,64): each level runs in turn.");
ABSL_FLAG(int32_t, requests, 0,
          "Measured requests per stream (default 10 when --duration is not given).");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "Measure for this long per level instead of a request count (e.g. 30s); requests in "
          "flight at the end finish and are counted.");
ABSL_FLAG(int32_t, warmup, 1, "Requests per stream before measuring (not in the results).");
ABSL_FLAG(int32_t, prompt_tokens, 128,
          "Prompt length: tokens for mnemo's byte-level models, where a token is a byte; for "
          "a BPE model (imported checkpoints) this many bytes of synthetic text, which are "
          "fewer tokens (the server reports how many): use --prompt_file for exact counts.");
ABSL_FLAG(std::string, prompt_file, "",
          "Take prompts from this UTF-8 file: successive --prompt_tokens windows (0 = the whole "
          "file) instead of synthetic text.");
ABSL_FLAG(int32_t, max_new_tokens, 64, "Tokens to generate per request.");
ABSL_FLAG(std::string, sessions, "fresh",
          "fresh: one-shot requests (a new, discarded memory each); reuse: each stream creates "
          "one session and sends all its requests on it; remember: as reuse, the sessions "
          "created with remember (recall on).");
ABSL_FLAG(std::string, early_exit, "off", "CALM early exit: on or off.");
ABSL_FLAG(std::optional<float>, exit_threshold, std::nullopt,
          "Early-exit confidence threshold in (0, 1] (with --early_exit on); unset = the "
          "model's calibrated value.");
ABSL_FLAG(std::string, exit_measure, "",
          "Early-exit confidence measure (with --early_exit on): softmax, saturation or "
          "classifier; empty = the model's default.");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Sampling seed; request i of the run uses seed + i.");
ABSL_FLAG(bool, stop_at_eos, false,
          "Let requests stop at end-of-sequence (default: every request generates exactly "
          "--max_new_tokens).");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(120),
          "Deadline of each request (the whole stream); past it the request fails with "
          "DEADLINE_EXCEEDED.");
ABSL_FLAG(int32_t, channels, 1,
          "gRPC channels (TCP connections) the streams are spread over.");
ABSL_FLAG(int32_t, max_errors, 100,
          "Stop a level (and skip the rest of a sweep) after this many failed requests; 0 = "
          "never.");
ABSL_FLAG(std::string, json, "", "Write the settings and all results as JSON to this file.");
ABSL_FLAG(std::string, plot, "", "Draw a PNG plot to this file (needs gnuplot).");
ABSL_FLAG(std::string, plot_script, "",
          "gnuplot script (default: the source tree's scripts/plot_bench.gp).");
ABSL_FLAG(bool, progress, true, "Show a progress line on stderr while running.");

namespace {

namespace bench = mnemo::bench;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;
constexpr int kMaxStreams = 4096;

constexpr char kUsage[] = R"(load generator for a mnemo server.

  mnemo-bench [--target HOST:PORT] [--concurrency N|N,N,...] [--requests N | --duration 30s]
              [--warmup N] [--prompt_tokens N | --prompt_file FILE] [--max_new_tokens N]
              [--sessions fresh|reuse|remember] [--early_exit on|off] [--exit_threshold T]
              [--exit_measure softmax|saturation|classifier]
              [--temperature T] [--seed S] [--deadline 120s] [--json PATH] [--plot PATH.png]

Prints a summary per level (and a sweep table for several levels) to stdout, a progress line
to stderr. See docs/bench.md.)";

std::atomic<bool> g_interrupted{false};

void OnInterrupt(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C kills
}

int UsageError(const std::string& message) {
  std::cerr << "mnemo-bench: " << message << "\nRun 'mnemo-bench --help' for usage.\n";
  return kExitUsage;
}

absl::StatusOr<std::vector<int>> ParseConcurrency(const std::string& text) {
  std::vector<int> levels;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1 || value > kMaxStreams) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--concurrency: '%s' is not a stream count in [1, %d] (use N or N,N,...)", part,
          kMaxStreams));
    }
    levels.push_back(value);
  }
  return levels;
}

// The per-level settings from the flags (concurrency is set per level later).
absl::StatusOr<bench::LoadConfig> ConfigFromFlags() {
  bench::LoadConfig c;
  const int requests = absl::GetFlag(FLAGS_requests);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  if (requests < 0) return absl::InvalidArgumentError("--requests must be >= 1");
  if (duration < absl::ZeroDuration() || duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError("--duration must be a positive, finite duration");
  }
  if (requests > 0 && duration > absl::ZeroDuration()) {
    return absl::InvalidArgumentError("give --requests or --duration, not both");
  }
  c.requests_per_stream = requests == 0 && duration == absl::ZeroDuration() ? 10 : requests;
  c.duration = duration;
  c.warmup_per_stream = absl::GetFlag(FLAGS_warmup);
  if (c.warmup_per_stream < 0) return absl::InvalidArgumentError("--warmup must be >= 0");

  c.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (c.max_new_tokens < 1) return absl::InvalidArgumentError("--max_new_tokens must be >= 1");
  const std::string sessions = absl::GetFlag(FLAGS_sessions);
  if (sessions == "fresh") {
    c.sessions = bench::SessionMode::kFresh;
  } else if (sessions == "reuse") {
    c.sessions = bench::SessionMode::kReuse;
  } else if (sessions == "remember") {
    c.sessions = bench::SessionMode::kRemember;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--sessions must be fresh, reuse or remember, got '", sessions, "'"));
  }
  const std::string early_exit = absl::GetFlag(FLAGS_early_exit);
  if (early_exit != "on" && early_exit != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--early_exit must be on or off, got '", early_exit, "'"));
  }
  c.early_exit = early_exit == "on";
  c.exit_threshold = absl::GetFlag(FLAGS_exit_threshold);
  if (c.exit_threshold.has_value()) {
    if (!c.early_exit) return absl::InvalidArgumentError("--exit_threshold needs --early_exit on");
    if (!(*c.exit_threshold > 0.0f && *c.exit_threshold <= 1.0f)) {
      return absl::InvalidArgumentError("--exit_threshold must be in (0, 1]");
    }
  }
  c.exit_measure = absl::GetFlag(FLAGS_exit_measure);
  if (!c.exit_measure.empty()) {
    if (!c.early_exit) return absl::InvalidArgumentError("--exit_measure needs --early_exit on");
    if (c.exit_measure != "softmax" && c.exit_measure != "saturation" &&
        c.exit_measure != "classifier") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--exit_measure must be softmax, saturation or classifier, got '", c.exit_measure,
          "'"));
    }
  }
  c.temperature = absl::GetFlag(FLAGS_temperature);
  if (!(c.temperature >= 0.0f)) return absl::InvalidArgumentError("--temperature must be >= 0");
  c.seed = absl::GetFlag(FLAGS_seed);
  c.stop_at_eos = absl::GetFlag(FLAGS_stop_at_eos);
  c.deadline = absl::GetFlag(FLAGS_deadline);
  if (c.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--deadline must be positive");
  }
  c.max_errors = absl::GetFlag(FLAGS_max_errors);
  if (c.max_errors < 0) return absl::InvalidArgumentError("--max_errors must be >= 0");

  const int prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  if (prompt_tokens < 0) return absl::InvalidArgumentError("--prompt_tokens must be >= 0");
  if (prompt_tokens == 0 && absl::GetFlag(FLAGS_prompt_file).empty() &&
      c.sessions == bench::SessionMode::kFresh) {
    return absl::InvalidArgumentError(
        "--prompt_tokens 0 needs --sessions reuse (a one-shot request needs a prompt)");
  }
  if (absl::GetFlag(FLAGS_channels) < 1) {
    return absl::InvalidArgumentError("--channels must be >= 1");
  }
  return c;
}

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> MakeChannels(
    const std::string& target, int count, const mnemo::client::ConnectionOptions& connection) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    // Channels with equal arguments would share one connection; a local subchannel pool and a
    // distinct argument give each channel its own.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("mnemo.bench.channel_index", i);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        mnemo::client::Connect(target, connection, args);
    if (!channel.ok()) return channel.status();
    channels.push_back(*std::move(channel));
  }
  return channels;
}

std::string PlotTitle(const bench::RunInfo& info, const bench::LoadConfig& c) {
  return absl::StrFormat("mnemo-bench: %s%s, prompt %d, max_new_tokens %d, sessions %s, "
                         "early exit %s",
                         info.model_name.empty() ? "" : info.model_name + ", ",
                         info.concurrency.size() == 1
                             ? absl::StrCat(info.concurrency[0], " streams")
                             : absl::StrCat("streams ", absl::StrJoin(info.concurrency, ",")),
                         info.prompt_tokens, c.max_new_tokens, bench::SessionModeName(c.sessions),
                         c.early_exit ? "on" : "off");
}

absl::Status WriteJson(const std::string& path, const nlohmann::json& json) {
  std::ofstream file(path);
  file << json.dump(2) << "\n";
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::StrContains(path, "clients/cpp/bench/");
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return UsageError(absl::StrCat("unexpected argument '", positional[1], "' (all settings are "
                                   "--flags)"));
  }

  absl::StatusOr<std::vector<int>> levels = ParseConcurrency(absl::GetFlag(FLAGS_concurrency));
  if (!levels.ok()) return UsageError(std::string(levels.status().message()));
  absl::StatusOr<bench::LoadConfig> base = ConfigFromFlags();
  if (!base.ok()) return UsageError(std::string(base.status().message()));

  const int prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const std::string prompt_file = absl::GetFlag(FLAGS_prompt_file);
  std::unique_ptr<bench::PromptSource> prompts;
  if (prompt_file.empty()) {
    prompts = bench::PromptSource::Synthetic(prompt_tokens);
  } else {
    absl::StatusOr<std::unique_ptr<bench::PromptSource>> from_file =
        bench::PromptSource::FromFile(prompt_file, prompt_tokens);
    if (!from_file.ok()) return UsageError(std::string(from_file.status().message()));
    prompts = std::move(*from_file);
  }

  bench::RunInfo info;
  info.target = absl::GetFlag(FLAGS_target);
  info.channels = absl::GetFlag(FLAGS_channels);
  info.concurrency = *levels;
  info.prompts = prompts->description();
  info.prompt_tokens = prompt_tokens;
  info.started_at = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  info.command_line = absl::StrJoin(argv, argv + argc, " ");

  absl::StatusOr<mnemo::client::ConnectionOptions> connection =
      mnemo::client::ConnectionOptionsFromFlags();
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> made =
      connection.ok() ? MakeChannels(info.target, info.channels, *connection)
                      : absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>>(
                            connection.status());
  absl::StatusOr<std::unique_ptr<mnemo::client::Client>> control_client =
      made.ok() ? mnemo::client::Client::Connect(
                      info.target, std::min(base->deadline, absl::Seconds(30)), *connection)
                : absl::StatusOr<std::unique_ptr<mnemo::client::Client>>(made.status());
  if (!control_client.ok()) {
    std::cerr << "mnemo-bench: " << control_client.status().message() << "\n";
    return 2;
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels = *std::move(made);
  std::vector<std::unique_ptr<mnemo::v1::Generation::Stub>> owned_stubs;
  std::vector<mnemo::v1::Generation::Stub*> stubs;
  for (const auto& channel : channels) {
    owned_stubs.push_back(mnemo::v1::Generation::NewStub(channel));
    stubs.push_back(owned_stubs.back().get());
  }
  // Sessions and model info go over their own channel, outside the measured streams.
  mnemo::client::Client& control = **control_client;
  absl::StatusOr<std::vector<mnemo::v1::Model>> models = control.ListModels();
  if (models.ok() && !models->empty()) {
    info.model_name = models->front().name();
    info.model_layers = models->front().layers();
  } else if (!models.ok()) {
    std::cerr << "mnemo-bench: warning: cannot list the server's models: "
              << absl::StatusCodeToString(models.status().code()) << ": "
              << models.status().message() << "\n";
  }

  std::signal(SIGINT, OnInterrupt);
  std::cout << bench::FormatSettings(info, *base) << std::flush;
  bench::ProgressLine progress(absl::GetFlag(FLAGS_progress));
  std::vector<bench::LevelResult> results;
  int exit_code = kExitOk;
  for (size_t level = 0; level < levels->size() && !g_interrupted.load(); ++level) {
    const int concurrency = (*levels)[level];
    bench::LoadConfig config = *base;
    config.concurrency = concurrency;
    config.api_key = connection->api_key;
    bench::LoadRunner runner(config, *prompts, stubs, control, progress, g_interrupted);
    absl::StatusOr<bench::LevelRecords> records = runner.Run();
    if (!records.ok()) {
      std::cerr << "mnemo-bench: " << concurrency << " streams: "
                << absl::StatusCodeToString(records.status().code()) << ": "
                << records.status().message() << "\n";
      exit_code = kExitFailed;
      break;
    }
    results.push_back(bench::Aggregate(*records));
    const bench::LevelResult& r = results.back();
    std::cout << bench::FormatLevel(r, info) << std::flush;
    if (r.failed > 0 || !r.warmup_errors.empty()) exit_code = kExitFailed;
    if (r.stopped == bench::StopReason::kMaxErrors) {
      std::cerr << "mnemo-bench: stopped after " << config.max_errors
                << " failed requests (--max_errors)"
                << (level + 1 < levels->size() ? "; remaining levels skipped" : "") << "\n";
      break;
    }
    if (r.stopped == bench::StopReason::kInterrupted) break;
  }
  if (results.size() > 1) std::cout << bench::FormatSweep(results) << std::flush;

  // Failures, once more, where scripts look for them.
  int64_t total = 0, failed = 0;
  std::map<std::string, bench::ErrorSummary> errors;
  for (const bench::LevelResult& r : results) {
    total += r.requests + r.warmup_requests;
    for (const auto* table : {&r.errors, &r.warmup_errors}) {
      for (const auto& [code, summary] : *table) {
        failed += summary.count;
        bench::ErrorSummary& e = errors[code];
        if (e.count == 0) e.first_message = summary.first_message;
        e.count += summary.count;
      }
    }
  }
  for (const auto& [code, summary] : errors) {
    std::cerr << absl::StrFormat("mnemo-bench: %d of %d requests failed with %s: %s\n",
                                 summary.count, total, code, summary.first_message);
  }
  if (failed > 0 && exit_code == kExitOk) exit_code = kExitFailed;
  if (g_interrupted.load()) exit_code = kExitInterrupted;

  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty() && !results.empty()) {
    absl::Status status = WriteJson(json_path, bench::ToJson(info, results));
    if (!status.ok()) {
      std::cerr << "mnemo-bench: " << status.message() << "\n";
      if (exit_code == kExitOk) exit_code = kExitFailed;
    }
  }
  const std::string plot_path = absl::GetFlag(FLAGS_plot);
  if (!plot_path.empty() && !results.empty()) {
    std::string script = absl::GetFlag(FLAGS_plot_script);
    if (script.empty()) script = bench::DefaultPlotScript();
    absl::Status status =
        bench::WritePlot(results, PlotTitle(info, *base), plot_path, script);
    if (!status.ok()) {
      std::cerr << "mnemo-bench: plot: " << status.message() << "\n";
      if (exit_code == kExitOk) exit_code = kExitFailed;
    }
  }
  return exit_code;
}
