// rerank: orders the candidates hybrid_retrieval found by a reranker and keeps the best
// `top_n` as the context passages. `kind: lexical` scores term coverage, proximity and the
// BM25 and dense scores; `kind: llm` asks the model, per passage, how likely "yes" is to "is
// this passage relevant to the question?" (a pointwise relevance log-probability).
#include "framework/api/registry.h"
#include "framework/retrieval/hybrid.h"
#include "stages/gguf_model.h"
#include "stages/llm_reranker.h"
#include "stages/retrieval_index.h"

namespace chatflow {
namespace {

struct RerankConfig {
  std::string index;
  std::string kind = "lexical";
  std::string model;
  int64_t top_n = 4;
  retrieval::LexicalWeights defaults;
  double coverage = defaults.coverage;
  double proximity = defaults.proximity;
  double sparse = defaults.sparse;
  double dense = defaults.dense;
};

class RerankStage final : public RequestStage {
 public:
  RerankStage(RerankConfig config, std::shared_ptr<RetrievalIndexResource> index,
              std::shared_ptr<GgufModel> model)
      : config_(std::move(config)), index_(std::move(index)), model_(std::move(model)) {}

  Route process(Request& request, StageIo&) override {
    auto candidates = request.attachment<std::vector<retrieval::Candidate>>(kRetrievalCandidates);
    if (!candidates) {
      throw RequestFailure(500, "server_error",
                           "rerank found no candidates: place it after hybrid_retrieval");
    }
    std::string query = retrieval_query(request);
    std::unique_ptr<retrieval::Reranker> reranker;
    if (config_.kind == "llm") {
      reranker = make_llm_reranker(model_, request);
    } else {
      reranker = retrieval::make_lexical_reranker(
          index_->current(), {config_.coverage, config_.proximity, config_.sparse, config_.dense});
    }
    retrieval::rerank(*reranker, query, *candidates, static_cast<size_t>(config_.top_n));
    use_as_context(request, *candidates, &retrieval::Candidate::rerank);
    return Route::to(0);
  }

 private:
  RerankConfig config_;
  std::shared_ptr<RetrievalIndexResource> index_;
  std::shared_ptr<GgufModel> model_;
};

StageTypeInfo rerank_stage_type() {
  StageTypeBuilder<RerankConfig> type(
      "rerank", StageKind::request,
      "Orders retrieved candidates by a reranker (lexical features, or the model's relevance "
      "log-probability) and keeps the best top_n as context passages.");
  type.port("out", PortKind::request, "the request with its reranked passages");
  type.config()
      .key("index", &RerankConfig::index, "the retrieval_index resource")
      .required()
      .resource("retrieval_index");
  type.config().key("kind", &RerankConfig::kind, "lexical or llm").choices({"lexical", "llm"});
  type.config()
      .key("model", &RerankConfig::model, "kind llm: the gguf_model resource")
      .resource("gguf_model");
  type.config().key("top_n", &RerankConfig::top_n, "passages kept").range(1, 1000);
  type.config().key("coverage", &RerankConfig::coverage, "lexical: weight of term coverage");
  type.config().key("proximity", &RerankConfig::proximity, "lexical: weight of proximity");
  type.config().key("sparse", &RerankConfig::sparse, "lexical: weight of the BM25 score");
  type.config().key("dense", &RerankConfig::dense, "lexical: weight of the dense score");
  type.create([](const RerankConfig& config, StageContext& context) {
    std::shared_ptr<GgufModel> model;
    if (config.kind == "llm") {
      if (config.model.empty()) throw ConfigError("kind llm needs 'model' (a gguf_model resource)");
      model = context.resource<GgufModel>(config.model);
    }
    return std::make_unique<RerankStage>(
        config, context.resource<RetrievalIndexResource>(config.index), std::move(model));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(rerank_stage_type);

}  // namespace
}  // namespace chatflow
