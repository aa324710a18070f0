// request_fuzz: a request as a raw (ByteBuffer) method of the server receives it, through the
// steps that method takes before the engine does any work: server/raw_message.cc ParseRequest,
// the conversion in server/proto_convert.cc, then the engine's request validation
// (engine/scheduler/validation.cc) or the pagination of a List call.
//
// Input: [selector byte][the serialized request]. selector % kKinds.size() picks the message
// type (kKinds below); selector / kKinds.size() picks the model the engine checks against
// (vocabulary size; with or without calibrated early-exit thresholds and an exit classifier).
//
// Checks besides the sanitizers (each a promise of the code's headers):
//   - ParseRequest never leaves a UTF-8 check to protobuf (which would log an error per
//     request): protobuf logs nothing about UTF-8 while it runs. Malformed bytes never reach
//     protobuf either (its string reader checks UTF-8 before it notices that a string runs past
//     the end of its submessage, and logged for such bytes; fuzz/regressions/request_fuzz/);
//   - what ParseRequest refuses as no request at all is none for protobuf either, even with
//     every string read as bytes (LenientTypes): its scan is never stricter than the parser;
//   - a parsed request serialises (SerializeResponse) and parses back to the same bytes;
//   - every rejection is INVALID_ARGUMENT and starts with the name of a field of the request
//     ("sampling.logit_bias[7] ...", "prompt ..."), as proto_convert.h and validation.h say;
//   - ValidateGenerate resolves max_new_tokens into [1, cap] and, when early exit is on, the
//     measure and a threshold in (0, 1];
//   - pages: at most page_size entries each, and following next_page_token from the requested
//     page lists every later entry once, in order; a page token we encode decodes to its key.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/scheduler/validation.h"
#include "engine/session/session_store.h"
#include "fuzz/fuzz_support.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::fuzz {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Every request message a raw method parses, in selector order.
const std::array<const Message*, 16> kKinds = {
    &v1::GenerateRequest::default_instance(),
    &v1::ScoreRequest::default_instance(),
    &v1::TokenizeRequest::default_instance(),
    &v1::DetokenizeRequest::default_instance(),
    &v1::CreateSessionRequest::default_instance(),
    &v1::GetSessionRequest::default_instance(),
    &v1::ListSessionsRequest::default_instance(),
    &v1::DeleteSessionRequest::default_instance(),
    &v1::ExportSessionRequest::default_instance(),
    &v1::ImportSessionRequest::default_instance(),
    &v1::ForkSessionRequest::default_instance(),
    &v1::ListModelsRequest::default_instance(),
    &v1::GetModelRequest::default_instance(),
    &v1::ListDatastoresRequest::default_instance(),
    &v1::GetDatastoreRequest::default_instance(),
    &v1::AddToSessionDatastoreRequest::default_instance(),
};

// What protobuf logged since this was last cleared (it must say nothing about UTF-8).
std::string& ProtobufLog() {
  static std::string* const log = new std::string();
  return *log;
}

void RecordProtobufLog(google::protobuf::LogLevel, const char*, int, const std::string& message) {
  ProtobufLog() += message;
  ProtobufLog() += '\n';
}

// The message types of kKinds with every `string` field made `bytes`, which protobuf parses
// without a UTF-8 check: bytes that do not parse as one are malformed whatever their UTF-8.
class LenientTypes {
 public:
  LenientTypes() {
    for (const Message* kind : kKinds) Add(kind->GetDescriptor()->file());
  }

  std::unique_ptr<Message> New(const Descriptor* type) {
    const Descriptor* lenient = pool_.FindMessageTypeByName(type->full_name());
    FUZZ_CHECK(lenient != nullptr, "no lenient type for " + type->full_name());
    return std::unique_ptr<Message>(factory_.GetPrototype(lenient)->New());
  }

