// The Engine facade over a tiny random model saved to a temporary directory.
#include "engine/engine.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "engine/datastore/builder.h"
#include "engine/datastore/model_id.h"
#include "engine/model/model_config.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/test_util.h"

namespace mnemo::engine {
namespace {

using testing::Collector;
using testing::Waiter;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("mnemo_engine_test_" + std::to_string(getpid())));
    absl::Status s = testing::TinyModel()->Save(*dir_);
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  std::unique_ptr<Engine> MakeEngine(const std::string& kv_dtype = "float32",
                                     const std::string& weight_dtype = "float32") {
    EngineConfig config;
    config.model_dir = *dir_;
    config.threads = 1;
    config.kv_dtype = kv_dtype;
    config.weight_dtype = weight_dtype;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // 24 greedy tokens for a short prompt, in `session_id` ("" = one-shot), all streamed.
  static void ExpectGreedyAnswer(Engine& engine, const std::string& session_id) {
    GenerateOptions options;
    options.session_id = session_id;
    options.prompt = "def main():\n    return";
    options.max_new_tokens = 24;
    options.sampling.temperature = 0.0f;  // greedy
    Collector c;
    ASSERT_TRUE(engine.Submit(options, c.stream()).ok());
    std::optional<GenerateFinal> final = c.Wait();
    ASSERT_TRUE(final.has_value());
    EXPECT_EQ(final->reason, FinishReason::kLength);
    EXPECT_EQ(c.ids().size(), 24u);
  }

  static std::string* dir_;
};
std::string* EngineTest::dir_ = nullptr;

TEST_F(EngineTest, LoadsAndDescribesTheModel) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const ModelInfo& info = engine->model_info();
  EXPECT_EQ(info.name, "tiny");
  EXPECT_EQ(info.layers, 2);
  EXPECT_EQ(info.vocab_size, 259);
  EXPECT_EQ(info.seg_len, 16);
  EXPECT_EQ(info.tokenizer, "byte");
  EXPECT_EQ(info.device, "cpu");
  EXPECT_GT(info.parameters, 0);
  EXPECT_EQ(info.family, "mnemo-xl");
  EXPECT_EQ(info.dtype, "float32");
  EXPECT_EQ(info.weight_dtype, "float32");
  EXPECT_EQ(info.window, 16);  // the raw memory a query sees (mem_len)
  EXPECT_EQ(info.sink_tokens, 0);
  // The weights as loaded, not as on disk.
  std::unique_ptr<Engine> half = MakeEngine("float32", "bfloat16");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->model_info().weight_dtype, "bfloat16");
  EXPECT_EQ(half->model_info().dtype, "float32");
}

TEST_F(EngineTest, BadModelDirectoryIsAnError) {
  EngineConfig config;
  config.model_dir = "/nonexistent/mnemo-model";
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
  EXPECT_FALSE(engine.ok());
  config.model_dir = *dir_;
  config.device = "toaster";
  EXPECT_EQ(Engine::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, Float16AttentionMemoryHoldsFewerBytesAndServes) {
  EngineConfig config;
  config.model_dir = *dir_;
  config.kv_dtype = "bfloat16";
  absl::StatusOr<std::unique_ptr<Engine>> bad = Engine::Create(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "kv_dtype must be float32 or float16"))
      << bad.status();

  int64_t bytes[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    std::unique_ptr<Engine> engine = MakeEngine(half ? "float16" : "float32");
    ASSERT_NE(engine, nullptr);
    Waiter<absl::StatusOr<SessionInfo>> created;
    engine->CreateSession({"s", 0}, created.Callback());
    absl::StatusOr<SessionInfo> info = created.Wait();
    ASSERT_TRUE(info.ok()) << info.status();
    bytes[half] = info->memory.bytes;
    ExpectGreedyAnswer(*engine, "s");
  }
  EXPECT_LT(bytes[1], bytes[0]);  // the kNN memory stays float32: not half of the total
}

