// mnemo-server: flags and wiring only. Serves one model over gRPC (see server/mnemo_server.h)
// and exposes Prometheus metrics; SIGTERM/SIGINT drain it and exit 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/model/cpu_kernels.h"
#include "engine/util/cpu_backend.h"
#include "server/mnemo_server.h"
#include "server/request_log.h"
#include "server/tenants.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json + model.safetensors).");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC address HOST:PORT.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9090",
          "Prometheus /metrics address HOST:PORT; empty = off.");
ABSL_FLAG(int, threads, 0, "LibTorch intra-op threads; 0 = number of cores.");
ABSL_FLAG(std::string, device, "cpu", "Device: cpu, cuda, cuda:N.");
ABSL_FLAG(int, max_sessions, 1024, "Live sessions; beyond it the least recently used goes.");
ABSL_FLAG(absl::Duration, session_ttl, absl::Hours(1), "Idle sessions older than this go.");
ABSL_FLAG(int64_t, max_memory_bytes, int64_t{8} << 30,
          "Bytes of all sessions' memory; least recently used sessions go beyond it.");
ABSL_FLAG(int, max_new_tokens, 4096, "Cap on a request's max_new_tokens (INVALID_ARGUMENT above).");
ABSL_FLAG(int, default_max_new_tokens, 256, "max_new_tokens for requests that leave it 0.");
ABSL_FLAG(int, max_waiting, 1024,
          "Requests waiting for a running slot or their session; beyond it RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_running, 64,
          "Requests advanced together (one batched decode step per iteration); more wait.");
ABSL_FLAG(bool, batch_decode, true,
          "Continuous batching: decode every running stream's next token in one batched step "
          "(false: one stream at a time, for comparison).");
ABSL_FLAG(int, decode_threads, 0,
          "Threads a batched decode step's streams are split across, each decoding its share "
          "on one core; 1 = one step whose large products split over --threads; 0 = by the "
          "model: the cores when its weights are <= 64 MiB (the bundled model), else 1.");
ABSL_FLAG(int, prefill_threads, -1,
          "OpenMP threads for prompt prefill (and Score / datastore chunks) on the engine's loop "
          "thread; 0 = --threads; -1 = by the model: 1 when its weights are <= 64 MiB (fastest "
          "for the bundled model on 2 cores, docs/results/batching.md), else --threads.");
ABSL_FLAG(int, max_prefill_tokens, 512,
          "Prompt/Score tokens processed per iteration beyond the first segment, so decoding "
          "streams are not stalled behind many new prompts.");
ABSL_FLAG(int64_t, knn_capacity, 65536,
          "kNN memory entries (per head) of a session that does not choose, and of one-shot "
          "requests.");
ABSL_FLAG(int64_t, max_knn_capacity, int64_t{1} << 20,
          "Largest knn_capacity a CreateSession may ask for (INVALID_ARGUMENT above).");
ABSL_FLAG(int64_t, remember_capacity, int64_t{1} << 20,
          "Recall history (tokens) of a session created with remember that does not choose, "
          "and of one-shot requests with recall on (docs/recall.md).");
ABSL_FLAG(int64_t, max_remember_capacity, int64_t{1} << 24,
          "Largest remember_capacity a CreateSession may ask for (INVALID_ARGUMENT above).");
ABSL_FLAG(std::string, session_dir, "",
          "Durable sessions: keep every session's snapshot and call log in this directory "
          "(created if missing; may be shared by replicas). A call's changes are on disk before "
          "it returns; sessions survive restarts and crashes and load on first use. Empty = "
          "sessions live in memory only. See docs/durability.md.");
ABSL_FLAG(absl::Duration, session_hibernate_after, absl::InfiniteDuration(),
          "With --session_dir: idle sessions leave memory after this long (they stay on disk, "
          "load again on their next call, and release their lock so that another replica "
          "may take them). inf = only when --max_sessions / --max_memory_bytes need room.");
ABSL_FLAG(absl::Duration, max_session_ttl, absl::Hours(24 * 365),
          "Largest ttl_seconds a CreateSession may ask for.");
