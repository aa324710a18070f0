// mnemo-index: builds a shared kNN-LM datastore from a corpus (docs/datastores.md).
//
//   mnemo-index --model DIR --corpus DIR --out DIR [--extensions .py] [--max_bytes N]
//               [--split train|all] [--index auto|flat|ivfpq] [--nlist N --pq_m M]
//               [--flat_threshold N] [--max_train N] [--seed S] [--threads N] [--force]
//
// --split train (the default) leaves out the validation files listed in MODEL/split.json, so
// a datastore never holds text the model is evaluated on. All logic lives in engine/datastore;
// this file is flags and wiring.
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/datastore/builder.h"
#include "engine/datastore/corpus_files.h"
#include "engine/datastore/model_id.h"
#include "engine/model/model.h"
#include "engine/training/progress.h"
#include "engine/util/cpu_backend.h"

ABSL_FLAG(std::string, model, "", "model directory (config.json + model.safetensors)");
ABSL_FLAG(std::string, corpus, "", "directory of text files to index");
ABSL_FLAG(std::string, out, "", "datastore directory to write");
ABSL_FLAG(std::string, extensions, "", "comma-separated file extensions, e.g. .py (empty = all text)");
ABSL_FLAG(int64_t, max_bytes, 0, "index at most this many corpus bytes (0 = all)");
ABSL_FLAG(std::string, split, "train",
          "train: skip the validation files of MODEL/split.json; all: every file");
ABSL_FLAG(std::string, index, "auto", "auto (flat below --flat_threshold entries), flat or ivfpq");
ABSL_FLAG(int64_t, flat_threshold, 100000, "entries from which --index auto builds IVF-PQ");
ABSL_FLAG(int, nlist, 0, "IVF lists (0 = 4 * sqrt(entries))");
ABSL_FLAG(int, pq_m, 0, "PQ sub-quantizers, must divide d_model (0 = d_model / 8)");
ABSL_FLAG(int, pq_nbits, 8, "bits per PQ sub-code");
ABSL_FLAG(int64_t, max_train, 65536, "IVF-PQ training sample size cap");
ABSL_FLAG(uint64_t, seed, 1234, "seed of the training sample and k-means");
ABSL_FLAG(int, threads, 0, "LibTorch and FAISS threads (0 = their defaults)");
ABSL_FLAG(bool, force, false, "write into a non-empty --out");

namespace {

namespace ds = mnemo::datastore;
namespace fs = std::filesystem;

int Fail(const std::string& message) {
  std::fprintf(stderr, "mnemo-index: %s\n", message.c_str());
  return 1;
}

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrFormat("%.2f GB", bytes / 1e9);
  if (bytes >= 1e6) return absl::StrFormat("%.2f MB", bytes / 1e6);
  if (bytes >= 1e3) return absl::StrFormat("%.1f KB", bytes / 1e3);
  return absl::StrFormat("%.0f B", bytes);
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage(
      "mnemo-index --model DIR --corpus DIR --out DIR [--split train|all] [--index auto|flat|ivfpq]");
  absl::ParseCommandLine(argc, argv);
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  const std::string corpus_dir = absl::GetFlag(FLAGS_corpus);
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (model_dir.empty() || corpus_dir.empty() || out_dir.empty()) {
    return Fail("--model, --corpus and --out are required");
  }
  std::error_code error;
  if (fs::exists(out_dir, error) && !fs::is_empty(out_dir, error) && !absl::GetFlag(FLAGS_force)) {
    return Fail(absl::StrFormat("%s is not empty; pass --force to overwrite it", out_dir));
  }
  if (const int threads = absl::GetFlag(FLAGS_threads); threads > 0) {
    at::set_num_threads(threads);
    omp_set_num_threads(threads);
  }

  ds::BuildOptions options;
  const std::string index = absl::GetFlag(FLAGS_index);
  if (index == "auto") {
    options.index = ds::IndexChoice::kAuto;
  } else if (index == "flat") {
    options.index = ds::IndexChoice::kFlat;
  } else if (index == "ivfpq") {
    options.index = ds::IndexChoice::kIvfPq;
  } else {
    return Fail("--index must be auto, flat or ivfpq");
  }
  options.flat_threshold = absl::GetFlag(FLAGS_flat_threshold);
  options.nlist = absl::GetFlag(FLAGS_nlist);
  options.pq_m = absl::GetFlag(FLAGS_pq_m);
  options.pq_nbits = absl::GetFlag(FLAGS_pq_nbits);
  options.max_train = absl::GetFlag(FLAGS_max_train);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.corpus_root = fs::absolute(corpus_dir).string();

