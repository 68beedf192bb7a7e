#include "framework/server/responses_routes.h"

#include <boost/json.hpp>

#include "framework/responses/response_store.h"
#include "framework/server/kept_response_store.h"
#include "framework/text/utf8.h"

namespace chatflow::server {
namespace {

// The caller's key to the store, and the response the path names.
struct Lookup {
  std::optional<std::string> owner;
  std::string id;
};

Lookup lookup_of(const RouteCall& call) {
  if (!call.query.empty()) {
    std::string name = call.query.substr(0, call.query.find('='));
    throw RequestFailure(make_error(400, "invalid_request_error",
                                    "the query parameter '" + text::repair(name) +
                                        "' is not supported by this server; remove it",
                                    "unsupported_parameter", text::repair(name)));
  }
  return {responses::owner_of(call.served->authenticator != nullptr, call.caller), call.parameter};
}

[[noreturn]] void not_found(const std::string& id) {
  throw RequestFailure(make_error(404, "invalid_request_error",
                                  "Response with id '" + text::repair(id) + "' not found.",
                                  "response_not_found", "response_id"));
}

}  // namespace

Response get_response(const RouteCall& call) {
  Lookup lookup = lookup_of(call);
  std::optional<std::string> found;
  if (lookup.owner && call.responses)
    found = response_keeper(*call.served, *call.responses)->response_json(*lookup.owner, lookup.id);
  if (!found) not_found(lookup.id);
  return Response(200, std::move(*found));
}

Response delete_response(const RouteCall& call) {
  Lookup lookup = lookup_of(call);
  if (!lookup.owner || !call.responses ||
      !response_keeper(*call.served, *call.responses)->erase(*lookup.owner, lookup.id))
    not_found(lookup.id);
  return Response(200, boost::json::serialize(boost::json::object{
                           {"id", lookup.id}, {"object", "response"}, {"deleted", true}}));
}

}  // namespace chatflow::server
