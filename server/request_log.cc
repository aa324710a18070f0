#include "server/request_log.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace mnemo::server {
namespace {

constexpr size_t kMaxMessage = 512;  // a status message is cut beyond this

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

double Millis(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// `value` as a text-format value: bare when it is plain, else quoted with C escapes.
std::string TextValue(absl::string_view value) {
  const bool plain = !value.empty() && value.find_first_of(" \"=\\\n\t") == absl::string_view::npos;
  if (plain) return absl::CHexEscape(value);
  return absl::StrCat("\"", absl::CHexEscape(value), "\"");
}

}  // namespace

absl::StatusOr<RequestLog::Format> RequestLog::ParseFormat(absl::string_view name) {
  if (name == "off") return Format::kOff;
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format must be text, json or off, got \"", name, "\""));
}

std::string RequestLog::Line(const RequestRecord& r) const {
  const std::string code = absl::StatusCodeToString(r.status.code());
  const std::string message(r.status.message().substr(0, kMaxMessage));
  switch (format_) {
    case Format::kOff:
      return "";
    case Format::kJson: {
      nlohmann::json line = {{"time", Rfc3339(r.start)},
                             {"method", r.method},
                             {"code", code},
                             {"tokens_in", r.tokens_in},
                             {"tokens_out", r.tokens_out},
                             {"total_ms", Millis(r.total_time)}};
      if (!r.tenant.empty()) line["tenant"] = r.tenant;
      if (!r.session.empty()) line["session"] = r.session;
      if (!r.peer.empty()) line["peer"] = r.peer;
      if (r.queue_time.has_value()) line["queue_ms"] = Millis(*r.queue_time);
      if (!r.status.ok()) line["message"] = message;
      if (log_prompts_ && r.prompt.has_value()) line["prompt"] = *r.prompt;
      // Invalid UTF-8 (a rejected request's text) is replaced, never fatal.
      return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    case Format::kText: {
      std::string line = absl::StrCat(Rfc3339(r.start), " ", r.method, " code=", code);
      if (!r.tenant.empty()) absl::StrAppend(&line, " tenant=", TextValue(r.tenant));
      if (!r.session.empty()) absl::StrAppend(&line, " session=", TextValue(r.session));
      absl::StrAppend(&line, " tokens_in=", r.tokens_in, " tokens_out=", r.tokens_out);
      if (r.queue_time.has_value()) {
        absl::StrAppend(&line, absl::StrFormat(" queue_ms=%.3f", Millis(*r.queue_time)));
      }
      absl::StrAppend(&line, absl::StrFormat(" total_ms=%.3f", Millis(r.total_time)));
      if (!r.peer.empty()) absl::StrAppend(&line, " peer=", TextValue(r.peer));
      if (!r.status.ok()) absl::StrAppend(&line, " message=", TextValue(message));
      if (log_prompts_ && r.prompt.has_value()) {
        absl::StrAppend(&line, " prompt=", TextValue(*r.prompt));
      }
      return line + "\n";
    }
  }
  return "";
}

void RequestLog::Write(const RequestRecord& record) {
  if (!enabled()) return;
  const std::string line = Line(record);
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace mnemo::server