  ds::CorpusSelection selection;
  for (absl::string_view ext :
       absl::StrSplit(absl::GetFlag(FLAGS_extensions), ',', absl::SkipWhitespace())) {
    selection.extensions.emplace_back(ext);
  }
  selection.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  const std::string split = absl::GetFlag(FLAGS_split);
  if (split == "train") {
    selection.exclude_split_json = (fs::path(model_dir) / "split.json").string();
    if (!fs::exists(selection.exclude_split_json, error)) {
      return Fail(absl::StrFormat("--split train needs %s (the trainer's held-out list); pass "
                                  "--split all to index every file",
                                  selection.exclude_split_json));
    }
  } else if (split != "all") {
    return Fail("--split must be train or all");
  }

  auto model_id = ds::ComputeModelId(model_dir);
  if (!model_id.ok()) return Fail(std::string(model_id.status().message()));
  auto model = mnemo::model::Model::Load(model_dir, {});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  auto files = ds::SelectCorpusFiles(corpus_dir, selection);
  if (!files.ok()) return Fail(std::string(files.status().message()));
  int64_t total_bytes = 0;
  for (const ds::SourceFile& f : *files) total_bytes += f.bytes;
  std::fprintf(stderr, "mnemo-index: model %s, %zu files, %s -> %s\n",
               model_id->ToString().c_str(), files->size(), Bytes(double(total_bytes)).c_str(),
               out_dir.c_str());

  std::unique_ptr<mnemo::training::Progress> bar;
  std::string stage;
  int64_t stage_entries = 0;
  auto rate = [](double units, double seconds) {
    return seconds < 0.05 ? std::string("--") : Bytes(units / seconds);
  };
  auto on_progress = [&](const ds::BuildProgress& p) {
    if (p.stage != stage) {
      if (bar) bar->Finish(absl::StrFormat("%d entries", stage_entries));
      bar.reset();
      stage = p.stage;
      if (stage == "keys" || stage == "add") {
        bar = std::make_unique<mnemo::training::Progress>(stage == "keys" ? "keys " : "index");
      } else if (stage == "train") {
        std::fprintf(stderr, "training IVF-PQ on a sample of the keys...\n");
      }
    }
    stage_entries = p.entries;
    if (!bar) return;
    const double elapsed = bar->elapsed_seconds();
    if (stage == "keys") {
      bar->Update(double(p.bytes_done) / double(std::max<int64_t>(1, p.bytes_total)),
                  absl::StrFormat("file %d/%d | %s / %s | %s/s", p.file, p.files,
                                  Bytes(double(p.bytes_done)), Bytes(double(p.bytes_total)),
                                  rate(double(p.bytes_done), elapsed)));
    } else {
      bar->Update(double(p.entries) / double(std::max<int64_t>(1, p.bytes_total)),
                  absl::StrFormat("%d entries added | %s entries/s", p.entries,
                                  rate(double(p.entries), elapsed)));
    }
  };
  auto manifest = ds::BuildDatastore(**model, *model_id, *files, out_dir, options, on_progress);
  if (bar) bar->Finish(absl::StrFormat("%d entries", stage_entries));
  if (!manifest.ok()) return Fail(std::string(manifest.status().message()));
  const int64_t bytes = manifest->index_bytes + manifest->values_bytes + manifest->keys_bytes;
  std::printf(
      "datastore %s\n  model      %s\n  entries    %lld (d %d, %s)\n  corpus     %lld files, "
      "%s\n  on disk    %s (index %s, values %s, keys %s) = %.1f bytes/entry\n  build time "
      "%.1f s (%.0f entries/s)\n",
      out_dir.c_str(), manifest->model.ToString().c_str(),
      static_cast<long long>(manifest->entries), manifest->d,
      manifest->index_type == ds::IndexType::kFlat
          ? "IndexFlatL2"
          : absl::StrFormat("IVF%d,PQ%dx%d", manifest->nlist, manifest->pq_m, manifest->pq_nbits)
                .c_str(),
      static_cast<long long>(manifest->corpus_files), Bytes(double(manifest->corpus_bytes)).c_str(),
      Bytes(double(bytes)).c_str(), Bytes(double(manifest->index_bytes)).c_str(),
      Bytes(double(manifest->values_bytes)).c_str(), Bytes(double(manifest->keys_bytes)).c_str(),
      double(bytes) / double(manifest->entries), manifest->build_seconds,
      double(manifest->entries) / std::max(1e-9, manifest->build_seconds));
  return 0;
}
