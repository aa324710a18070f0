#include "engine/eval/report.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/eval/plot.h"
#include "nlohmann/json.hpp"

namespace mnemo::eval {
namespace {

namespace fs = std::filesystem;

bool Ran(const ModeResult& m) { return m.mode.skip_reason.empty() && m.totals.bytes > 0; }

std::string ExitLabel(const ExitResult& e) {
  return e.full_depth() ? std::string("full depth") : absl::StrFormat("%.2f", e.threshold);
}

// Digits and plain ASCII stay; anything else is escaped so the Markdown table stays intact.
std::string Printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '|' && c != '`') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  return out;
}

void RenderMemoryTable(const EvalReport& r, std::string& md) {
  const ModeResult* none = FindMode(r, "none");
  md += "## Bits per byte by memory mode\n\n";
  md += "| mode | bpb | Δ vs no memory | bytes | time (s) | bytes/s |\n";
  md += "|---|---:|---:|---:|---:|---:|\n";
  for (const ModeResult& m : r.modes) {
    if (!Ran(m)) {
      absl::StrAppend(&md, "| ", m.mode.label, " | — | — | — | — | skipped: ",
                      m.mode.skip_reason.empty() ? "not run" : m.mode.skip_reason, " |\n");
      continue;
    }
    std::string delta = "—";
    if (none != nullptr && &m != none) {
      delta = absl::StrFormat("%+.4f (%+.1f%%)", m.totals.Bpb() - none->totals.Bpb(),
                              100.0 * (m.totals.Bpb() / none->totals.Bpb() - 1.0));
    }
    absl::StrAppendFormat(&md, "| %s | %.4f | %s | %d | %.1f | %.0f |\n", m.mode.label,
                          m.totals.Bpb(), delta, m.totals.bytes, m.seconds,
                          m.seconds > 0 ? m.totals.bytes / m.seconds : 0.0);
  }
  md += "\n![bpb per memory mode](eval_memory.png)\n\n";
}

void RenderExitTable(const EvalReport& r, std::string& md) {
  if (r.exits.empty()) return;
  const ExitResult* full = FullDepthExit(r);
  absl::StrAppend(&md, "## Early exit (CALM softmax response)\n\nMemory: ", r.exit_memory,
                  ". A token leaves after the first layer whose shared-head top-1 minus top-2 "
                  "probability reaches the threshold.\n\n");
  md += "| threshold | avg layers | % of depth | bpb | Δ vs full depth | time (s) |\n";
  md += "|---|---:|---:|---:|---:|---:|\n";
  for (const ExitResult& e : r.exits) {
    std::string delta = "—";
    if (full != nullptr && &e != full) {
      delta = absl::StrFormat("%+.2f%%", 100.0 * (e.totals.Bpb() / full->totals.Bpb() - 1.0));
    }
    absl::StrAppendFormat(&md, "| %s | %.2f | %.0f%% | %.4f | %s | %.1f |\n", ExitLabel(e),
                          e.totals.AvgLayers(), 100.0 * e.totals.AvgLayers() / r.config.n_layers,
                          e.totals.Bpb(), delta, e.seconds);
  }
  md += "\n![avg layers vs bpb](eval_exit.png)\n\n";
}

