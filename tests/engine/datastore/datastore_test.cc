// Datastore round trip on a tiny random model: build -> open -> search (flat and IVF-PQ)
// against brute force over the stored keys, values = next tokens, keys = Forward's kNN-LM keys,
// model mismatch and damaged files refused, byte-identical rebuilds, corpus selection.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "engine/datastore/builder.h"
#include "engine/datastore/corpus_files.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/model_id.h"
#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Printable text with some repetition, so neighbours share values.
std::string RandomText(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::string words[] = {"def ", "return ", "self", ".x", " = ", "(a, b)", ":\n    ", "\n"};
  std::string s;
  while (static_cast<int>(s.size()) < n) s += words[rng() % 8];
  s.resize(static_cast<size_t>(n));
  return s;
}

class DatastoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() /
                         ("mnemo_datastore_test_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_ / "corpus" / "sub");
    model_ = model::Model::Random(testing::TinyModelConfig(), 7).release();
    ASSERT_TRUE(model_->Save((*root_ / "model").string()).ok());
    // 4 files, 2,400 bytes: 2,400 entries (enough to train IVF-PQ with 256 centroids per code).
    WriteAll(*root_ / "corpus" / "a.py", RandomText(700, 1));
    WriteAll(*root_ / "corpus" / "b.py", RandomText(500, 2));
    WriteAll(*root_ / "corpus" / "sub" / "c.py", RandomText(900, 3));
    WriteAll(*root_ / "corpus" / "d.py", RandomText(300, 4));
    WriteAll(*root_ / "corpus" / "notes.txt", "not python\n");
    auto id = ComputeModelId((*root_ / "model").string());
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = new ModelId(*id);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete model_;
    delete id_;
    delete root_;
  }

  static std::vector<SourceFile> Files() {
    CorpusSelection selection;
    selection.extensions = {".py"};
    auto files = SelectCorpusFiles((*root_ / "corpus").string(), selection);
    EXPECT_TRUE(files.ok()) << files.status();
    return *files;
  }

  static BuildOptions IvfPqOptions() {
    BuildOptions options;
    options.index = IndexChoice::kIvfPq;
    options.nlist = 8;
    options.pq_m = 4;
    return options;
  }

  // Builds into root/NAME (once per name and test binary run).
  static std::string Build(const std::string& name, const BuildOptions& options) {
    const std::string dir = (*root_ / name).string();
    if (!fs::exists(fs::path(dir) / kManifestFile)) {
      auto manifest = BuildDatastore(*model_, *id_, Files(), dir, options, nullptr);
      EXPECT_TRUE(manifest.ok()) << manifest.status();
    }
    return dir;
  }

  static std::unique_ptr<Datastore> OpenOk(const std::string& dir) {
    auto ds = Datastore::Open(dir, *id_);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? std::move(*ds) : nullptr;
  }

  // Brute-force squared L2 from `query` to every stored key.
  static std::vector<float> AllDistances(const Datastore& ds, const std::vector<float>& query) {
    std::vector<float> out;
    for (int64_t i = 0; i < ds.entries(); ++i) {
      const std::vector<float> key = ds.Key(i);
      float sum = 0;
      for (int j = 0; j < ds.d(); ++j) sum += (query[j] - key[j]) * (query[j] - key[j]);
      out.push_back(sum);
    }
    return out;
  }

  static torch::Tensor Queries(const Datastore& ds) {  // [8, d]: 4 stored keys + 4 perturbed
    std::vector<float> rows;
    for (int64_t id : {0, 333, 1200, 2399}) {
      std::vector<float> key = ds.Key(id);
      rows.insert(rows.end(), key.begin(), key.end());
    }
    torch::manual_seed(3);
    torch::Tensor stored = torch::from_blob(rows.data(), {4, ds.d()}).clone();
    return torch::cat({stored, stored + 0.3 * torch::randn({4, ds.d()})});
  }

  static fs::path* root_;
  static model::Model* model_;
  static ModelId* id_;
};

fs::path* DatastoreTest::root_ = nullptr;
model::Model* DatastoreTest::model_ = nullptr;
ModelId* DatastoreTest::id_ = nullptr;

