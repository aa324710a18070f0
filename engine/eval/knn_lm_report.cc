#include "engine/eval/knn_lm_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/eval/report.h"
#include "nlohmann/json.hpp"

namespace mnemo::eval {
namespace {

std::string IndexText(const datastore::Manifest& m) {
  if (m.index_type == datastore::IndexType::kFlat) return "IndexFlatL2 (exact)";
  return absl::StrFormat("IVF%d,PQ%dx%d (approximate; hits re-scored exactly from keys.f16)",
                         m.nlist, m.pq_m, m.pq_nbits);
}

double Change(double after, double before) { return before == 0 ? 0 : after / before - 1.0; }

std::string GridTable(const KnnLmGrid& grid, const KnnLmTotals& totals, size_t chosen) {
  std::string out = "| λ \\ T |";
  std::string rule = "|---|";
  for (float t : grid.temperatures) {
    absl::StrAppend(&out, " ", t, " |");
    rule += "---:|";
  }
  absl::StrAppend(&out, "\n", rule, "\n");
  for (size_t l = 0; l < grid.lambdas.size(); ++l) {
    absl::StrAppend(&out, "| ", grid.lambdas[l], " |");
    for (size_t t = 0; t < grid.temperatures.size(); ++t) {
      const size_t p = l * grid.temperatures.size() + t;
      const std::string cell = absl::StrFormat("%.4f", totals.Bpb(p));
      absl::StrAppend(&out, " ", p == chosen ? absl::StrCat("**", cell, "**") : cell, " |");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string ResultRow(const char* name, size_t files, const KnnLmTotals& t, size_t chosen) {
  const double lm = t.lm.Bpb();
  const double knn = t.Bpb(chosen);
  return absl::StrFormat("| %s | %d | %d | %.4f | %.4f | %+.4f (%+.2f%%) |\n", name, files,
                         t.lm.bytes, lm, knn, knn - lm, 100.0 * Change(knn, lm));
}

nlohmann::json TotalsJson(const KnnLmTotals& t) {
  nlohmann::json j;
  j["bytes"] = t.lm.bytes;
  j["lm_bpb"] = t.lm.Bpb();
  std::vector<double> bpb;
  for (size_t p = 0; p < t.logprob.size(); ++p) bpb.push_back(t.Bpb(p));
  j["knn_lm_bpb"] = bpb;
  j["queries"] = t.queries;
  j["hits"] = t.hits;
  j["mean_nearest_sq_l2"] = t.queries ? t.nearest_distance / double(t.queries) : 0.0;
  j["mean_kth_sq_l2"] = t.queries ? t.kth_distance / double(t.queries) : 0.0;
  j["forward_seconds"] = t.forward_seconds;
  j["search_seconds"] = t.search_seconds;
  return j;
}

}  // namespace

std::string RenderKnnLmMarkdown(const KnnLmReport& r) {
  const KnnLmSweep& s = r.sweep;
  const datastore::Manifest& m = r.manifest;
  const KnnLmTotals all = [&] {
    KnnLmTotals a;
    a.logprob.assign(s.grid.size(), 0.0);
    for (const KnnLmTotals& f : s.files) a.Add(f);
    return a;
  }();
  std::string out = "# mnemo-eval: kNN-LM datastore sweep\n\n";
  absl::StrAppend(&out, "- Model: `", r.model_dir, "`; keys computed with ", r.memory, "\n");
  absl::StrAppend(&out, "- Datastore: `", r.datastore_dir, "`: ", m.entries, " entries (d ", m.d,
                  "), ", IndexText(m), "; built from ", m.corpus_files, " files / ",
                  m.corpus_bytes, " bytes of `", m.corpus, "` in ",
                  absl::StrFormat("%.0f", m.build_seconds), " s\n");
  absl::StrAppend(&out, "- Search: k = ", r.k,
                  m.index_type == datastore::IndexType::kIvfPq
                      ? absl::StrCat(", nprobe = ", r.nprobe)
                      : std::string(),
                  "; one search per byte, every (λ, T) evaluated on the same hits\n");
  absl::StrAppend(&out, "- Data: ", r.files.size(), " held-out files from `", r.data_source,
                  "`: ", s.split.validation.size(), " validation (files 1, 3, 5, ... in sorted "
                  "order), ", s.split.test.size(), " test (files 2, 4, 6, ...)\n");
  absl::StrAppend(&out, "- Run: ", r.started_utc, ", ", absl::StrFormat("%.0f", r.seconds),
                  " s, ", r.threads, " threads, ", r.chunk, " tokens per Forward call\n");
  absl::StrAppend(&out, "- Command: `", r.command, "`\n\n");

  absl::StrAppend(&out, "## Result: λ = ", s.grid.lambda(s.chosen), ", T = ",
                  s.grid.temperature(s.chosen), " (lowest validation bpb)\n\n");
  out += "| split | files | bytes | model alone bpb | + kNN-LM bpb | change |\n";
  out += "|---|---:|---:|---:|---:|---:|\n";
  out += ResultRow("validation (tuned on)", s.split.validation.size(), s.validation, s.chosen);
  out += ResultRow("**test**", s.split.test.size(), s.test, s.chosen);
  const double test_change = Change(s.test.Bpb(s.chosen), s.test.lm.Bpb());
  absl::StrAppend(&out, "\nTarget (issue 4): test bpb at least 3% lower with the datastore: **",
                  s.test.lm.bytes == 0 ? "not run (no test files)"
                  : test_change <= -0.03 ? "met"
                                         : "not met",
                  "** (", absl::StrFormat("%+.2f%%", 100.0 * test_change), ").\n\n");

  absl::StrAppend(&out, "## Validation bpb per (λ, T)\n\nλ = 0 is the model alone. Bold: chosen.\n\n",
                  GridTable(s.grid, s.validation, s.chosen), "\n");
  absl::StrAppend(&out, "## Test bpb per (λ, T) (reference only, not used to choose)\n\n",
                  GridTable(s.grid, s.test, s.chosen), "\n");

  out += "## Per file (chosen λ, T)\n\n| file | split | bytes | model alone | + kNN-LM | change |\n";
  out += "|---|---|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < s.files.size(); ++i) {
    const KnnLmTotals& f = s.files[i];
    absl::StrAppend(&out, absl::StrFormat("| `%s` | %s | %d | %.4f | %.4f | %+.2f%% |\n",
                                          i < r.files.size() ? r.files[i] : "?",
                                          i % 2 == 0 ? "validation" : "test", f.lm.bytes,
                                          f.lm.Bpb(), f.Bpb(s.chosen),
                                          100.0 * Change(f.Bpb(s.chosen), f.lm.Bpb())));
  }

  out += "\n## Retrieval\n\n";
  const double q = std::max<double>(1.0, double(all.queries));
  absl::StrAppend(&out, absl::StrFormat(
      "- %d queries, %.1f hits per query; mean squared L2 to the nearest hit %.2f, to the "
      "k-th %.2f\n",
      all.queries, double(all.hits) / q, all.nearest_distance / q, all.kth_distance / q));
  absl::StrAppend(&out, absl::StrFormat(
      "- Forward %.1f s, search %.1f s (%.1f us per query, searched %d queries per call)\n",
      all.forward_seconds, all.search_seconds, 1e6 * all.search_seconds / q, r.chunk));
  if (r.latency) {
    const SearchLatency& l = *r.latency;
    absl::StrAppend(&out, absl::StrFormat(
        "- One query per Search call (%d real keys): mean %.0f us, p50 %.0f us, p99 %.0f us; "
        "all %d in one call: %.1f us per query\n",
        l.queries, l.single_mean_us, l.single_p50_us, l.single_p99_us, l.queries,
        l.batched_us_per_query));
  }
  return out;
}

std::string RenderKnnLmJson(const KnnLmReport& r) {
  const KnnLmSweep& s = r.sweep;
  nlohmann::json j;
  j["command"] = r.command;
  j["started_utc"] = r.started_utc;
  j["seconds"] = r.seconds;
  j["threads"] = r.threads;
  j["chunk"] = r.chunk;
  j["model_dir"] = r.model_dir;
  j["memory"] = r.memory;
  j["datastore"] = nlohmann::json::parse(datastore::ManifestToJson(r.manifest));
  j["datastore"]["dir"] = r.datastore_dir;
  j["k"] = r.k;
  j["nprobe"] = r.nprobe;
  j["data_source"] = r.data_source;
  j["grid"] = {{"lambdas", s.grid.lambdas}, {"temperatures", s.grid.temperatures},
               {"pair_order", "lambda-major: pair = lambda_index * temperatures + t_index"}};
  j["chosen"] = {{"pair", s.chosen},
                 {"lambda", s.grid.lambda(s.chosen)},
                 {"temperature", s.grid.temperature(s.chosen)}};
  j["validation"] = TotalsJson(s.validation);
  j["test"] = TotalsJson(s.test);
  nlohmann::json files = nlohmann::json::array();
  for (size_t i = 0; i < s.files.size(); ++i) {
    nlohmann::json f = TotalsJson(s.files[i]);
    f["path"] = i < r.files.size() ? r.files[i] : "";
    f["split"] = i % 2 == 0 ? "validation" : "test";
    files.push_back(f);
  }
  j["files"] = files;
  if (r.latency) {
    j["search_latency"] = {{"queries", r.latency->queries},
                           {"single_mean_us", r.latency->single_mean_us},
                           {"single_p50_us", r.latency->single_p50_us},
                           {"single_p99_us", r.latency->single_p99_us},
                           {"batched_us_per_query", r.latency->batched_us_per_query}};
  }
  return j.dump(2) + "\n";
}

absl::Status WriteKnnLmReportFiles(const KnnLmReport& report, const std::string& out_dir) {
  return WriteTextFiles(out_dir, {
                                     {"knn_lm_eval.md", RenderKnnLmMarkdown(report)},
                                     {"knn_lm_eval.json", RenderKnnLmJson(report)},
                                 });
}

}  // namespace mnemo::eval
