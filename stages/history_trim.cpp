// history_trim: the conversation the model sees. With a `store` and a request's session_id
// (body field or x-session-id header), the session's completed turns (of its newest
// max_turns_loaded) come first, then the new messages; the whole is trimmed to `budget_tokens`,
// counted with the model's own tokenizer and chat template (trim.h), and never to more than the
// model's context leaves beside the answer: max_tokens, or when the request does not set it the
// model's max_tokens_default or a quarter of the context, whichever is less. So a long session
// keeps working on a small model: its oldest turns go. Each answered turn is recorded:
// committed before the last event of its answer leaves, so a turn the client saw complete
// survives a crash; a cancelled or filtered answer is recorded as such and never given back as
// context.
#include <algorithm>

#include <boost/json.hpp>

#include "framework/api/response_recorder.h"
#include "framework/history/trim.h"
#include "framework/openai/retract.h"
#include "framework/openai/session_extensions.h"
#include "framework/text/utf8.h"
#include "stages/gguf_model.h"
#include "stages/history_store.h"

namespace chatflow {
namespace {

// Without max_tokens, the answer may take up to the context (or the model's max_tokens_default):
// trimming keeps at most this share of it (1/4) free for the answer.
constexpr int64_t kUnsetAnswerShare = 4;

struct HistoryTrimConfig {
  std::string store;
  std::string model;
  int64_t budget_tokens = 4000;
};

class HistoryTrimStage final : public RequestStage {
 public:
  HistoryTrimStage(std::shared_ptr<HistoryStoreResource> store, std::shared_ptr<GgufModel> model,
                   int64_t budget)
      : store_(std::move(store)), model_(std::move(model)), budget_(budget) {}

  Route process(Request& request, StageIo&) override {
    if (request.kind != RequestKind::chat) return Route::to(0);
    bool session = store_ && !request.session_id.empty();
    std::vector<Message> messages;
    for (const auto& message : request.messages) {
      if (message.role == "system") messages.push_back(message);
    }
    SessionContext context;
    if (session) context = session_context(request);
    if (session && regenerates(request, context))
      request.attach(std::string(kRegenerationAttachment), std::make_shared<bool>(true));
    if (session) {
      for (const auto& turn : context.turns) {
        if (turn.status != history::TurnStatus::completed) continue;
        messages.push_back({"user", turn.user});
        messages.push_back({"assistant", turn.assistant});
      }
    }
    for (const auto& message : request.messages) {
      if (message.role != "system") messages.push_back(message);
    }
    // Counted as the model will see it: the offered tools and the output format are rendered
    // into the prompt too.
    Request probe;
    probe.kind = RequestKind::chat;
    probe.generation = request.generation;
    auto count = [&](const std::vector<Message>& candidate) {
      probe.messages = candidate;
      return static_cast<int64_t>(model_->encode_prompt(probe, true).size());
    };
    Budget budget = budget_for(request.generation);
    history::TrimOutcome trimmed =
        history::trim_to_budget(messages, budget.tokens, count, budget.reason);
    request.messages = std::move(trimmed.messages);
    if (trimmed.turns_dropped > 0) {
      request.annotate("history", "trimmed " + std::to_string(trimmed.turns_dropped) + " turns");
    }
    if (session) record_turn(request, context.parent);
    return Route::to(0);
  }

 private:
  struct Budget {
    int64_t tokens = 0;
    std::string reason;  // when the context, not budget_tokens, set it
  };

  // budget_tokens, or what the model's context leaves beside the answer when that is less.
  Budget budget_for(const GenerationParams& generation) const {
    int64_t context = model_->context_length();
    auto [answer, why] = answer_share(generation, context);
    int64_t room = std::max<int64_t>(context - answer, 0);
    if (room >= budget_) return {budget_, {}};
    return {room, "the model's context of " + std::to_string(context) + " tokens less " +
                      std::to_string(answer) + why + " leaves " + std::to_string(room)};
  }

  // What the trim keeps free for the answer, and why: max_tokens when the request sets it, else
  // the model's max_tokens_default when set and less than a quarter of the context, else the
  // quarter.
  std::pair<int64_t, std::string> answer_share(const GenerationParams& generation,
                                               int64_t context) const {
    if (generation.max_tokens > 0) return {generation.max_tokens, " for the answer (max_tokens)"};
    int64_t quarter = context / kUnsetAnswerShare;
    int64_t configured = model_->max_tokens_default();
    if (configured > 0 && configured < quarter) {
      return {configured,
              " kept for the answer (the model's max_tokens_default, as max_tokens "
              "is not set)"};
    }
    return {quarter, " kept for the answer (a quarter, as max_tokens is not set)"};
  }

