// KnnLmReport: one mnemo-eval kNN-LM sweep (--datastore) and its renderings (Markdown, JSON).
//
// A plain value: the sweep plus what is needed to reproduce it. Rendering is pure;
// WriteKnnLmReportFiles does the I/O (OUT/knn_lm_eval.md and OUT/knn_lm_eval.json, names apart
// from eval.md so a sweep never overwrites the memory-mode report).
#ifndef MNEMO_ENGINE_EVAL_KNN_LM_REPORT_H_
#define MNEMO_ENGINE_EVAL_KNN_LM_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/datastore/manifest.h"
#include "engine/eval/knn_lm_scorer.h"
#include "engine/eval/knn_lm_sweep.h"

namespace mnemo::eval {

struct KnnLmReport {
  std::string command;
  std::string started_utc;
  double seconds = 0;
  int threads = 0;
  int chunk = 0;
  std::string model_dir;
  std::string memory;  // the session memory the keys were computed with, in words

  std::string datastore_dir;
  datastore::Manifest manifest;
  int k = 0;
  int nprobe = 0;

  std::string data_source;
  std::vector<std::string> files;   // [documents], corpus order
  KnnLmSweep sweep;
  std::optional<SearchLatency> latency;
};

std::string RenderKnnLmMarkdown(const KnnLmReport& report);
std::string RenderKnnLmJson(const KnnLmReport& report);
absl::Status WriteKnnLmReportFiles(const KnnLmReport& report, const std::string& out_dir);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_KNN_LM_REPORT_H_
