// How datastores are described to callers (Datastores.ListDatastores / GetDatastore).
#ifndef MNEMO_ENGINE_SCHEDULER_DATASTORE_INFO_H_
#define MNEMO_ENGINE_SCHEDULER_DATASTORE_INFO_H_

#include <string>

#include "engine/datastore/datastore_catalog.h"
#include "engine/session/session.h"
#include "engine/types.h"

namespace mnemo::scheduler {

// A shared datastore: its manifest and the defaults it was loaded with.
engine::DatastoreInfo SharedDatastoreInfo(const datastore::DatastoreCatalog::Entry& entry);
// `session`'s private datastore (empty when it has none yet); loop thread only.
engine::DatastoreInfo SessionDatastoreInfo(const session::Session& session,
                                           const std::string& model_id);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_DATASTORE_INFO_H_