TEST_F(DatastoreTest, ManifestAndValuesAreTheNextTokens) {
  auto ds = OpenOk(Build("flat", BuildOptions{}));
  ASSERT_NE(ds, nullptr);
  const Manifest& m = ds->manifest();
  EXPECT_EQ(m.index_type, IndexType::kFlat);  // 2,400 entries < the auto threshold
  EXPECT_EQ(m.entries, 2400);
  EXPECT_EQ(m.d, 32);
  EXPECT_EQ(m.corpus_files, 4);  // notes.txt is not .py
  EXPECT_EQ(m.model, *id_);
  // Files in relative-path order: a.py, b.py, d.py, sub/c.py; entry t of a file -> byte t.
  std::string corpus;
  for (const char* f : {"a.py", "b.py", "d.py", "sub/c.py"}) corpus += ReadAll(*root_ / "corpus" / f);
  ASSERT_EQ(static_cast<int64_t>(corpus.size()), ds->entries());
  for (int64_t i = 0; i < ds->entries(); ++i) {
    ASSERT_EQ(ds->Value(i), static_cast<unsigned char>(corpus[static_cast<size_t>(i)])) << i;
  }
}

TEST_F(DatastoreTest, KeysAreForwardsKnnLmKeys) {
  auto ds = OpenOk(Build("flat", BuildOptions{}));
  ASSERT_NE(ds, nullptr);
  const std::string text = ReadAll(*root_ / "corpus" / "b.py");  // entries 700..1199
  std::vector<int> tokens = {model::kBosId};
  for (unsigned char c : text) tokens.push_back(c);
  memory::SessionMemory memory = model_->NewMemory();
  torch::Tensor keys;
  ASSERT_TRUE(model_->Forward(tokens, memory, model::Outputs::kAll, &keys).ok());
  for (int t : {0, 1, 250, 499}) {
    const std::vector<float> stored = ds->Key(700 + t);
    for (int j = 0; j < ds->d(); ++j) {
      ASSERT_NEAR(stored[j], keys[t][j].item<float>(), 2e-3 * (1 + std::abs(stored[j]))) << t;
    }
  }
}

TEST_F(DatastoreTest, FlatSearchEqualsBruteForce) {
  auto ds = OpenOk(Build("flat", BuildOptions{}));
  ASSERT_NE(ds, nullptr);
  const torch::Tensor queries = Queries(*ds);
  auto hits = ds->Search(queries, {10, 1});
  ASSERT_TRUE(hits.ok()) << hits.status();
  ASSERT_EQ(hits->size(), 8u);
  for (int q = 0; q < 8; ++q) {
    const float* row = queries[q].contiguous().data_ptr<float>();
    const std::vector<float> all = AllDistances(*ds, std::vector<float>(row, row + ds->d()));
    std::vector<int64_t> order(all.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return all[a] < all[b]; });
    ASSERT_EQ((*hits)[q].size(), 10u);
    for (int j = 0; j < 10; ++j) {
      const Hit& hit = (*hits)[q][j];
      EXPECT_EQ(hit.id, order[j]) << "query " << q << " rank " << j;
      EXPECT_NEAR(hit.distance, all[hit.id], 1e-4 * (1 + all[hit.id]));
      EXPECT_EQ(hit.value, ds->Value(hit.id));
    }
  }
}

TEST_F(DatastoreTest, IvfPqHitsCarryExactDistances) {
  auto ds = OpenOk(Build("ivfpq", IvfPqOptions()));
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->manifest().index_type, IndexType::kIvfPq);
  EXPECT_EQ(ds->manifest().nlist, 8);
  EXPECT_TRUE(ds->lists_mapped()) << "FAISS IO_FLAG_MMAP should map the inverted lists";
  const torch::Tensor queries = Queries(*ds);
  auto hits = ds->Search(queries, {16, 8});
  ASSERT_TRUE(hits.ok()) << hits.status();
  int self_found = 0;
  for (int q = 0; q < 8; ++q) {
    const float* row = queries[q].contiguous().data_ptr<float>();
    const std::vector<float> all = AllDistances(*ds, std::vector<float>(row, row + ds->d()));
    ASSERT_EQ((*hits)[q].size(), 16u);
    for (size_t j = 0; j < (*hits)[q].size(); ++j) {
      const Hit& hit = (*hits)[q][j];
      EXPECT_NEAR(hit.distance, all[hit.id], 1e-4 * (1 + all[hit.id]));  // exact, not PQ's
      if (j > 0) {
        EXPECT_LE((*hits)[q][j - 1].distance, hit.distance);
      }
      if (q < 4 && hit.distance == 0.0f) ++self_found;
    }
  }
  EXPECT_GE(self_found, 3) << "stored keys should mostly find themselves with nprobe = nlist";
}

