// mnemo — command-line client for a mnemo server. Flags and printing only; the RPCs live in
// mnemo_client.{h,cc}.
//
//   mnemo [--address HOST:PORT] [--timeout 60s] COMMAND ...
//     generate [--session ID] [--max_new_tokens N] [--temperature T] [--top_k K] [--top_p P]
//              [--seed S] [--repetition_penalty R] [--min_p P] [--presence_penalty P]
//              [--frequency_penalty P] [--logit_bias ID=BIAS,...] [--stop S]...
//              [--stop_token_ids ID,...] [--logprobs N] [--ids] PROMPT|@FILE|-
//              [--recall on|off]
//     score [--session ID] [--update_memory] [--ids] [--recall on|off] TEXT|@FILE|-
//     tokenize [--add_special_tokens] TEXT|@FILE|-
//     detokenize [--skip_special_tokens] IDS|@FILE|-
//     session create [--id ID] [--remember [--remember_capacity N]] | get ID | list | delete ID
//             | export ID FILE | import FILE [--id ID] | fork ID [--id NEW_ID]
//     models
//     health [--service NAME]
//
// Exit status: 0 on success, 1 when the server answers with an error (printed as
// "error: CODE: message"), 2 on a usage error; `health` exits 1 unless the service is SERVING.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "clients/cpp/connection_flags.h"
#include "clients/cpp/mnemo_client.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "Server address (any gRPC target).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "Deadline of each call (for generate: the whole stream), e.g. 60s, 5m, inf.");
ABSL_FLAG(std::string, session, "", "Session id (generate, score); empty = one-shot.");
ABSL_FLAG(std::string, recall, "",
          "generate, score: recall from the sequence's own history, on or off (empty = on for "
          "a session created with --remember; docs/recall.md).");
ABSL_FLAG(bool, remember, false,
          "session create: remember every token the session reads and generates (recall).");
ABSL_FLAG(int64_t, remember_capacity, 0,
          "session create --remember: tokens kept; 0 = the server's default.");
ABSL_FLAG(int32_t, max_new_tokens, 0, "Tokens to generate; 0 = the server's default.");
ABSL_FLAG(std::optional<float>, temperature, std::nullopt, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int32_t, top_k, 0, "Keep only the k most likely tokens; 0 = off.");
ABSL_FLAG(std::optional<float>, top_p, std::nullopt, "Nucleus sampling mass in (0, 1].");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "Sampling seed; same seed, same output.");
ABSL_FLAG(std::optional<float>, repetition_penalty, std::nullopt,
          "> 1 penalises tokens already generated.");
ABSL_FLAG(float, min_p, 0.0f,
          "Keep tokens whose probability is >= min_p times the top one's, in [0, 1]; 0 = off.");
ABSL_FLAG(float, presence_penalty, 0.0f,
          "Subtracted from the logit of every token already generated, in [-2, 2].");
ABSL_FLAG(float, frequency_penalty, 0.0f,
          "Subtracted from a token's logit once per time it was generated, in [-2, 2].");
ABSL_FLAG(std::vector<std::string>, logit_bias, {},
          "ID=BIAS pairs added to those tokens' logits, e.g. --logit_bias 10=-100,65=2.5.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Stop string; repeat the flag for several (--stop a --stop b).");
ABSL_FLAG(std::vector<std::string>, stop_token_ids, {},
          "Token ids that end generation when sampled (emitted), e.g. --stop_token_ids 10,257.");
ABSL_FLAG(bool, ids, false,
          "generate, score: PROMPT/TEXT is token ids (comma or space separated), fed as given "
          "with no BOS added.");
ABSL_FLAG(bool, add_special_tokens, false, "tokenize: put the model's BOS first.");
ABSL_FLAG(bool, skip_special_tokens, false, "detokenize: leave special tokens out.");
ABSL_FLAG(int32_t, logprobs, 0,
          "Report the N most likely alternatives of each token (printed to stderr).");
