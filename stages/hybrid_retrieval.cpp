// hybrid_retrieval: finds the passages for the request's question: BM25 and dense search side
// by side, each restricted to what the caller may read (labels: its roles, "tenant:<t>" and
// "user:<u>"), fused by reciprocal rank (or weighted scores). The best `top_k` become the
// request's context passages, with their scores for a rerank stage after it.
#include "framework/api/registry.h"
#include "framework/retrieval/hybrid.h"
#include "stages/retrieval_index.h"

namespace chatflow {
namespace {

struct HybridRetrievalConfig {
  std::string index;
  int64_t top_k = 20;
  int64_t sparse_k = 50;
  int64_t dense_k = 50;
  std::string fusion = "rrf";
  double rrf_k = 60;
  double sparse_weight = 0.5;
  double dense_weight = 0.5;
};

class HybridRetrievalStage final : public RequestStage {
 public:
  HybridRetrievalStage(std::shared_ptr<RetrievalIndexResource> index,
                       retrieval::HybridOptions options)
      : index_(std::move(index)), options_(options) {}

  Route process(Request& request, StageIo&) override {
    std::string query = retrieval_query(request);
    auto index = index_->current();
    auto candidates = std::make_shared<std::vector<retrieval::Candidate>>(
        retrieval::hybrid_search(*index, query, options_, reader_of(request.identity)));
    use_as_context(request, *candidates, &retrieval::Candidate::fused);
    request.attach(kRetrievalCandidates, candidates);
    request.annotate("retrieved", std::to_string(candidates->size()));
    return Route::to(0);
  }

 private:
  std::shared_ptr<RetrievalIndexResource> index_;
  retrieval::HybridOptions options_;
};

StageTypeInfo hybrid_retrieval_stage_type() {
  StageTypeBuilder<HybridRetrievalConfig> type(
      "hybrid_retrieval", StageKind::request,
      "Finds passages for the question: BM25 and dense search at once, filtered by the caller's "
      "ACL labels, fused by reciprocal rank or weighted scores.");
  type.port("out", PortKind::request, "the request with its context passages");
  type.config()
      .key("index", &HybridRetrievalConfig::index, "a retrieval_index resource")
      .required()
      .resource("retrieval_index");
  type.config().key("top_k", &HybridRetrievalConfig::top_k, "passages kept").range(1, 10000);
  type.config()
      .key("sparse_k", &HybridRetrievalConfig::sparse_k, "BM25 candidates (0: none)")
      .range(0, 10000);
  type.config()
      .key("dense_k", &HybridRetrievalConfig::dense_k, "dense candidates (0: none)")
      .range(0, 10000);
  type.config()
      .key("fusion", &HybridRetrievalConfig::fusion, "rrf (reciprocal rank) or weighted")
      .choices({"rrf", "weighted"});
  type.config().key("rrf_k", &HybridRetrievalConfig::rrf_k, "rrf: 1 / (k + rank)").range(0, 1e6);
  type.config()
      .key("sparse_weight", &HybridRetrievalConfig::sparse_weight, "weighted: BM25's share")
      .range(0, 1e6);
  type.config()
      .key("dense_weight", &HybridRetrievalConfig::dense_weight, "weighted: the dense share")
      .range(0, 1e6);
  type.create([](const HybridRetrievalConfig& config, StageContext& context) {
    retrieval::HybridOptions options;
    options.top_k = static_cast<size_t>(config.top_k);
    options.sparse_k = static_cast<size_t>(config.sparse_k);
    options.dense_k = static_cast<size_t>(config.dense_k);
    options.fusion =
        config.fusion == "rrf" ? retrieval::Fusion::reciprocal_rank : retrieval::Fusion::weighted;
    options.rrf_k = config.rrf_k;
    options.sparse_weight = config.sparse_weight;
    options.dense_weight = config.dense_weight;
    if (options.sparse_k == 0 && options.dense_k == 0)
      throw ConfigError("sparse_k and dense_k are both 0: nothing would be retrieved");
    return std::make_unique<HybridRetrievalStage>(
        context.resource<RetrievalIndexResource>(config.index), options);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(hybrid_retrieval_stage_type);

}  // namespace
}  // namespace chatflow