TEST_F(EngineTest, HalfWeightsServe) {
  EngineConfig config;
  config.model_dir = *dir_;
  config.weight_dtype = "int8";
  absl::StatusOr<std::unique_ptr<Engine>> bad = Engine::Create(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(),
                                "weight_dtype must be float32, float16 or bfloat16"))
      << bad.status();

  for (const char* weight_dtype : {"float16", "bfloat16"}) {
    SCOPED_TRACE(weight_dtype);
    std::unique_ptr<Engine> engine = MakeEngine("float16", weight_dtype);
    ASSERT_NE(engine, nullptr);
    ExpectGreedyAnswer(*engine, "");  // one-shot
  }
}

TEST_F(EngineTest, GeneratesInASessionAndValidatesSynchronously) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  Waiter<absl::StatusOr<SessionInfo>> created;
  engine->CreateSession({"chat", 0}, created.Callback());
  ASSERT_TRUE(created.Wait().ok());

  GenerateOptions bad;
  bad.session_id = "chat";
  bad.max_new_tokens = 5000;
  Collector untouched;
  absl::Status s = engine->Submit(bad, untouched.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_new_tokens 5000 exceeds the server cap 4096"));
  EXPECT_FALSE(untouched.Wait(absl::ZeroDuration()).has_value());

  GenerateOptions options;
  options.session_id = "chat";
  options.prompt = "Hi";
  options.max_new_tokens = 6;
  options.sampling.seed = 3;
  Collector c;
  ASSERT_TRUE(engine->Submit(options, c.stream()).ok());
  std::optional<GenerateFinal> final = c.Wait();
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(final->reason, FinishReason::kLength);
  EXPECT_EQ(final->usage.session_tokens, 8);

  Waiter<absl::StatusOr<SessionInfo>> got;
  engine->GetSession("chat", got.Callback());
  absl::StatusOr<SessionInfo> info = got.Wait();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tokens_seen, 8);
  EXPECT_EQ(engine->Stats().sessions, 1);
  EXPECT_EQ(engine->Stats().running, 0);

  Waiter<absl::StatusOr<ScoreResult>> scored;
  engine->Score(ScoreOptions{}, scored.Callback());  // no text: inline INVALID_ARGUMENT
  EXPECT_EQ(scored.Wait().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, Tokenize) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  absl::StatusOr<TokenizeResult> r = engine->Tokenize("a\xC3\xA9");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids, (std::vector<int>{'a', 0xC3, 0xA9}));
  EXPECT_EQ(r->pieces, (std::vector<std::string>{"a", "", "\xC3\xA9"}));
  EXPECT_FALSE(engine->Tokenize("\xFF").ok());
  // add_special_tokens: BOS first, as a text prompt is fed on a fresh sequence.
  r = engine->Tokenize("a\xC3\xA9", /*add_special_tokens=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids, (std::vector<int>{model::kBosId, 'a', 0xC3, 0xA9}));
  EXPECT_EQ(r->pieces, (std::vector<std::string>{"", "a", "", "\xC3\xA9"}));
}

TEST_F(EngineTest, Detokenize) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int> ids = {model::kBosId, 'h', 0xC3, 0xA9, model::kEosId, model::kPadId};
  absl::StatusOr<std::string> text = engine->Detokenize(ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "h\xC3\xA9");
  text = engine->Detokenize(ids, /*skip_special_tokens=*/false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|bos|>h\xC3\xA9<|eos|><|pad|>");
  // A character cut by a special, or left unfinished, reads as U+FFFD; the text stays UTF-8.
  text = engine->Detokenize({0xC3, model::kEosId, 'a', 0xE2}, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "\xEF\xBF\xBD<|eos|>a\xEF\xBF\xBD");
  EXPECT_EQ(*engine->Detokenize({}, true), "");
  absl::Status bad = engine->Detokenize({'a', 259}, true).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.message(), "ids[1] = 259")) << bad;
  EXPECT_FALSE(engine->Detokenize({-1}, true).ok());
}

