#include "engine/datastore/datastore_catalog.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mnemo::datastore {
namespace {

absl::Status BadSpec(absl::string_view value, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--datastore \"", value, "\": ", what,
      " (expected NAME=DIR[,lambda=L][,k=K][,temperature=T][,nprobe=N])"));
}

}  // namespace

absl::Status ValidateDatastoreName(absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError("datastore names have 1 to 64 characters");
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "datastore name \"", name, "\" may only use letters, digits, '_', '-' and '.'"));
    }
  }
  if (name == kSessionDatastoreName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "datastore name \"", name, "\" is reserved for sessions' private datastores"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DatastoreSpec> ParseDatastoreSpec(absl::string_view flag_value) {
  std::vector<absl::string_view> parts = absl::StrSplit(flag_value, ',');
  const size_t eq = parts[0].find('=');
  if (eq == absl::string_view::npos) return BadSpec(flag_value, "no '=' between NAME and DIR");
  DatastoreSpec spec;
  spec.name = std::string(parts[0].substr(0, eq));
  spec.dir = std::string(parts[0].substr(eq + 1));
  if (absl::Status s = ValidateDatastoreName(spec.name); !s.ok()) {
    return BadSpec(flag_value, s.message());
  }
  if (spec.dir.empty()) return BadSpec(flag_value, "DIR is empty");
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(parts[i], '=');
    const absl::string_view key = kv.first, value = kv.second;
    bool parsed = false;
    if (key == "lambda") {
      parsed = absl::SimpleAtof(value, &spec.defaults.lambda) && spec.defaults.lambda >= 0 &&
               spec.defaults.lambda <= 1;
    } else if (key == "k") {
      parsed = absl::SimpleAtoi(value, &spec.defaults.k) && spec.defaults.k >= 1 &&
               spec.defaults.k <= 1024;
    } else if (key == "temperature") {
      parsed = absl::SimpleAtof(value, &spec.defaults.temperature) &&
               spec.defaults.temperature > 0 && std::isfinite(spec.defaults.temperature);
    } else if (key == "nprobe") {
      parsed = absl::SimpleAtoi(value, &spec.defaults.nprobe) && spec.defaults.nprobe >= 1;
    } else {
      return BadSpec(flag_value, absl::StrCat("unknown option \"", key, "\""));
    }
    if (!parsed) {
      return BadSpec(flag_value,
                     absl::StrCat("bad ", key, " \"", value,
                                  "\" (lambda in [0, 1], k in [1, 1024], temperature > 0, "
                                  "nprobe >= 1)"));
    }
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<DatastoreCatalog>> DatastoreCatalog::Open(
    const std::vector<DatastoreSpec>& specs, const ModelId& model) {
  std::unique_ptr<DatastoreCatalog> catalog = Empty();
  for (const DatastoreSpec& spec : specs) {
    if (catalog->Find(spec.name) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--datastore: the name \"", spec.name, "\" is given twice"));
    }
    absl::StatusOr<std::unique_ptr<Datastore>> store = Datastore::Open(spec.dir, model);
    if (!store.ok()) {
      return absl::Status(store.status().code(),
                          absl::StrCat("--datastore ", spec.name, "=", spec.dir, ": ",
                                       store.status().message()));
    }
    catalog->entries_.push_back(Entry{spec.name, spec.defaults, std::move(*store)});
  }
  std::sort(catalog->entries_.begin(), catalog->entries_.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return catalog;
}

std::unique_ptr<DatastoreCatalog> DatastoreCatalog::Empty() {
  return std::unique_ptr<DatastoreCatalog>(new DatastoreCatalog());
}

const DatastoreCatalog::Entry* DatastoreCatalog::Find(absl::string_view name) const {
  for (const Entry& entry : entries_) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string DatastoreCatalog::Names() const {
  if (entries_.empty()) return "none";
  return absl::StrJoin(entries_, ", ",
                       [](std::string* out, const Entry& e) { out->append(e.name); });
}

}  // namespace mnemo::datastore
