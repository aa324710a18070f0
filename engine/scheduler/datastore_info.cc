#include "engine/scheduler/datastore_info.h"

namespace mnemo::scheduler {

engine::DatastoreInfo SharedDatastoreInfo(const datastore::DatastoreCatalog::Entry& entry) {
  const datastore::Manifest& m = entry.store->manifest();
  engine::DatastoreInfo info;
  info.name = entry.name;
  info.dir = entry.store->dir();
  info.model = m.model.ToString();
  info.key_type = m.key_type;
  info.d = m.d;
  info.entries = m.entries;
  info.bytes = entry.store->bytes();
  info.index_type = datastore::IndexTypeName(m.index_type);
  info.nlist = m.nlist;
  info.pq_m = m.pq_m;
  info.pq_nbits = m.pq_nbits;
  info.corpus = m.corpus;
  info.corpus_files = m.corpus_files;
  info.corpus_bytes = m.corpus_bytes;
  info.build_seconds = m.build_seconds;
  info.built_at = m.built_at;
  info.default_lambda = entry.defaults.lambda;
  info.default_k = entry.defaults.k;
  info.default_temperature = entry.defaults.temperature;
  return info;
}

engine::DatastoreInfo SessionDatastoreInfo(const session::Session& session,
                                           const std::string& model_id) {
  const datastore::KnnLmDefaults defaults;
  engine::DatastoreInfo info;
  info.name = datastore::kSessionDatastoreName;
  info.session_private = true;
  info.session_id = session.id;
  info.model = model_id;
  info.key_type = datastore::kKeyType;
  info.index_type = "exact";
  if (session.datastore != nullptr) {
    info.d = session.datastore->d();
    info.entries = session.datastore->entries();
    info.bytes = session.datastore->bytes();
  }
  info.default_lambda = defaults.lambda;
  info.default_k = defaults.k;
  info.default_temperature = defaults.temperature;
  return info;
}

}  // namespace mnemo::scheduler