void RenderPasskeyTable(const EvalReport& r, std::string& md) {
  if (r.passkey.empty()) return;
  md += "## Passkey retrieval\n\n";
  md += "`PASSKEY = \"<5 digits>\"`, then at least *distance* bytes of held-out code, then "
        "`PASSKEY = \"`; 5 bytes generated greedily must equal the digits. kNN off = XL + "
        "compressive memory only.\n\n";
  md += "| distance (bytes) | kNN | kNN entries | exact | digits | time (s) | sample outputs |\n";
  md += "|---:|---|---:|---:|---:|---:|---|\n";
  for (const PasskeyResult& p : r.passkey) {
    std::string samples;
    for (size_t i = 0; i < p.outputs.size() && i < 3; ++i) {
      absl::StrAppend(&samples, i ? ", " : "", "`", Printable(p.outputs[i]), "` (want ",
                      p.expected.size() > i ? p.expected[i] : "?", ")");
    }
    absl::StrAppendFormat(&md, "| %d | %s | %s | %d/%d (%.0f%%) | %d/%d | %.1f | %s |\n",
                          p.distance, p.knn ? "on" : "off",
                          p.knn ? FormatEntries(p.knn_mem_len) : std::string("—"), p.correct,
                          p.trials, 100.0 * p.Accuracy(), p.digits_correct,
                          p.trials * kPasskeyDigits, p.seconds, samples);
  }
  md += "\n";
}

}  // namespace

const ModeResult* FindMode(const EvalReport& report, const std::string& key) {
  for (const ModeResult& m : report.modes) {
    if (m.mode.key == key && Ran(m)) return &m;
  }
  return nullptr;
}

const ModeResult* FullMemoryMode(const EvalReport& report) {
  const ModeResult* last = nullptr;
  for (const ModeResult& m : report.modes) {
    if (Ran(m) && !m.mode.no_memory) last = &m;
  }
  return last;
}

const ExitResult* FullDepthExit(const EvalReport& report) {
  for (const ExitResult& e : report.exits) {
    if (e.full_depth()) return &e;
  }
  return nullptr;
}

std::string RenderMarkdown(const EvalReport& r) {
  const model::ModelConfig& c = r.config;
  std::string md = "# mnemo-eval results\n\n";
  absl::StrAppendFormat(
      &md,
      "- Model: `%s` (%s): %d layers, d_model %d, %d heads, %d parameters; seg_len %d, "
      "mem_len %d, cmem_len %d x rate %d, kNN layer %d (top-%d, default %d entries)\n",
      r.model_dir, c.name, c.n_layers, c.d_model, c.n_heads, r.parameters, c.seg_len, c.mem_len,
      c.cmem_len, c.cmem_rate, c.knn_layer, c.knn_topk, c.knn_mem_len);
  int64_t bytes = 0;
  for (int64_t b : r.file_bytes) bytes += b;
  absl::StrAppendFormat(&md,
                        "- Data: %d held-out files of >= %d bytes from `%s`, %d bytes scored per "
                        "mode%s\n",
                        r.files.size(), r.min_bytes, r.data_source, bytes,
                        r.max_bytes_per_file > 0
                            ? absl::StrCat(" (files cut to ", r.max_bytes_per_file, " bytes)")
                            : std::string());
  absl::StrAppendFormat(&md, "- Run: %s, %.0f s, %d threads, %d tokens per Forward call\n",
                        r.started_utc, r.seconds, r.threads, r.chunk);
  absl::StrAppend(&md, "- Command: `", r.command, "`\n\n");
  md += "Byte i of a file is scored with the log-probs the model emits after [BOS, byte 0 .. "
        "byte i-1] (the Score RPC's convention); bpb = -Σ log p / ln 2 / bytes. Memory never "
        "crosses files. *No memory* scores each seg_len-byte segment alone from a fresh "
        "memory, so the first byte of every segment is conditioned on BOS only.\n\n";

  RenderMemoryTable(r, md);
  RenderExitTable(r, md);
  RenderPasskeyTable(r, md);

  md += "## Targets (issue 3)\n\n";
  for (const TargetCheck& t : CheckTargets(r)) {
    absl::StrAppend(&md, "- **", TargetStateName(t.state), "** — ", t.target,
                    t.detail.empty() ? "" : ": ", t.detail, "\n");
  }
  if (!r.notes.empty()) {
    md += "\n## Notes\n\n";
    for (const std::string& n : r.notes) absl::StrAppend(&md, "- ", n, "\n");
  }
  return md;
}

