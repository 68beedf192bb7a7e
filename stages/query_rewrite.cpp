// query_rewrite: a follow-up ("and what about the second one?") means little to a search
// index. When the conversation has earlier turns, the model rewrites the newest question into a
// standalone one, used for retrieval only; the conversation the model answers is unchanged.
#include "stages/query_rewrite.h"

#include "framework/api/registry.h"
#include "stages/gguf_model.h"
#include "stages/retrieval_index.h"

namespace chatflow {

std::vector<Message> rewrite_messages(const std::vector<Message>& conversation,
                                      const std::string& instructions, size_t max_turn_chars) {
  std::string transcript;
  std::string question;
  for (size_t i = 0; i < conversation.size(); ++i) {
    const Message& message = conversation[i];
    if (message.role == "system") continue;
    bool newest = i + 1 == conversation.size() && message.role == "user";
    if (newest) {
      question = message.content;
      continue;
    }
    transcript += (message.role == "user" ? "User: " : "Assistant: ") +
                  message.content.substr(0, max_turn_chars) + "\n";
  }
  return {{"system", instructions},
          {"user", "Conversation:\n" + transcript + "\nNewest question: " + question +
                       "\n\nStandalone question:"}};
}

namespace {

struct QueryRewriteConfig {
  std::string model;
  int64_t max_tokens = 48;
  std::string instructions =
      "Rewrite the newest question so that it can be understood without the conversation: "
      "replace pronouns and references with what they stand for. Reply with the question only.";
};

constexpr size_t kTurnChars = 600;

class QueryRewriteStage final : public RequestStage {
 public:
  QueryRewriteStage(QueryRewriteConfig config, std::shared_ptr<GgufModel> model)
      : config_(std::move(config)), model_(std::move(model)) {}

  Route process(Request& request, StageIo&) override {
    if (request.kind != RequestKind::chat) return Route::to(0);
    size_t turns = 0;
    for (const auto& message : request.messages)
      turns += message.role == "user" || message.role == "assistant";
    if (turns < 2 || request.messages.back().role != "user") return Route::to(0);
    Request probe;
    probe.kind = RequestKind::chat;
    probe.messages = rewrite_messages(request.messages, config_.instructions, kTurnChars);
    const Request& asked = request;
    std::string rewritten =
        model_->generate_text(model_->encode_prompt(probe, true), config_.max_tokens,
                              request.identity.tenant, [&asked] { return asked.cancelled(); });
    rewritten = rewritten.substr(0, rewritten.find('\n'));
    size_t begin = rewritten.find_first_not_of(" \t");
    size_t end = rewritten.find_last_not_of(" \t");
    rewritten = begin == std::string::npos ? "" : rewritten.substr(begin, end - begin + 1);
    // The model's question when it made one; the user's own otherwise.
    if (rewritten.empty()) return Route::to(0);
    request.attach(kRetrievalQuery, std::make_shared<std::string>(std::move(rewritten)));
    request.annotate("query_rewrite", "rewritten");
    return Route::to(0);
  }

 private:
  QueryRewriteConfig config_;
  std::shared_ptr<GgufModel> model_;
};

StageTypeInfo query_rewrite_stage_type() {
  StageTypeBuilder<QueryRewriteConfig> type(
      "query_rewrite", StageKind::request,
      "Rewrites a follow-up question into a standalone one with the model, for retrieval only "
      "(place it before hybrid_retrieval, after history_trim).");
  type.port("out", PortKind::request, "the request, with the question retrieval should use");
  type.config()
      .key("model", &QueryRewriteConfig::model, "the gguf_model resource")
      .required()
      .resource("gguf_model");
  type.config()
      .key("max_tokens", &QueryRewriteConfig::max_tokens, "the rewritten question's length at most")
      .range(1, 1024);
  type.config().key("instructions", &QueryRewriteConfig::instructions,
                    "what the model is told (the system prompt of the rewrite)");
  type.create([](const QueryRewriteConfig& config, StageContext& context) {
    return std::make_unique<QueryRewriteStage>(config, context.resource<GgufModel>(config.model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(query_rewrite_stage_type);

}  // namespace
}  // namespace chatflow
