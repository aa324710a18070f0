#include "engine/datastore/builder.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/index_io.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/mapped_file.h"
#include "engine/util/files.h"
#include "engine/util/status_macros.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kAddChunk = 65536;  // vectors converted from float16 per FAISS add call

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

int AutoPqM(int d) {
  for (int m = std::max(1, d / 8); m > 1; --m) {
    if (d % m == 0) return m;
  }
  return 1;
}

// Rows `ids` of the float16 key matrix as float32 [ids.size(), d].
std::vector<float> GatherKeys(const uint16_t* keys, int d, const std::vector<int64_t>& ids) {
  std::vector<float> out(ids.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < ids.size(); ++i) {
    torch::Tensor row = torch::from_blob(const_cast<uint16_t*>(keys + ids[i] * d), {d},
                                         torch::kHalf);
    std::memcpy(out.data() + i * d, row.to(torch::kFloat32).data_ptr<float>(), sizeof(float) * d);
  }
  return out;
}

// Adds every stored key to `index` in chunks, converting float16 -> float32.
void AddAll(faiss::Index& index, const uint16_t* keys, int d, int64_t entries,
            const std::function<void(int64_t)>& on_added) {
  for (int64_t start = 0; start < entries; start += kAddChunk) {
    const int64_t n = std::min(kAddChunk, entries - start);
    torch::Tensor chunk = torch::from_blob(const_cast<uint16_t*>(keys + start * d), {n, d},
                                           torch::kHalf)
                              .to(torch::kFloat32)
                              .contiguous();
    index.add(n, chunk.data_ptr<float>());
    on_added(start + n);
  }
}

}  // namespace

