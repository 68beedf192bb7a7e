// prompt_assembly: puts the request's context passages into the system prompt as numbered,
// fenced reference material marked untrusted (see framework/retrieval/prompt_assembly.h), and
// records them as the response's citations (`chatflow.citations`: [n] -> document).
#include "framework/retrieval/prompt_assembly.h"

#include "framework/api/registry.h"

namespace chatflow {
namespace {

struct PromptAssemblyConfig {
  std::string instructions =
      "Answer the user's question from the reference material below when it is relevant, and "
      "cite the passages you use as [1], [2]. If the material does not answer the question, say "
      "so.";
  int64_t max_passages = 8;
  int64_t max_passage_chars = 1500;
};

class PromptAssemblyStage final : public RequestStage {
 public:
  explicit PromptAssemblyStage(PromptAssemblyConfig config) : config_(std::move(config)) {}

  Route process(Request& request, StageIo&) override {
    if (request.context_passages.empty()) return Route::to(0);
    if (request.context_passages.size() > static_cast<size_t>(config_.max_passages))
      request.context_passages.resize(static_cast<size_t>(config_.max_passages));
    std::vector<retrieval::Reference> references;
    for (const auto& passage : request.context_passages)
      references.push_back({passage.document, passage.title, passage.text});
    std::string block = retrieval::reference_block(config_.instructions, references,
                                                   static_cast<size_t>(config_.max_passage_chars));
    if (request.kind == RequestKind::completion) {
      request.prompt = block + "\n" + request.prompt;
    } else if (!request.messages.empty() && request.messages.front().role == "system") {
      request.messages.front().content += "\n\n" + block;
    } else {
      request.messages.insert(request.messages.begin(), Message{"system", block});
    }
    request.citations = request.context_passages;
    return Route::to(0);
  }

 private:
  PromptAssemblyConfig config_;
};

StageTypeInfo prompt_assembly_stage_type() {
  StageTypeBuilder<PromptAssemblyConfig> type(
      "prompt_assembly", StageKind::request,
      "Puts the context passages into the system prompt as numbered reference material marked "
      "untrusted, and returns them as citations.");
  type.port("out", PortKind::request, "the request with its assembled prompt");
  type.config().key("instructions", &PromptAssemblyConfig::instructions,
                    "what the model is told before the reference material");
  type.config()
      .key("max_passages", &PromptAssemblyConfig::max_passages, "passages put in at most")
      .range(1, 1000);
  type.config()
      .key("max_passage_chars", &PromptAssemblyConfig::max_passage_chars, "a longer passage is cut")
      .range(16, 1000000);
  type.create([](const PromptAssemblyConfig& config, StageContext&) {
    return std::make_unique<PromptAssemblyStage>(config);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(prompt_assembly_stage_type);

}  // namespace
}  // namespace chatflow