  // The turns the request continues: those to its parent_turn (the request's
  // kParentTurnAttachment, from the body's chatflow extension), else the path the session shows.
  SessionContext session_context(const Request& request) const {
    auto parent = request.attachment<int64_t>(std::string(openai::kParentTurnAttachment));
    auto context = store_->context(session_key(request), parent ? *parent : -1);
    if (context) return std::move(*context);
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "'parent_turn' names no turn of session '" +
                                          text::repair(request.session_id) +
                                          "': " + std::to_string(*parent),
                                      "invalid_value", "parent_turn"});
  }

  // Whether the request names its parent turn and asks a question already answered there.
  static bool regenerates(const Request& request, const SessionContext& context) {
    if (!request.attachment<int64_t>(std::string(openai::kParentTurnAttachment))) return false;
    std::string question = request.last_user_message();
    return std::find(context.answered_here.begin(), context.answered_here.end(), question) !=
           context.answered_here.end();
  }

  static history::SessionKey session_key(const Request& request) {
    return {request.identity.tenant, request.identity.owner(), request.session_id};
  }

  void record_turn(Request& request, int64_t parent) {
    auto store = store_;
    history::SessionKey key = session_key(request);
    std::string user = request.last_user_message();
    auto recorded = std::make_shared<bool>(false);
    auto turn_of = [user](const RecordedAnswer& answer, history::TurnStatus status) {
      history::Turn turn;
      turn.user = user;
      turn.assistant = answer.text();
      turn.status = status;
      turn.prompt_tokens = answer.usage.prompt_tokens;
      turn.completion_tokens = answer.usage.completion_tokens;
      return turn;
    };
    record_answer(
        request,
        [store, key, turn_of, recorded, parent](const Request& done, const RecordedAnswer& answer) {
          bool filtered = answer.finish == FinishReason::content_filter;
          *recorded = true;
          history::Turn turn = turn_of(
              answer, filtered ? history::TurnStatus::filtered : history::TurnStatus::completed);
          // Text output moderation withdrew after the client saw it is not kept (a reopened
          // session would show it again): the turn holds the notice that replaced it.
          if (filtered && done.annotation(openai::kRetractAnnotation) && !answer.chunks.empty())
            turn.assistant = answer.chunks.back().text;
          bool saved = store->append_turn(key, std::move(turn), parent, /*durable=*/true);
          // The answer was promised to survive a crash: a client must not see it end well
          // when it was not kept.
          if (!saved) {
            throw RequestFailure(RequestError{500,
                                              "server_error",
                                              "the answer could not be saved to the session's "
                                              "history; the turn was not kept",
                                              "history_not_saved",
                                              {}});
          }
        },
        [store, key, turn_of, recorded, parent](const Request& done, const RecordedAnswer& answer) {
          if (*recorded) return;
          history::TurnStatus status =
              done.cancelled() ? history::TurnStatus::cancelled : history::TurnStatus::failed;
          store->append_turn(key, turn_of(answer, status), parent, /*durable=*/false);
        });
  }

  std::shared_ptr<HistoryStoreResource> store_;
  std::shared_ptr<GgufModel> model_;
  int64_t budget_;
};

StageTypeInfo history_trim_stage_type() {
  StageTypeBuilder<HistoryTrimConfig> type(
      "history_trim", StageKind::request,
      "Builds the conversation under a token budget (system first, newest message last, whole "
      "turns newest first); with a store, keeps and restores sessions by session_id.");
  type.port("out", PortKind::request, "the request with its trimmed conversation");
  type.config()
      .key("store", &HistoryTrimConfig::store, "a history_store resource, for sessions")
      .resource("history_store");
  type.config()
      .key("model", &HistoryTrimConfig::model, "the gguf_model whose tokenizer counts")
      .required()
      .resource("gguf_model");
  type.config()
      .key("budget_tokens", &HistoryTrimConfig::budget_tokens,
           "prompt tokens at most (and never more than the model's context leaves beside the "
           "answer)")
      .range(16, 10'000'000);
  type.create([](const HistoryTrimConfig& config, StageContext& context) {
    std::shared_ptr<HistoryStoreResource> store;
    if (!config.store.empty()) store = context.resource<HistoryStoreResource>(config.store);
    return std::make_unique<HistoryTrimStage>(
        std::move(store), context.resource<GgufModel>(config.model), config.budget_tokens);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(history_trim_stage_type);

}  // namespace
}  // namespace chatflow