ABSL_FLAG(int64_t, session_log_compact_bytes, int64_t{64} << 20,
          "With --session_dir: fold a session's log into a new snapshot once it passes this "
          "many bytes.");
ABSL_FLAG(int64_t, knn_exact_threshold, 16384,
          "kNN memories search exactly up to this many entries, through a FAISS IVF index "
          "beyond.");
ABSL_FLAG(std::string, kv_dtype, "float32",
          "Element type of the sessions' attention memory (keys and values): float32, or float16 "
          "for half that memory and faster decoding of many streams at once, with log-probs "
          "changed slightly (CPU only; see docs/results/kv_dtype.md).");
ABSL_FLAG(std::string, weight_dtype, "float32",
          "How decoding holds the model's weights: float32; float16 (rounded at load) for "
          "half the bytes each decode step reads; or bfloat16 (weights and each product's "
          "inputs rounded to bfloat16: bfloat16 dot products, fastest on CPUs with AVX512-BF16). "
          "Log-probs change slightly (CPU only; see docs/results/weight_dtype.md).");
ABSL_FLAG(int, window, 0,
          "Hugging Face models: a query sees itself and the window - 1 positions before it, so a "
          "session's memory and per-token cost stay bounded however long it runs (0 = the "
          "model's sliding_window, else min(max_position_embeddings, 4096)). See "
          "docs/user-guide.md, Bounded sessions.");
ABSL_FLAG(int, sink_tokens, -1,
          "Hugging Face models with RoPE: also keep a sequence's first N positions visible once "
          "they leave the window (StreamingLLM's attention sinks; -1 = none). See "
          "docs/user-guide.md, Bounded sessions.");
ABSL_FLAG(std::string, datastore, "",
          "A shared kNN-LM datastore built by mnemo-index for this model, as "
          "NAME=DIR[,lambda=L][,k=K][,temperature=T][,nprobe=N] (the values are what requests "
          "that leave knn_lm fields unset get; defaults lambda=0.25,k=16,temperature=1,nprobe=8). "
          "Repeatable; ';' also separates several.");
ABSL_FLAG(int64_t, max_session_datastore_entries, int64_t{1} << 20,
          "Entries a session's private kNN-LM datastore may hold (RESOURCE_EXHAUSTED above); "
          "0 = unbounded.");
ABSL_FLAG(int, max_request_bytes, 64 << 20, "Largest gRPC request accepted, in bytes.");
ABSL_FLAG(std::string, tls_cert, "",
          "TLS on the gRPC port: the server's certificate chain (PEM). With --tls_key; empty = "
          "plaintext. See docs/security.md.");
ABSL_FLAG(std::string, tls_key, "", "TLS: the server's private key (PEM).");
ABSL_FLAG(std::string, tls_client_ca, "",
          "Mutual TLS: clients must present a certificate signed by this CA (PEM).");
ABSL_FLAG(std::string, auth_keys, "",
          "API keys and tenants (JSON, see docs/security.md): every call must send "
          "'authorization: Bearer KEY'; each tenant sees only its own sessions, within its "
          "limits. Reloaded on SIGHUP. Empty = no keys (anyone who can connect may call).");
ABSL_FLAG(bool, metrics_tls, false,
          "Serve /metrics over https with the --tls_cert / --tls_key of the gRPC port.");
ABSL_FLAG(bool, reflection, true, "Serve gRPC server reflection (grpcurl without .proto files).");
ABSL_FLAG(std::string, log_format, "text",
          "Request log on stderr, one line per RPC (time, method, tenant, session, code, tokens, "
          "queue and total time): text, json or off.");
ABSL_FLAG(bool, log_prompts, false,
          "Also write each request's prompt / text into the request log (off: prompts are never "
          "logged).");
ABSL_FLAG(absl::Duration, heap_trim_interval, absl::Seconds(10),
          "How often to check the heap and hand freed pages back to the kernel when enough "
          "has piled up (keeps RSS flat under long, varied load); 0 = never.");
ABSL_FLAG(int64_t, heap_trim_min_bytes, int64_t{64} << 20,
          "Trim when the heap keeps this many more bytes free than after the last trim.");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(10),
          "On SIGTERM/SIGINT, how long in-flight calls may continue before they are cancelled.");