TEST_F(EngineTest, DestructorClosesOutstandingStreams) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  GenerateOptions options;
  options.prompt = "go";
  options.max_new_tokens = 4000;
  // Sampling EOS would end the request by itself before the engine goes (seen under load).
  options.stop_at_eos = false;
  Collector c;
  ASSERT_TRUE(engine->Submit(options, c.stream()).ok());
  ASSERT_TRUE(c.WaitTokens(1));
  engine.reset();
  std::optional<GenerateFinal> final = c.Wait(absl::ZeroDuration());
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(final->reason, FinishReason::kCancelled);
  EXPECT_EQ(final->status.code(), absl::StatusCode::kUnavailable);
}

// A shared datastore built with mnemo-index's builder for this model, loaded by --datastore.
TEST_F(EngineTest, ServesASharedDatastoreBuiltForItsModel) {
  const std::filesystem::path root = std::filesystem::path(*dir_) / "datastore";
  const std::string text =
      "def recall(x):\n    return x  # a corpus line the datastore will remember\n";
  std::filesystem::create_directories(root / "corpus");
  std::ofstream(root / "corpus" / "a.py") << text;
  {
    absl::StatusOr<std::unique_ptr<model::Model>> model = model::Model::Load(*dir_, {});
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<datastore::ModelId> id = datastore::ComputeModelId(*dir_);
    ASSERT_TRUE(id.ok()) << id.status();
    const std::vector<datastore::SourceFile> files = {
        {(root / "corpus" / "a.py").string(), static_cast<int64_t>(text.size())}};
    absl::StatusOr<datastore::Manifest> built = datastore::BuildDatastore(
        **model, *id, files, (root / "ds").string(), {}, [](const datastore::BuildProgress&) {});
    ASSERT_TRUE(built.ok()) << built.status();
  }
  EngineConfig config;
  config.model_dir = *dir_;
  config.threads = 1;
  config.datastores = {"code=" + (root / "ds").string() + ",lambda=0.5,k=4"};
  std::atomic<int> searches{0};
  config.knn_search_observer = [&searches](absl::Duration) { ++searches; };
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
  ASSERT_TRUE(engine.ok()) << engine.status();

  const std::vector<DatastoreInfo> listed = (*engine)->ListDatastores();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "code");
  EXPECT_EQ(listed[0].entries, static_cast<int64_t>(text.size()));
  EXPECT_EQ(listed[0].index_type, "flat");
  EXPECT_FLOAT_EQ(listed[0].default_lambda, 0.5f);
  EXPECT_EQ(listed[0].default_k, 4);
  Waiter<absl::StatusOr<DatastoreInfo>> got;
  (*engine)->GetDatastore("nope", "", got.Callback());
  EXPECT_EQ(got.Wait().status().code(), absl::StatusCode::kNotFound);

  auto score = [&](std::optional<KnnLmOptions> knn) {
    Waiter<absl::StatusOr<ScoreResult>> w;
    ScoreOptions options;
    options.text = text;
    options.knn_lm = knn;
    (*engine)->Score(options, w.Callback());
    return w.Wait();
  };
  absl::StatusOr<ScoreResult> plain = score(std::nullopt);
  KnnLmOptions knn;
  knn.datastore = "code";  // the datastore's defaults: lambda 0.5, k 4
  absl::StatusOr<ScoreResult> mixed = score(knn);
  ASSERT_TRUE(plain.ok() && mixed.ok()) << mixed.status();
  EXPECT_LT(mixed->bits_per_byte, plain->bits_per_byte - 0.5);
  EXPECT_GT(searches.load(), 0);

  // A datastore built for other weights is refused at startup, naming both models.
  absl::Status saved = testing::TinyModel(/*seed=*/99)->Save((root / "other").string());
  ASSERT_TRUE(saved.ok()) << saved;
  config.model_dir = (root / "other").string();
  absl::StatusOr<std::unique_ptr<Engine>> other = Engine::Create(config);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(other.status().message(), "--datastore code=")) << other.status();
}

}  // namespace
}  // namespace mnemo::engine