absl::StatusOr<Manifest> BuildDatastore(model::Model& model, const ModelId& model_id,
                                        const std::vector<SourceFile>& files,
                                        const std::string& out_dir, const BuildOptions& options,
                                        const std::function<void(const BuildProgress&)>& progress) {
  const auto start_time = std::chrono::steady_clock::now();
  const int d = model.config().d_model;
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", error.message()));
  const fs::path root(out_dir);

  BuildProgress state;
  state.files = static_cast<int>(files.size());
  for (const SourceFile& f : files) state.bytes_total += f.bytes;
  auto report = [&](const char* stage) {
    state.stage = stage;
    if (progress) progress(state);
  };

  // 1. Keys and values, streamed to disk file by file.
  {
    std::ofstream keys_out(root / kKeysFile, std::ios::binary | std::ios::trunc);
    std::ofstream values_out(root / kValuesFile, std::ios::binary | std::ios::trunc);
    if (!keys_out || !values_out) return absl::InternalError(absl::StrCat("cannot write into ", out_dir));
    torch::NoGradGuard no_grad;
    const int chunk = std::max(1, options.chunk_tokens);
    for (const SourceFile& file : files) {
      ++state.file;
      MNEMO_ASSIGN_OR_RETURN(std::string text, util::ReadFile(file.path));
      if (static_cast<int64_t>(text.size()) > file.bytes) text.resize(static_cast<size_t>(file.bytes));
      if (text.empty()) continue;
      // The file as the model reads a text (BOS first when its tokenizer adds one; the byte
      // vocabulary: BOS then one token per byte).
      const std::vector<int> tokens = model.tokenizer().EncodeWithSpecials(text);
      memory::SessionMemory memory = model.NewMemory();
      // Position t predicts token t + 1; the last position has no next token, so a file of n
      // tokens gives n - 1 entries (the byte vocabulary: exactly `bytes`).
      const int64_t n_entries = static_cast<int64_t>(tokens.size()) - 1;
      const int64_t bytes_before = state.bytes_done;
      for (int64_t pos = 0; pos < n_entries; pos += chunk) {
        const int64_t n = std::min<int64_t>(chunk, n_entries - pos);
        torch::Tensor keys;
        absl::StatusOr<torch::Tensor> logprobs = model.Forward(
            absl::MakeConstSpan(tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(n)),
            memory, model::Outputs::kAll, &keys);
        if (!logprobs.ok()) {
          return absl::Status(logprobs.status().code(),
                              absl::StrCat(file.path, ": ", logprobs.status().message()));
        }
        torch::Tensor half = keys.to(torch::kCPU).to(torch::kHalf).contiguous();  // [n, d]
        keys_out.write(static_cast<const char*>(half.data_ptr()),
                       static_cast<std::streamsize>(n * d * 2));
        std::vector<int32_t> values(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = tokens[pos + i + 1];
        values_out.write(reinterpret_cast<const char*>(values.data()),
                         static_cast<std::streamsize>(n * 4));  // little-endian hosts only
        state.entries += n;
        state.bytes_done = bytes_before + static_cast<int64_t>(text.size()) * (pos + n) / n_entries;
        report("keys");
      }
    }
    keys_out.close();
    values_out.close();
    if (!keys_out || !values_out) return absl::DataLossError(absl::StrCat("write failed in ", out_dir));
  }
  const int64_t entries = state.entries;
  if (entries == 0) return absl::InvalidArgumentError("the corpus gave no entries (empty files)");

  // 2. The index, from the stored float16 keys.
  Manifest manifest;
  manifest.model = model_id;
  manifest.d = d;
  manifest.entries = entries;
  manifest.seed = options.seed;
  manifest.corpus = options.corpus_root;
  manifest.corpus_files = static_cast<int64_t>(files.size());
  manifest.corpus_bytes = state.bytes_total;
  manifest.values_bytes = entries * 4;
  manifest.keys_bytes = entries * d * 2;
  const bool ivfpq = options.index == IndexChoice::kIvfPq ||
                     (options.index == IndexChoice::kAuto && entries >= options.flat_threshold);
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> keys_file,
                         MappedFile::Open((root / kKeysFile).string(), manifest.keys_bytes));
  const auto* keys = static_cast<const uint16_t*>(keys_file->data());
  auto on_added = [&](int64_t added) {
    state.entries = added;
    report("add");
  };
  const std::string index_path = (root / kIndexFile).string();
  try {
    if (!ivfpq) {
      manifest.index_type = IndexType::kFlat;
      faiss::IndexFlatL2 index(d);
      AddAll(index, keys, d, entries, on_added);
      faiss::write_index(&index, index_path.c_str());
    } else {
      manifest.index_type = IndexType::kIvfPq;
      const int nlist = options.nlist > 0
                            ? options.nlist
                            : std::max(1, static_cast<int>(std::lround(4.0 * std::sqrt(double(entries)))));
      const int pq_m = options.pq_m > 0 ? options.pq_m : AutoPqM(d);
      if (d % pq_m != 0) {
        return absl::InvalidArgumentError(absl::StrCat("pq_m ", pq_m, " does not divide d ", d));
      }
      const int64_t train_size = std::min(entries, std::max<int64_t>(options.max_train, 1));
      const int64_t needed = std::max<int64_t>(nlist, int64_t{1} << options.pq_nbits);
      if (train_size < needed) {
        return absl::InvalidArgumentError(absl::StrCat(
            "IVF-PQ needs at least ", needed, " training vectors (nlist ", nlist, ", 2^pq_nbits ",
            int64_t{1} << options.pq_nbits, "), have ", train_size,
            "; use a flat index or a smaller nlist / pq_nbits"));
      }
      std::vector<int64_t> ids(static_cast<size_t>(entries));
      std::iota(ids.begin(), ids.end(), 0);
      if (train_size < entries) {
        std::mt19937_64 rng(options.seed);
        for (int64_t i = 0; i < train_size; ++i) {  // partial Fisher-Yates
          std::uniform_int_distribution<int64_t> pick(i, entries - 1);
          std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(pick(rng))]);
        }
        ids.resize(static_cast<size_t>(train_size));
        std::sort(ids.begin(), ids.end());
      }
      const std::vector<float> train = GatherKeys(keys, d, ids);
      auto* quantizer = new faiss::IndexFlatL2(d);
      faiss::IndexIVFPQ index(quantizer, d, static_cast<size_t>(nlist), static_cast<size_t>(pq_m),
                              static_cast<size_t>(options.pq_nbits));
      index.own_fields = true;
      index.cp.seed = static_cast<int>(options.seed);
      index.pq.cp.seed = static_cast<int>(options.seed);
      report("train");
      index.train(train_size, train.data());
      AddAll(index, keys, d, entries, on_added);
      faiss::write_index(&index, index_path.c_str());
      manifest.nlist = nlist;
      manifest.pq_m = pq_m;
      manifest.pq_nbits = options.pq_nbits;
      manifest.train_size = train_size;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the FAISS index: ", e.what()));
  }

  // 3. The manifest, last: a directory without one is an unfinished build.
  report("write");
  manifest.index_bytes = static_cast<int64_t>(fs::file_size(index_path, error));
  if (error) return absl::DataLossError(absl::StrCat("cannot stat ", index_path));
  manifest.build_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  manifest.built_at = UtcNow();
  std::ofstream out(root / kManifestFile, std::ios::binary | std::ios::trunc);
  out << ManifestToJson(manifest);
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", (root / kManifestFile).string()));
  return manifest;
}

}  // namespace mnemo::datastore
