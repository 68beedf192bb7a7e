// Searching the caller's sessions (GET /v1/sessions?q=...): titles and the text of every turn,
// matched as moderation rules match text (framework/text/normalizer.h: case-folded, accents and
// width ignored, runs of white space one space). The history stores keep no text index, so a
// search reads the owner's sessions through the export every store already has: its cost grows
// with what the owner keeps, which max_sessions_per_owner bounds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "framework/api/capabilities.h"

namespace chatflow::server {

// The query as searched: normalized; empty when it has nothing to look for.
std::string search_key(std::string_view query);

// The owner's sessions that match `key` (from search_key), latest activity first, at most
// `limit`: {"object": "list", "data": [summary + "match"], "has_more"}. Each "match" says where
// the first hit is ({"in": "title" | "user" | "assistant", "turn": index of the turn, for those
// two}) and shows it in its context as "before", "text" (the hit as written) and "after".
boost::json::object search_sessions(HistoryReader& history, const std::string& tenant,
                                    const std::string& owner, const std::string& key, size_t limit);

}  // namespace chatflow::server