ABSL_FLAG(bool, update_memory, false, "score: append the text to the session's memory.");
ABSL_FLAG(absl::Duration, ttl, absl::ZeroDuration(),
          "session create: the session's idle TTL (e.g. 30m; 0 = the server's --session_ttl).");
ABSL_FLAG(bool, pinned, false,
          "session create: never evicted nor expired (only session delete removes it).");
ABSL_FLAG(std::string, id, "",
          "session create / import / fork: the new session's id (empty: server-generated; for "
          "import, the exported id).");
ABSL_FLAG(std::string, service, "mnemo.v1.Generation",
          "health: service to check (\"\" = the whole server).");

namespace {

using mnemo::client::Client;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] = R"(client for a mnemo server.

  mnemo [--address HOST:PORT] [--timeout 60s] COMMAND ...

commands:
  generate [--session ID] [--max_new_tokens N] [--temperature T] [--top_k K] [--top_p P]
           [--seed S] [--repetition_penalty R] [--min_p P] [--presence_penalty P]
           [--frequency_penalty P] [--logit_bias ID=BIAS,...] [--stop S]...
           [--stop_token_ids ID,...] [--logprobs N] [--ids] [--recall on|off] PROMPT
  score [--session ID] [--update_memory] [--ids] [--recall on|off] TEXT
  tokenize [--add_special_tokens] TEXT
  detokenize [--skip_special_tokens] IDS
  session create [--id ID] [--remember [--remember_capacity N]] [--ttl 30m] [--pinned]
          | get ID | list | delete ID | export ID FILE | import FILE [--id ID] | fork ID [--id NEW_ID]
  models
  health [--service mnemo.v1.Generation]

TEXT, PROMPT and IDS may be @FILE (read a file) or - (read stdin). With --ids, PROMPT and
TEXT are token ids like IDS: integers separated by commas or spaces. Put -- before a text
that starts with '-'.)";

int Usage(const std::string& message) {
  std::cerr << "mnemo: " << message << "\nRun 'mnemo --help' for usage.\n";
  return kExitUsage;
}

int PrintError(const absl::Status& status) {
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return kExitError;
}

// Removes every `--stop X` / `--stop=X` from argv (Abseil keeps only the last occurrence of a
// flag) and returns the values in order.
std::vector<std::string> ExtractRepeatedStop(std::vector<char*>& args) {
  std::vector<std::string> stops;
  std::vector<char*> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {  // everything after is positional
      kept.insert(kept.end(), args.begin() + i, args.end());
      break;
    }
    if (arg == "--stop" || arg == "-stop") {
      if (i + 1 < args.size()) stops.emplace_back(args[++i]);
      continue;
    }
    if (absl::StartsWith(arg, "--stop=") || absl::StartsWith(arg, "-stop=")) {
      stops.push_back(arg.substr(arg.find('=') + 1));
      continue;
    }
    kept.push_back(args[i]);
  }
  args = kept;
  return stops;
}

// TEXT, @FILE or - (stdin).
absl::StatusOr<std::string> ReadTextArg(const std::string& arg) {
  if (arg == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
  }
  if (absl::StartsWith(arg, "@")) {
    std::ifstream file(arg.substr(1), std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot read file ", arg.substr(1)));
    return std::string(std::istreambuf_iterator<char>(file), {});
  }
  return arg;
}

// Token ids separated by commas and/or whitespace ("256, 104 105").
absl::StatusOr<std::vector<int>> ParseIds(absl::string_view text, absl::string_view what) {
  std::vector<int> ids;
  for (absl::string_view piece :
       absl::StrSplit(text, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty())) {
    int id = 0;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", piece, "' is not a token id (an integer)"));
    }
    ids.push_back(id);
  }
  return ids;
}

std::string FinishReasonName(mnemo::v1::FinishReason reason) {
  std::string name = mnemo::v1::FinishReason_Name(reason);
  constexpr absl::string_view kPrefix = "FINISH_REASON_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return name;
}

