// What the server asks of a history store to keep the responses of OpenAI's Responses API
// (`store`, `previous_response_id`, GET and DELETE /v1/responses/{id}) where sessions are kept:
// in the file or database every replica of a fleet shares, and through restarts. Responses are
// owned as sessions are, by tenant and owner (Identity::owner()): another owner's id is none.
// The history_store resource implements it; the server finds it by dynamic_cast, as it finds
// HistoryReader. Without a history store the server keeps them in its memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace chatflow {

struct KeptResponse {
  std::string response_json;      // the response object as it was answered
  std::string conversation_json;  // the conversation it ended, as framework/responses writes it
};

class KeptResponses {
 public:
  virtual ~KeptResponses() = default;
  // Keeps (or replaces) the owner's response `id`. Returns once committed; throws
  // std::runtime_error when the store could not write.
  virtual void keep_response(const std::string& tenant, const std::string& owner,
                             const std::string& id, const KeptResponse& response) = 0;
  // The owner's response `id`; nullopt when the owner kept none of that id (or it expired with
  // the store's ttl_days). Throws std::runtime_error when the store could not be read.
  virtual std::optional<KeptResponse> kept_response(const std::string& tenant,
                                                    const std::string& owner,
                                                    const std::string& id) = 0;
  // Forgets it for good; false when the owner kept none of that id. Throws as keep_response.
  virtual bool forget_response(const std::string& tenant, const std::string& owner,
                               const std::string& id) = 0;
};

}  // namespace chatflow