 private:
  void Add(const google::protobuf::FileDescriptor* file) {
    if (pool_.FindFileByName(file->name()) != nullptr) return;
    for (int i = 0; i < file->dependency_count(); ++i) Add(file->dependency(i));
    google::protobuf::FileDescriptorProto proto;
    file->CopyTo(&proto);
    for (google::protobuf::DescriptorProto& message : *proto.mutable_message_type()) {
      MakeStringsBytes(message);
    }
    FUZZ_CHECK(pool_.BuildFile(proto) != nullptr, "cannot build the lenient " + file->name());
  }

  static void MakeStringsBytes(google::protobuf::DescriptorProto& message) {
    if (message.options().map_entry()) return;  // map keys cannot be bytes
    for (google::protobuf::FieldDescriptorProto& field : *message.mutable_field()) {
      if (field.type() == google::protobuf::FieldDescriptorProto::TYPE_STRING) {
        field.set_type(google::protobuf::FieldDescriptorProto::TYPE_BYTES);
      }
    }
    for (google::protobuf::DescriptorProto& nested : *message.mutable_nested_type()) {
      MakeStringsBytes(nested);
    }
  }

  google::protobuf::DescriptorPool pool_;
  google::protobuf::DynamicMessageFactory factory_;
};

LenientTypes& Lenient() {
  static LenientTypes* const types = new LenientTypes();
  return *types;
}