namespace {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and every thread it starts later
// (call before any thread exists), so only the sigwait thread ever sees them.
sigset_t BlockHandledSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Abseil keeps only the last value of a repeated flag; --datastore is meant to repeat, so its
// values are collected from argv first (both "--datastore=V" and "--datastore V").
std::vector<std::string> RepeatedFlagValues(int argc, char** argv, const std::string& name) {
  std::vector<std::string> values;
  const std::string dashed = "--" + name, with_value = dashed + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string value;
    if (arg.rfind(with_value, 0) == 0) {
      value = arg.substr(with_value.size());
    } else if (arg == dashed && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view part : absl::StrSplit(value, ';', absl::SkipWhitespace())) {
      values.emplace_back(part);
    }
  }
  return values;
}

mnemo::engine::EngineConfig EngineConfigFromFlags(const std::vector<std::string>& datastores) {
  mnemo::engine::EngineConfig config;
  config.model_dir = absl::GetFlag(FLAGS_model);
  config.device = absl::GetFlag(FLAGS_device);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  config.session_ttl = absl::GetFlag(FLAGS_session_ttl);
  config.max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes);
  config.knn_capacity = absl::GetFlag(FLAGS_knn_capacity);
  config.max_knn_capacity = absl::GetFlag(FLAGS_max_knn_capacity);
  config.remember_capacity = absl::GetFlag(FLAGS_remember_capacity);
  config.max_remember_capacity = absl::GetFlag(FLAGS_max_remember_capacity);
  config.session_dir = absl::GetFlag(FLAGS_session_dir);
  config.session_hibernate_after = absl::GetFlag(FLAGS_session_hibernate_after);
  config.max_session_ttl = absl::GetFlag(FLAGS_max_session_ttl);
  config.session_log_compact_bytes = absl::GetFlag(FLAGS_session_log_compact_bytes);
  config.knn_exact_threshold = absl::GetFlag(FLAGS_knn_exact_threshold);
  config.kv_dtype = absl::GetFlag(FLAGS_kv_dtype);
  config.weight_dtype = absl::GetFlag(FLAGS_weight_dtype);
  config.window = absl::GetFlag(FLAGS_window);
  config.sink_tokens = absl::GetFlag(FLAGS_sink_tokens);
  config.datastores = datastores;
  config.max_session_datastore_entries = absl::GetFlag(FLAGS_max_session_datastore_entries);
  config.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens);
  config.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  config.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  config.max_running = absl::GetFlag(FLAGS_max_running);
  config.batch_decode = absl::GetFlag(FLAGS_batch_decode);
  config.decode_threads = absl::GetFlag(FLAGS_decode_threads);
  config.prefill_threads = absl::GetFlag(FLAGS_prefill_threads);
  config.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  return config;
}