TEST_F(DatastoreTest, ConcurrentSearchesAgree) {
  auto ds = OpenOk(Build("ivfpq", IvfPqOptions()));
  ASSERT_NE(ds, nullptr);
  const torch::Tensor queries = Queries(*ds);
  auto expected = ds->Search(queries, {8, 4});
  ASSERT_TRUE(expected.ok());
  std::vector<std::thread> threads;
  std::vector<int> same(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        auto got = ds->Search(queries, {8, 4});
        bool equal = got.ok() && got->size() == expected->size();
        for (size_t q = 0; equal && q < got->size(); ++q) {
          for (size_t j = 0; j < (*got)[q].size(); ++j) equal &= (*got)[q][j].id == (*expected)[q][j].id;
        }
        same[t] += equal;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(same[t], 5);
}

TEST_F(DatastoreTest, RefusesAnotherModel) {
  const std::string dir = Build("flat", BuildOptions{});
  auto other = model::Model::Random(testing::TinyModelConfig(), 8);
  ASSERT_TRUE(other->Save((*root_ / "other_model").string()).ok());
  auto other_id = ComputeModelId((*root_ / "other_model").string());
  ASSERT_TRUE(other_id.ok());
  EXPECT_NE(other_id->fingerprint, id_->fingerprint);
  auto ds = Datastore::Open(dir, *other_id);
  ASSERT_EQ(ds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(ds.status().message().find(id_->ToString()), std::string::npos) << ds.status();
  EXPECT_NE(ds.status().message().find(other_id->ToString()), std::string::npos) << ds.status();
}

TEST_F(DatastoreTest, RefusesDamagedFiles) {
  for (const char* name : {"flat", "ivfpq"}) {
    const std::string good = Build(name, std::string(name) == "flat" ? BuildOptions{} : IvfPqOptions());
    const fs::path bad = *root_ / (std::string(name) + "_damaged");
    auto reset = [&] {
      fs::remove_all(bad);
      fs::copy(good, bad);
    };
    reset();  // truncated values
    WriteAll(bad / kValuesFile, ReadAll(bad / kValuesFile).substr(0, 100));
    auto ds = Datastore::Open(bad.string(), *id_);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss) << ds.status();
    EXPECT_NE(ds.status().message().find("values.bin"), std::string::npos) << ds.status();

    reset();  // missing keys
    fs::remove(bad / kKeysFile);
    ds = Datastore::Open(bad.string(), *id_);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound) << ds.status();
    EXPECT_NE(ds.status().message().find("keys.f16"), std::string::npos) << ds.status();

    reset();  // same-size garbage index
    std::string index = ReadAll(bad / kIndexFile);
    std::fill(index.begin(), index.end(), 'x');
    WriteAll(bad / kIndexFile, index);
    ds = Datastore::Open(bad.string(), *id_);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss) << ds.status();
    EXPECT_NE(ds.status().message().find("index.faiss"), std::string::npos) << ds.status();

    reset();  // truncated index
    WriteAll(bad / kIndexFile, ReadAll(bad / kIndexFile).substr(0, 64));
    ds = Datastore::Open(bad.string(), *id_);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss) << ds.status();

    reset();  // broken manifest
    WriteAll(bad / kManifestFile, "{\"format_version\": 1");
    ds = Datastore::Open(bad.string(), *id_);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << ds.status();
    EXPECT_NE(ds.status().message().find("manifest.json"), std::string::npos) << ds.status();
  }
  EXPECT_EQ(Datastore::Open((*root_ / "nowhere").string(), *id_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DatastoreTest, RebuildsAreByteIdentical) {
  for (const char* name : {"flat", "ivfpq"}) {
    const BuildOptions options = std::string(name) == "flat" ? BuildOptions{} : IvfPqOptions();
    const std::string first = Build(name, options);
    const fs::path second = *root_ / (std::string(name) + "_again");
    fs::remove_all(second);
    ASSERT_TRUE(BuildDatastore(*model_, *id_, Files(), second.string(), options, nullptr).ok());
    for (const char* file : {kIndexFile, kValuesFile, kKeysFile}) {
      EXPECT_TRUE(ReadAll(fs::path(first) / file) == ReadAll(second / file)) << name << " " << file;
    }
  }
}

TEST_F(DatastoreTest, SelectionSkipsHeldOutFilesAndHonoursTheBudget) {
  WriteAll(*root_ / "split.json",
           "{\"root\": \"" + (*root_ / "corpus").string() + "\", \"validation\": [\"b.py\"]}");
  CorpusSelection selection;
  selection.extensions = {".py"};
  selection.exclude_split_json = (*root_ / "split.json").string();
  auto files = SelectCorpusFiles((*root_ / "corpus").string(), selection);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  for (const SourceFile& f : *files) EXPECT_NE(fs::path(f.path).filename().string(), "b.py");

  selection.exclude_split_json.clear();
  selection.max_bytes = 1000;  // a.py (700) + 300 of b.py
  files = SelectCorpusFiles((*root_ / "corpus").string(), selection);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].bytes, 700);
  EXPECT_EQ((*files)[1].bytes, 300);
}

}  // namespace
}  // namespace mnemo::datastore