grpc::ByteBuffer ToByteBuffer(std::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

std::string Deterministic(const Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// Whether `message` (a status message) starts with a field path of `type`: dotted field
// names, each possibly followed by an index, "sampling.logit_bias[7]".
bool StartsWithField(const Descriptor* type, absl::string_view message) {
  absl::string_view path = message.substr(0, message.find(' '));
  while (true) {
    const size_t dot = path.find('.');
    absl::string_view name = path.substr(0, dot);
    name = name.substr(0, name.find('['));
    const FieldDescriptor* field = type->FindFieldByName(std::string(name));
    if (field == nullptr) return false;
    if (dot == absl::string_view::npos) return true;
    if (field->message_type() == nullptr) return false;
    type = field->message_type();
    path.remove_prefix(dot + 1);
  }
}

void CheckRejection(const Message& request, const absl::Status& status, absl::string_view step) {
  if (status.ok()) return;
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument,
             absl::StrCat(step, " failed with ", status.ToString(), " (not INVALID_ARGUMENT)"));
  FUZZ_CHECK(StartsWithField(request.GetDescriptor(), status.message()),
             absl::StrCat(step, "'s error names no field of ", request.GetTypeName(), ": ",
                          status.message()));
}

// The model the engine validates against.
struct ModelView {
  scheduler::RequestLimits limits;
  scheduler::ModelExitInfo exit;
};

ModelView ModelFor(unsigned variant) {
  ModelView view;
  view.limits.vocab_size = variant % 2 == 0 ? 259 : 32000;
  if (variant / 2 % 2 == 1) {
    view.exit.default_measure = model::ExitMeasure::kClassifier;
    view.exit.thresholds = {0.9f, 0.95f, 0.99f};
    view.exit.has_classifier = true;
  }
  return view;
}

void CheckGenerate(const v1::GenerateRequest& request, const ModelView& model) {
  absl::StatusOr<engine::GenerateOptions> options =
      server::ToGenerateOptions(request, model.limits.max_top_logprobs);
  CheckRejection(request, options.status(), "ToGenerateOptions");
  if (!options.ok()) return;
  const absl::Status valid = scheduler::ValidateGenerate(*options, model.limits, model.exit);
  CheckRejection(request, valid, "ValidateGenerate");
  if (!valid.ok()) return;
  FUZZ_CHECK(
      options->max_new_tokens >= 1 && options->max_new_tokens <= model.limits.max_new_tokens_cap,
      absl::StrCat("max_new_tokens resolved to ", options->max_new_tokens));
  if (options->early_exit.enabled) {
    FUZZ_CHECK(options->early_exit.measure.has_value() && options->early_exit.threshold.has_value(),
               "early exit enabled without a resolved measure and threshold");
    const float threshold = *options->early_exit.threshold;
    FUZZ_CHECK(threshold > 0.0f && threshold <= 1.0f,
               absl::StrCat("early_exit threshold resolved to ", threshold));
  }
}

void CheckScore(const v1::ScoreRequest& request, const ModelView& model) {
  absl::StatusOr<engine::ScoreOptions> options = server::ToScoreOptions(request);
  CheckRejection(request, options.status(), "ToScoreOptions");
  if (!options.ok()) return;
  CheckRejection(request, scheduler::ValidateScore(*options, model.limits), "ValidateScore");
}

// Pagination over `items` (sorted by `key`, distinct) as Fill*Page does it for `request`: the
// page it returns, then the pages its next_page_token leads to.
template <typename Request, typename Response, typename Item>
void CheckPages(const Request& request, const std::vector<Item>& items,
                const std::function<const std::string&(const Item&)>& key,
                absl::Status (*fill)(const std::vector<Item>&, const Request&, Response*)) {
  absl::StatusOr<server::PageRequest> page =
      server::ParsePageRequest(request.page_size(), request.page_token());
  CheckRejection(request, page.status(), "ParsePageRequest");
  if (!page.ok()) return;
  const std::string token = server::EncodePageToken(page->after);
  absl::StatusOr<server::PageRequest> again = server::ParsePageRequest(0, token);
  FUZZ_CHECK(again.ok() && again->after == page->after,
             "EncodePageToken does not decode to the key it encodes");

  // The entries after page->after, which the pages from here must list, each once, in order.
  std::vector<std::string> expected;
  for (const Item& item : items) {
    if (key(item) > page->after) expected.push_back(key(item));
  }
  std::vector<std::string> listed;
  Request next = request;
  for (size_t round = 0; round <= items.size() + 1; ++round) {
    Response response;
    const absl::Status status = fill(items, next, &response);
    FUZZ_CHECK(status.ok(), absl::StrCat("a page after a good one failed: ", status.ToString()));
    const size_t before = listed.size();
    if constexpr (std::is_same_v<Response, v1::ListSessionsResponse>) {
      for (const v1::Session& s : response.sessions()) listed.push_back(s.session_id());
    } else if constexpr (std::is_same_v<Response, v1::ListModelsResponse>) {
      for (const v1::Model& m : response.models()) listed.push_back(m.name());
    } else {
      for (const v1::Datastore& d : response.datastores()) listed.push_back(d.name());
    }
    const size_t length = listed.size() - before;
    FUZZ_CHECK(length <= static_cast<size_t>(page->size),
               absl::StrCat("a page of ", length, " entries for page_size ", page->size));
    if (response.next_page_token().empty()) break;
    next.set_page_token(response.next_page_token());
  }
  FUZZ_CHECK(listed == expected,
             absl::StrCat("pages listed ", listed.size(), " entries, expected ", expected.size()));
}

void CheckListSessions(const v1::ListSessionsRequest& request) {
  std::vector<engine::SessionInfo> sessions(5);
  const char* ids[] = {"a", "b", "b0", "c", "z\xc3\xa9"};
  for (size_t i = 0; i < sessions.size(); ++i) sessions[i].session_id = ids[i];
  CheckPages<v1::ListSessionsRequest, v1::ListSessionsResponse, engine::SessionInfo>(
      request, sessions,
      [](const engine::SessionInfo& s) -> const std::string& { return s.session_id; },
      &server::FillSessionsPage);
}

void CheckListModels(const v1::ListModelsRequest& request) {
  std::vector<engine::ModelInfo> models(3);
  const char* names[] = {"gpt2", "llama", "mnemo-stdlib"};
  for (size_t i = 0; i < models.size(); ++i) models[i].name = names[i];
  CheckPages<v1::ListModelsRequest, v1::ListModelsResponse, engine::ModelInfo>(
      request, models, [](const engine::ModelInfo& m) -> const std::string& { return m.name; },
      &server::FillModelsPage);
}

void CheckListDatastores(const v1::ListDatastoresRequest& request) {
  std::vector<engine::DatastoreInfo> datastores(4);
  const char* names[] = {"code", "docs", "stdlib", "wiki"};
  for (size_t i = 0; i < datastores.size(); ++i) datastores[i].name = names[i];
  CheckPages<v1::ListDatastoresRequest, v1::ListDatastoresResponse, engine::DatastoreInfo>(
      request, datastores,
      [](const engine::DatastoreInfo& d) -> const std::string& { return d.name; },
      &server::FillDatastoresPage);
}

void CheckConversions(const Message& request, const ModelView& model) {
  if (auto* r = dynamic_cast<const v1::GenerateRequest*>(&request)) return CheckGenerate(*r, model);
  if (auto* r = dynamic_cast<const v1::ScoreRequest*>(&request)) return CheckScore(*r, model);
  if (auto* r = dynamic_cast<const v1::CreateSessionRequest*>(&request)) {
    const engine::CreateSessionOptions options = server::ToCreateSessionOptions(*r);
    if (!options.session_id.empty()) {
      CheckRejection(request, session::SessionStore::ValidateId(options.session_id), "ValidateId");
    }
    return;
  }
  if (auto* r = dynamic_cast<const v1::AddToSessionDatastoreRequest*>(&request)) {
    CheckRejection(request, scheduler::ValidateAddToDatastore(server::ToAddToDatastoreOptions(*r)),
                   "ValidateAddToDatastore");
    return;
  }
  if (auto* r = dynamic_cast<const v1::ListSessionsRequest*>(&request)) {
    return CheckListSessions(*r);
  }
  if (auto* r = dynamic_cast<const v1::ListModelsRequest*>(&request)) return CheckListModels(*r);
  if (auto* r = dynamic_cast<const v1::ListDatastoresRequest*>(&request)) {
    return CheckListDatastores(*r);
  }
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(&mnemo::fuzz::RecordProtobufLog);
  mnemo::fuzz::Lenient();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::fuzz;
  if (size == 0) return 0;
  const Message& kind = *kKinds[data[0] % kKinds.size()];
  const ModelView model = ModelFor(data[0] / kKinds.size());
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::unique_ptr<Message> request(kind.New());
  ProtobufLog().clear();
  const absl::Status parsed = mnemo::server::ParseRequest(ToByteBuffer(bytes), request.get());
  FUZZ_CHECK(ProtobufLog().find("UTF-8") == std::string::npos,
             absl::StrCat("ParseRequest left a UTF-8 error to protobuf (", parsed.ToString(),
                          "): ", ProtobufLog()));
  if (!parsed.ok() && absl::StartsWith(parsed.message(), "request is not a valid ")) {
    std::unique_ptr<Message> lenient = Lenient().New(kind.GetDescriptor());
    FUZZ_CHECK(!lenient->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
               absl::StrCat("ParseRequest refused bytes protobuf parses: ", parsed.ToString()));
  }
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.code() == absl::StatusCode::kInvalidArgument, parsed.ToString());
    return 0;
  }

  grpc::ByteBuffer reply;
  mnemo::server::SerializeResponse(*request, &reply);
  std::unique_ptr<Message> reparsed(kind.New());
  const absl::Status again = mnemo::server::ParseRequest(reply, reparsed.get());
  FUZZ_CHECK(again.ok() && Deterministic(*reparsed) == Deterministic(*request),
             absl::StrCat("a parsed ", kind.GetTypeName(),
                          " does not survive serialisation: ", again.ToString()));

  CheckConversions(*request, model);
  return 0;
}
