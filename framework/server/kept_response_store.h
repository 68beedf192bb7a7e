// Where the Responses API keeps responses for a request to the pipeline `served`: its history
// store when it has one (framework/history/kept_responses.h: per tenant and owner as sessions,
// shared by every replica on the same database, kept through restarts), else `memory`, the
// server's own bounded store.
#pragma once

#include <memory>

#include "framework/responses/response_store.h"
#include "framework/server/served_pipeline.h"

namespace chatflow::server {

// Throws RequestFailure (503 history_unavailable) from a read the history store could not make.
std::shared_ptr<responses::ResponseKeeper> response_keeper(const ServedPipeline& served,
                                                           responses::ResponseStore& memory);

}  // namespace chatflow::server