// Loads --auth_keys into the server (at start and on SIGHUP).
absl::Status LoadAuthKeys(mnemo::server::MnemoServer& server, const std::string& path) {
  absl::StatusOr<std::vector<mnemo::server::TenantConfig>> tenants =
      mnemo::server::LoadTenantsFile(path);
  if (!tenants.ok()) return tenants.status();
  const size_t count = tenants->size();
  if (absl::Status s = server.ConfigureTenants(*std::move(tenants)); !s.ok()) return s;
  std::fprintf(stderr, "mnemo-server: API keys: %zu tenants from %s\n", count, path.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);  // may restart the process once; see cpu_backend.h
  absl::SetProgramUsageMessage(
      "mnemo-server --model DIR [--listen HOST:PORT] [--metrics_listen HOST:PORT] ...");
  const std::vector<std::string> datastores = RepeatedFlagValues(argc, argv, "datastore");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_model).empty()) {
    std::fprintf(stderr, "mnemo-server: --model DIR is required\n");
    return 2;
  }
  absl::StatusOr<mnemo::server::RequestLog::Format> log_format =
      mnemo::server::RequestLog::ParseFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) {
    std::fprintf(stderr, "mnemo-server: %s\n", log_format.status().ToString().c_str());
    return 2;
  }
  const sigset_t signals = BlockHandledSignals();

  mnemo::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.metrics_tls = absl::GetFlag(FLAGS_metrics_tls);
  options.reflection = absl::GetFlag(FLAGS_reflection);
  options.log_format = *log_format;
  options.log_prompts = absl::GetFlag(FLAGS_log_prompts);
  options.heap_trim_interval = absl::GetFlag(FLAGS_heap_trim_interval);
  options.heap_trim_min_bytes = absl::GetFlag(FLAGS_heap_trim_min_bytes);
  absl::StatusOr<std::unique_ptr<mnemo::server::MnemoServer>> server =
      mnemo::server::MnemoServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "mnemo-server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string auth_keys = absl::GetFlag(FLAGS_auth_keys);
  if (!auth_keys.empty()) {
    if (absl::Status s = LoadAuthKeys(**server, auth_keys); !s.ok()) {
      std::fprintf(stderr, "mnemo-server: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  // The signal thread reloads the keys on SIGHUP and records SIGTERM/SIGINT; main does the
  // draining.
  absl::Notification stop;
  mnemo::server::MnemoServer* raw_server = server->get();
  std::thread signal_thread([&signals, &stop, raw_server, auth_keys] {
    while (true) {
      int signal_number = 0;
      sigwait(&signals, &signal_number);
      if (signal_number == SIGHUP) {
        if (auth_keys.empty()) {
          std::fprintf(stderr, "mnemo-server: SIGHUP: no --auth_keys to reload\n");
        } else if (absl::Status s = LoadAuthKeys(*raw_server, auth_keys); !s.ok()) {
          // The keys in force stay in force.
          std::fprintf(stderr, "mnemo-server: SIGHUP: keeping the previous API keys: %s\n",
                       s.ToString().c_str());
        }
        continue;
      }
      std::fprintf(stderr, "mnemo-server: received %s, draining\n",
                   signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
      stop.Notify();
      return;
    }
  });

  const mnemo::engine::EngineConfig config = EngineConfigFromFlags(datastores);
  if (absl::Status loaded = (*server)->LoadEngine(config); !loaded.ok()) {
    std::fprintf(stderr, "mnemo-server: cannot load the model or a datastore: %s\n",
                 loaded.ToString().c_str());
    std::_Exit(1);  // the signal thread is still parked in sigwait
  }
  const mnemo::engine::ModelInfo& model = (*server)->engine()->model_info();
  if (config.weight_dtype == "bfloat16" && !mnemo::model::Bf16DotInUse()) {
    std::fprintf(stderr,
                 "mnemo-server: note: this CPU has no AVX512-BF16, so --weight_dtype bfloat16 "
                 "widens the weights and multiplies in float32 (the same results, slower than "
                 "--weight_dtype float16 here)\n");
  }
  std::fprintf(stderr,
               "mnemo-server: serving model %s (%d layers, d_model %d, %s, weights %s, "
               "attention memory %s, decode threads %d, prefill threads %d) on %s (port %d%s%s), "
               "metrics on %s\n",
               model.name.c_str(), model.layers, model.d_model, model.device.c_str(),
               config.weight_dtype.c_str(), config.kv_dtype.c_str(),
               (*server)->engine()->config().decode_threads,
               (*server)->engine()->config().prefill_threads,
               options.listen.c_str(), (*server)->port(),
               options.tls_cert_file.empty() ? ", plaintext"
               : options.tls_client_ca_file.empty() ? ", TLS" : ", mutual TLS",
               auth_keys.empty() ? ", no API keys" : ", API keys",
               options.metrics_listen.empty()
                   ? "(off)"
                   : ("port " + std::to_string((*server)->metrics_port())).c_str());

  for (const mnemo::engine::DatastoreInfo& d : (*server)->engine()->ListDatastores()) {
    std::fprintf(stderr, "mnemo-server: datastore %s: %lld entries (%s), %s\n", d.name.c_str(),
                 static_cast<long long>(d.entries), d.index_type.c_str(), d.dir.c_str());
  }

  stop.WaitForNotification();
  (*server)->Drain(absl::GetFlag(FLAGS_grace_period));
  server->reset();
  signal_thread.join();
  std::fprintf(stderr, "mnemo-server: stopped\n");
  return 0;
}
