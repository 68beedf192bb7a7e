#include "framework/server/kept_response_store.h"

#include <cstdio>

#include "framework/history/kept_responses.h"
#include "framework/server/http_response.h"

namespace chatflow::server {
namespace {

// owner_of's "TENANT\nOWNER" (or "", every caller of a pipeline without auth) as the history
// store's tenant and owner.
std::pair<std::string, std::string> tenant_and_owner(const std::string& owner) {
  size_t newline = owner.find('\n');
  if (newline == std::string::npos) return {"", owner};
  return {owner.substr(0, newline), owner.substr(newline + 1)};
}

[[noreturn]] void unavailable(const std::exception& error) {
  std::fprintf(stderr, "chatflow: responses: %s\n", error.what());
  throw RequestFailure(make_error(503, "server_error",
                                  "the history store that keeps responses could not be read; "
                                  "retry shortly",
                                  "history_unavailable"));
}

class HistoryResponseKeeper final : public responses::ResponseKeeper {
 public:
  HistoryResponseKeeper(std::shared_ptr<Pipeline> pipeline, KeptResponses& kept)
      : pipeline_(std::move(pipeline)), kept_(kept) {}

  // The answer has gone out already: a response the store could not keep is said in the log,
  // and a later GET or previous_response_id finds none.
  void put(const std::string& owner, const std::string& id, std::string response_json,
           std::vector<Message> conversation) override {
    auto [tenant, user] = tenant_and_owner(owner);
    try {
      kept_.keep_response(tenant, user, id,
                          {std::move(response_json), responses::conversation_json(conversation)});
    } catch (const std::exception& error) {
      std::fprintf(stderr, "chatflow: responses: response %s was not kept: %s\n", id.c_str(),
                   error.what());
    }
  }

  std::optional<std::string> response_json(const std::string& owner,
                                           const std::string& id) const override {
    auto kept = read(owner, id);
    if (!kept) return std::nullopt;
    return std::move(kept->response_json);
  }

  std::optional<std::vector<Message>> conversation(const std::string& owner,
                                                   const std::string& id) const override {
    auto kept = read(owner, id);
    if (!kept) return std::nullopt;
    auto conversation = responses::conversation_of_json(kept->conversation_json);
    if (!conversation) {
      throw RequestFailure(
          make_error(500, "server_error",
                     "the kept conversation of response '" + id + "' could not be read back",
                     "history_unreadable"));
    }
    return conversation;
  }

  bool reads_wait() const override { return true; }

  bool erase(const std::string& owner, const std::string& id) override {
    auto [tenant, user] = tenant_and_owner(owner);
    try {
      return kept_.forget_response(tenant, user, id);
    } catch (const std::exception& error) {
      unavailable(error);
    }
  }

 private:
  std::optional<KeptResponse> read(const std::string& owner, const std::string& id) const {
    auto [tenant, user] = tenant_and_owner(owner);
    try {
      return kept_.kept_response(tenant, user, id);
    } catch (const std::exception& error) {
      unavailable(error);
    }
  }

  std::shared_ptr<Pipeline> pipeline_;  // keeps the store alive as long as this
  KeptResponses& kept_;
};

}  // namespace

std::shared_ptr<responses::ResponseKeeper> response_keeper(const ServedPipeline& served,
                                                           responses::ResponseStore& memory) {
  if (auto* kept = dynamic_cast<KeptResponses*>(served.history))
    return std::make_shared<HistoryResponseKeeper>(served.pipeline, *kept);
  // The server's own store outlives every request: shared without being owned.
  return std::shared_ptr<responses::ResponseKeeper>(std::shared_ptr<void>(), &memory);
}

}  // namespace chatflow::server