std::string RenderJson(const EvalReport& r) {
  nlohmann::json j;
  j["command"] = r.command;
  j["started_utc"] = r.started_utc;
  j["seconds"] = r.seconds;
  j["threads"] = r.threads;
  j["chunk"] = r.chunk;
  j["model"] = {{"dir", r.model_dir},
                {"config", nlohmann::json::parse(model::ModelConfigToJson(r.config), nullptr,
                                                 /*allow_exceptions=*/false)},
                {"parameters", r.parameters}};
  j["data"] = {{"source", r.data_source},
               {"min_bytes", r.min_bytes},
               {"max_bytes_per_file", r.max_bytes_per_file}};
  for (size_t i = 0; i < r.files.size(); ++i) {
    j["data"]["files"].push_back({{"path", r.files[i]}, {"bytes", r.file_bytes[i]}});
  }
  j["modes"] = nlohmann::json::array();
  for (const ModeResult& m : r.modes) {
    nlohmann::json row = {{"key", m.mode.key},
                          {"label", m.mode.label},
                          {"no_memory", m.mode.no_memory},
                          {"compressive", m.mode.options.compressive},
                          {"knn", m.mode.options.knn},
                          {"knn_mem_len", m.mode.options.knn_mem_len}};
    if (!Ran(m)) {
      row["skipped"] = m.mode.skip_reason.empty() ? "not run" : m.mode.skip_reason;
    } else {
      row["bpb"] = m.totals.Bpb();
      row["logprob"] = m.totals.logprob;
      row["bytes"] = m.totals.bytes;
      row["seconds"] = m.seconds;
      row["file_bpb"] = m.file_bpb;
    }
    j["modes"].push_back(row);
  }
  j["exit_memory"] = r.exit_memory;
  j["exit"] = nlohmann::json::array();
  for (const ExitResult& e : r.exits) {
    // Through %g so 0.9f is written as 0.9, not 0.8999999761581421.
    const double threshold = std::stod(absl::StrFormat("%g", e.threshold));
    j["exit"].push_back({{"threshold", e.full_depth() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(threshold)},
                         {"full_depth", e.full_depth()},
                         {"avg_layers", e.totals.AvgLayers()},
                         {"bpb", e.totals.Bpb()},
                         {"bytes", e.totals.bytes},
                         {"seconds", e.seconds}});
  }
  j["passkey"] = nlohmann::json::array();
  for (const PasskeyResult& p : r.passkey) {
    nlohmann::json outputs = nlohmann::json::array();
    for (const std::string& o : p.outputs) outputs.push_back(Printable(o));
    j["passkey"].push_back({{"distance", p.distance},
                            {"knn", p.knn},
                            {"knn_mem_len", p.knn_mem_len},
                            {"correct", p.correct},
                            {"trials", p.trials},
                            {"accuracy", p.Accuracy()},
                            {"digits_correct", p.digits_correct},
                            {"expected", p.expected},
                            {"outputs", outputs},
                            {"seconds", p.seconds}});
  }
  j["targets"] = nlohmann::json::array();
  for (const TargetCheck& t : CheckTargets(r)) {
    j["targets"].push_back(
        {{"target", t.target}, {"state", TargetStateName(t.state)}, {"detail", t.detail}});
  }
  j["notes"] = r.notes;
  return j.dump(2) + "\n";
}

absl::Status WriteTextFiles(const std::string& out_dir,
                            absl::Span<const std::pair<std::string, std::string>> files) {
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", out_dir, ": ", error.message()));
  }
  for (const auto& [name, text] : files) {
    const std::string path = (fs::path(out_dir) / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteReportFiles(const EvalReport& report, const std::string& out_dir) {
  return WriteTextFiles(out_dir, {
                                     {"eval.md", RenderMarkdown(report)},
                                     {"eval.json", RenderJson(report)},
                                     {kMemoryPlotData, MemoryPlotData(report)},
                                     {kExitPlotData, ExitPlotData(report)},
                                 });
}

}  // namespace mnemo::eval
