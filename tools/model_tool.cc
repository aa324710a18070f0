// mnemo-model: model directory utilities.
//
//   mnemo-model init --out DIR [--layers N --d_model N --heads N --seg_len N --mem_len N
//                               --cmem_len N --cmem_rate N --compression mean|max|conv --seed N]
//       writes a randomly initialised model (config.json + model.safetensors).
//   mnemo-model info DIR
//       loads a model directory and prints its configuration and parameter count.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/util/cpu_backend.h"

ABSL_FLAG(std::string, out, "", "init: directory to write");
ABSL_FLAG(std::string, name, "mnemo-random", "init: model name");
ABSL_FLAG(int, layers, 4, "init: decoder layers");
ABSL_FLAG(int, d_model, 128, "init: model width");
ABSL_FLAG(int, heads, 4, "init: attention heads");
ABSL_FLAG(int, d_ff, 0, "init: feed-forward width (0 = 4 * d_model)");
ABSL_FLAG(int, seg_len, 128, "init: positions per ingestion segment");
ABSL_FLAG(int, mem_len, 128, "init: raw (XL) memory length");
ABSL_FLAG(int, cmem_len, 64, "init: compressed memory slots (0 = off)");
ABSL_FLAG(int, cmem_rate, 4, "init: positions per compressed slot");
ABSL_FLAG(std::string, compression, "mean", "init: mean, max or conv");
ABSL_FLAG(int, clamp_len, 1024, "init: largest relative distance with its own embedding");
ABSL_FLAG(uint64_t, seed, 1, "init: random seed");

namespace {

constexpr char kUsage[] =
    "mnemo-model init --out DIR [--layers N --d_model N --heads N --seg_len N --mem_len N "
    "--cmem_len N --cmem_rate N --compression mean|max|conv --seed N]\n"
    "mnemo-model info DIR";

int Fail(const std::string& message) {
  std::fprintf(stderr, "mnemo-model: %s\n", message.c_str());
  return 1;
}

void PrintInfo(const mnemo::model::Model& model, const std::string& dir) {
  const mnemo::model::ModelConfig& c = model.config();
  std::printf("%s: %s, %d layers, d_model %d, %d heads x %d, d_ff %d, vocab %d, %lld parameters\n",
              dir.c_str(), c.name.c_str(), c.n_layers, c.d_model, c.n_heads, c.d_head, c.d_ff,
              c.vocab_size, static_cast<long long>(model.ParameterCount()));
  std::printf("memory: seg_len %d, mem_len %d, cmem_len %d x rate %d (%s), clamp_len %d\n",
              c.seg_len, c.mem_len, c.cmem_len, c.cmem_rate, CompressionName(c.compression),
              c.clamp_len);
  if (c.knn_enabled()) {
    std::printf("kNN layer %d: top-%d of %d positions; CALM-trained exits: %s\n", c.knn_layer,
                c.knn_topk, c.knn_mem_len, c.exit_heads ? "yes" : "no");
  }
}

int Init() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("init needs --out DIR");
  mnemo::model::ModelConfig c;
  c.name = absl::GetFlag(FLAGS_name);
  c.n_layers = absl::GetFlag(FLAGS_layers);
  c.d_model = absl::GetFlag(FLAGS_d_model);
  c.n_heads = absl::GetFlag(FLAGS_heads);
  c.d_head = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  c.d_ff = absl::GetFlag(FLAGS_d_ff) > 0 ? absl::GetFlag(FLAGS_d_ff) : 4 * c.d_model;
  c.seg_len = absl::GetFlag(FLAGS_seg_len);
  c.mem_len = absl::GetFlag(FLAGS_mem_len);
  c.cmem_len = absl::GetFlag(FLAGS_cmem_len);
  c.cmem_rate = absl::GetFlag(FLAGS_cmem_rate);
  c.clamp_len = absl::GetFlag(FLAGS_clamp_len);
  if (c.n_heads <= 0 || c.d_model % c.n_heads != 0) {
    return Fail(absl::StrCat("--d_model ", c.d_model, " must be a multiple of --heads ", c.n_heads));
  }
  absl::StatusOr<mnemo::model::Compression> compression =
      mnemo::model::ParseCompression(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) return Fail(std::string(compression.status().message()));
  c.compression = *compression;
  if (absl::Status s = mnemo::model::ValidateModelConfig(c); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  auto model = mnemo::model::Model::Random(c, absl::GetFlag(FLAGS_seed));
  if (absl::Status s = model->Save(out); !s.ok()) return Fail(std::string(s.message()));
  PrintInfo(*model, out);
  return 0;
}

int Info(const std::string& dir) {
  auto model = mnemo::model::Model::Load(dir, {});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  PrintInfo(**model, dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() >= 2 && std::string(args[1]) == "init") return Init();
  if (args.size() == 3 && std::string(args[1]) == "info") return Info(args[2]);
  std::fprintf(stderr, "usage:\n%s\n", kUsage);
  return 2;
}