// Printable, quoted form of a token's text (valid UTF-8, kept as is) or raw bytes
// (`escape_high`: bytes >= 0x80 shown as \xNN, since a lone byte is not a character).
std::string Quote(const std::string& text, bool escape_high = false) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f || (escape_high && c >= 0x80)) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// --recall on|off into a request's Recall (empty: left unset, the server's default).
absl::Status SetRecall(mnemo::v1::Recall* recall) {
  const std::string value = absl::GetFlag(FLAGS_recall);
  if (value.empty()) return absl::OkStatus();
  if (value != "on" && value != "off") {
    return absl::InvalidArgumentError("--recall must be on or off, got " + value);
  }
  recall->set_enabled(value == "on");
  return absl::OkStatus();
}

int RunGenerate(Client& client, const std::vector<std::string>& args,
                const std::vector<std::string>& stops) {
  if (args.size() != 1) return Usage("generate takes exactly one PROMPT argument");
  absl::StatusOr<std::string> prompt = ReadTextArg(args[0]);
  if (!prompt.ok()) return PrintError(prompt.status());

  mnemo::v1::GenerateRequest request;
  request.set_session_id(absl::GetFlag(FLAGS_session));
  if (absl::GetFlag(FLAGS_ids)) {
    absl::StatusOr<std::vector<int>> ids = ParseIds(*prompt, "PROMPT");
    if (!ids.ok()) return Usage(std::string(ids.status().message()));
    request.mutable_prompt_token_ids()->Add(ids->begin(), ids->end());
  } else {
    request.set_prompt(*prompt);
  }
  if (absl::Status s = SetRecall(request.mutable_recall()); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  request.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  mnemo::v1::SamplingParams* sampling = request.mutable_sampling();
  if (auto t = absl::GetFlag(FLAGS_temperature)) sampling->set_temperature(*t);
  sampling->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (auto p = absl::GetFlag(FLAGS_top_p)) sampling->set_top_p(*p);
  if (auto s = absl::GetFlag(FLAGS_seed)) sampling->set_seed(*s);
  if (auto r = absl::GetFlag(FLAGS_repetition_penalty)) sampling->set_repetition_penalty(*r);
  sampling->set_min_p(absl::GetFlag(FLAGS_min_p));
  sampling->set_presence_penalty(absl::GetFlag(FLAGS_presence_penalty));
  sampling->set_frequency_penalty(absl::GetFlag(FLAGS_frequency_penalty));
  for (const std::string& pair : absl::GetFlag(FLAGS_logit_bias)) {
    std::vector<std::string> parts = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    int id = 0;
    float bias = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &id) ||
        !absl::SimpleAtof(parts[1], &bias)) {
      return Usage(absl::StrCat("--logit_bias: '", pair, "' is not ID=BIAS"));
    }
    (*sampling->mutable_logit_bias())[id] = bias;
  }
  for (const std::string& stop : stops) request.add_stop(stop);
  for (const std::string& value : absl::GetFlag(FLAGS_stop_token_ids)) {
    absl::StatusOr<std::vector<int>> ids = ParseIds(value, "--stop_token_ids");
    if (!ids.ok()) return Usage(std::string(ids.status().message()));
    request.mutable_stop_token_ids()->Add(ids->begin(), ids->end());
  }
  request.set_logprobs(absl::GetFlag(FLAGS_logprobs));

  std::vector<mnemo::v1::Token> tokens;  // kept only for the --logprobs table
  const bool want_tokens = request.logprobs() > 0;
  bool wrote_text = false;
  absl::StatusOr<mnemo::client::GenerateSummary> summary =
      client.Generate(request, [&](const mnemo::v1::GenerateResponse& chunk) {
        if (!chunk.text().empty()) {
          std::fwrite(chunk.text().data(), 1, chunk.text().size(), stdout);
          std::fflush(stdout);
          wrote_text = true;
        }
        if (want_tokens) tokens.insert(tokens.end(), chunk.tokens().begin(), chunk.tokens().end());
        return true;
      });
  if (wrote_text) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!summary.ok()) return PrintError(summary.status());

  for (const mnemo::v1::Token& token : tokens) {
    std::string line = absl::StrFormat("%5d %-10s %9.4f", token.id(),
                                       Quote(token.bytes(), /*escape_high=*/true), token.logprob());
    for (const mnemo::v1::TokenAlternative& alt : token.top_logprobs()) {
      absl::StrAppendFormat(&line, "  %s=%.4f", Quote(alt.text()), alt.logprob());
    }
    std::cerr << line << "\n";
  }
  const mnemo::v1::Usage& usage = summary->usage;
  std::cerr << absl::StrFormat(
      "[finish_reason=%s prompt_tokens=%d generated_tokens=%d session_tokens=%d]\n",
      FinishReasonName(summary->finish_reason), usage.prompt_tokens(), usage.generated_tokens(),
      usage.session_tokens());
  return kExitOk;
}

int RunScore(Client& client, const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("score takes exactly one TEXT argument");
  absl::StatusOr<std::string> text = ReadTextArg(args[0]);
  if (!text.ok()) return PrintError(text.status());
  mnemo::v1::ScoreRequest request;
  request.set_session_id(absl::GetFlag(FLAGS_session));
  if (absl::GetFlag(FLAGS_ids)) {
    absl::StatusOr<std::vector<int>> ids = ParseIds(*text, "TEXT");
    if (!ids.ok()) return Usage(std::string(ids.status().message()));
    request.mutable_token_ids()->Add(ids->begin(), ids->end());
  } else {
    request.set_text(*text);
  }
  request.set_update_memory(absl::GetFlag(FLAGS_update_memory));
  if (absl::Status s = SetRecall(request.mutable_recall()); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  absl::StatusOr<mnemo::v1::ScoreResponse> response = client.Score(request);
  if (!response.ok()) return PrintError(response.status());
  std::cout << absl::StrFormat(
      "tokens=%d bytes=%d total_logprob=%.6f bits_per_byte=%.6f\n", response->token_count(),
      response->byte_count(), response->total_logprob(), response->bits_per_byte());
  return kExitOk;
}

int RunTokenize(Client& client, const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("tokenize takes exactly one TEXT argument");
  absl::StatusOr<std::string> text = ReadTextArg(args[0]);
  if (!text.ok()) return PrintError(text.status());
  absl::StatusOr<mnemo::v1::TokenizeResponse> response =
      client.Tokenize(*text, absl::GetFlag(FLAGS_add_special_tokens));
  if (!response.ok()) return PrintError(response.status());
  std::string ids;
  for (int id : response->ids()) absl::StrAppend(&ids, ids.empty() ? "" : " ", id);
  std::cout << response->ids_size() << " tokens: " << ids << "\n";
  return kExitOk;
}

int RunDetokenize(Client& client, const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("detokenize takes exactly one IDS argument");
  absl::StatusOr<std::string> text = ReadTextArg(args[0]);
  if (!text.ok()) return PrintError(text.status());
  absl::StatusOr<std::vector<int>> ids = ParseIds(*text, "IDS");
  if (!ids.ok()) return Usage(std::string(ids.status().message()));
  absl::StatusOr<std::string> decoded =
      client.Detokenize(*ids, absl::GetFlag(FLAGS_skip_special_tokens));
  if (!decoded.ok()) return PrintError(decoded.status());
  std::fwrite(decoded->data(), 1, decoded->size(), stdout);
  std::fputc('\n', stdout);
  return kExitOk;
}

void PrintSession(const mnemo::v1::Session& s) {
  std::cout << absl::StrFormat(
      "session_id: %s\nmodel: %s\ntokens_seen: %d\nmemory: xl_tokens=%d compressed_slots=%d "
      "knn_entries=%d remembered_tokens=%d bytes=%d\ncreate_time: %s\nlast_use_time: %s\n"
      "busy: %s\nttl: %s\npinned: %s\n",
      s.session_id(), s.model(), s.tokens_seen(), s.memory().xl_tokens(),
      s.memory().compressed_slots(), s.memory().knn_entries(), s.memory().remembered_tokens(),
      s.memory().bytes(),
      absl::FormatTime(absl::FromUnixSeconds(s.create_time()), absl::UTCTimeZone()),
      absl::FormatTime(absl::FromUnixSeconds(s.last_use_time()), absl::UTCTimeZone()),
      s.busy() ? "true" : "false",
      s.ttl_seconds() > 0 ? absl::FormatDuration(absl::Seconds(s.ttl_seconds()))
                          : std::string("server default"),
      s.pinned() ? "true" : "false");
}

constexpr char kSessionVerbs[] =
    "session needs one of: create, get ID, list, delete ID, export ID FILE, import FILE, "
    "fork ID";

int RunSession(Client& client, const std::vector<std::string>& args) {
  if (args.empty()) return Usage(kSessionVerbs);
  const std::string& verb = args[0];
  if (verb == "create" && args.size() == 1) {
    mnemo::v1::CreateSessionRequest request;
    request.set_session_id(absl::GetFlag(FLAGS_id));
    request.set_remember(absl::GetFlag(FLAGS_remember));
    request.set_remember_capacity(absl::GetFlag(FLAGS_remember_capacity));
    request.set_ttl_seconds(absl::ToInt64Seconds(absl::GetFlag(FLAGS_ttl)));
    request.set_pinned(absl::GetFlag(FLAGS_pinned));
    absl::StatusOr<mnemo::v1::Session> session = client.CreateSession(request);
    if (!session.ok()) return PrintError(session.status());
    std::cout << session->session_id() << "\n";  // bare, so SID=$(mnemo session create) works
    return kExitOk;
  }
  if (verb == "get" && args.size() == 2) {
    absl::StatusOr<mnemo::v1::Session> session = client.GetSession(args[1]);
    if (!session.ok()) return PrintError(session.status());
    PrintSession(*session);
    return kExitOk;
  }
  if (verb == "list" && args.size() == 1) {
    absl::StatusOr<std::vector<mnemo::v1::Session>> sessions = client.ListSessions();
    if (!sessions.ok()) return PrintError(sessions.status());
    std::cout << absl::StrFormat("%-36s %12s %12s %5s\n", "SESSION", "TOKENS", "BYTES", "BUSY");
    for (const mnemo::v1::Session& s : *sessions) {
      std::cout << absl::StrFormat("%-36s %12d %12d %5s\n", s.session_id(), s.tokens_seen(),
                                   s.memory().bytes(), s.busy() ? "yes" : "no");
    }
    return kExitOk;
  }
  if (verb == "delete" && args.size() == 2) {
    absl::Status status = client.DeleteSession(args[1]);
    if (!status.ok()) return PrintError(status);
    std::cout << "deleted " << args[1] << "\n";
    return kExitOk;
  }
  if (verb == "export" && args.size() == 3) {
    absl::StatusOr<std::string> snapshot = client.ExportSession(args[1]);
    if (!snapshot.ok()) return PrintError(snapshot.status());
    std::ofstream out(args[2], std::ios::binary | std::ios::trunc);
    out.write(snapshot->data(), static_cast<std::streamsize>(snapshot->size()));
    out.close();
    if (!out) return PrintError(absl::UnavailableError(absl::StrCat("cannot write ", args[2])));
    std::cout << absl::StrFormat("exported %s: %d bytes to %s\n", args[1], snapshot->size(),
                                 args[2]);
    return kExitOk;
  }
  if (verb == "import" && args.size() == 2) {
    std::ifstream in(args[1], std::ios::binary);
    if (!in) return PrintError(absl::NotFoundError(absl::StrCat("cannot open ", args[1])));
    const std::string snapshot((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    absl::StatusOr<mnemo::v1::Session> session =
        client.ImportSession(snapshot, absl::GetFlag(FLAGS_id));
    if (!session.ok()) return PrintError(session.status());
    std::cout << session->session_id() << "\n";
    return kExitOk;
  }
  if (verb == "fork" && args.size() == 2) {
    absl::StatusOr<mnemo::v1::Session> session =
        client.ForkSession(args[1], absl::GetFlag(FLAGS_id));
    if (!session.ok()) return PrintError(session.status());
    std::cout << session->session_id() << "\n";
    return kExitOk;
  }
  return Usage(kSessionVerbs);
}

int RunModels(Client& client, const std::vector<std::string>& args) {
  if (!args.empty()) return Usage("models takes no arguments");
  absl::StatusOr<std::vector<mnemo::v1::Model>> models = client.ListModels();
  if (!models.ok()) return PrintError(models.status());
  for (const mnemo::v1::Model& m : *models) {
    const mnemo::v1::ModelMemoryConfig& mem = m.memory();
    std::cout << absl::StrFormat(
        "%s\n  path: %s\n  layers=%d d_model=%d heads=%d vocab_size=%d parameters=%d\n"
        "  seg_len=%d mem_len=%d cmem_len=%d cmem_rate=%d compression=%s clamp_len=%d\n"
        "  tokenizer=%s dtype=%s device=%s\n"
        "  family=%s weight_dtype=%s window=%d sink_tokens=%d\n",
        m.name(), m.path(), m.layers(), m.d_model(), m.heads(), m.vocab_size(), m.parameters(),
        mem.seg_len(), mem.mem_len(), mem.cmem_len(), mem.cmem_rate(), mem.compression(),
        mem.clamp_len(), m.tokenizer(), m.dtype(), m.device(), m.family(), m.weight_dtype(),
        m.window(), m.sink_tokens());
  }
  return kExitOk;
}

int RunHealth(Client& client, const std::vector<std::string>& args) {
  if (!args.empty()) return Usage("health takes no arguments (use --service)");
  absl::StatusOr<mnemo::client::HealthResult> health =
      client.Health(absl::GetFlag(FLAGS_service));
  if (!health.ok()) return PrintError(health.status());
  std::cout << health->status << "\n";
  return health->serving ? kExitOk : kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "clients/cpp/main.cc");
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<char*> raw(argv, argv + argc);
  const std::vector<std::string> stops = ExtractRepeatedStop(raw);
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(raw.size()), raw.data());
  // `--stop a,b` (the Abseil list form) also works; repeated flags were extracted above.
  std::vector<std::string> all_stops = absl::GetFlag(FLAGS_stop);
  all_stops.insert(all_stops.end(), stops.begin(), stops.end());

  if (positional.size() < 2) return Usage("missing COMMAND");
  const std::string command = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());

  absl::StatusOr<mnemo::client::ConnectionOptions> connection =
      mnemo::client::ConnectionOptionsFromFlags();
  absl::StatusOr<std::unique_ptr<Client>> connected =
      connection.ok() ? Client::Connect(absl::GetFlag(FLAGS_address),
                                        absl::GetFlag(FLAGS_timeout), *connection)
                      : absl::StatusOr<std::unique_ptr<Client>>(connection.status());
  if (!connected.ok()) {
    std::cerr << "mnemo: " << connected.status().message() << "\n";
    return 2;
  }
  Client& client = **connected;
  if (command == "generate") return RunGenerate(client, args, all_stops);
  if (command == "score") return RunScore(client, args);
  if (command == "tokenize") return RunTokenize(client, args);
  if (command == "detokenize") return RunDetokenize(client, args);
  if (command == "session") return RunSession(client, args);
  if (command == "models") return RunModels(client, args);
  if (command == "health") return RunHealth(client, args);
  return Usage(absl::StrCat("unknown command '", command, "'"));
}
