// Retrieval quality on a judged collection: nDCG@k (linear gain, as trec_eval), recall@k and
// reciprocal rank, over a ranking of document ids.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/retrieval/documents.h"

namespace chatflow::retrieval {

using Judgments = std::map<std::string, double>;  // document id -> gain (> 0: relevant)

double ndcg_at(const std::vector<std::string>& ranking, const Judgments& judgments, size_t k);
double recall_at(const std::vector<std::string>& ranking, const Judgments& judgments, size_t k);
// 1 / the rank of the first relevant document within the first k; 0 when there is none.
double reciprocal_rank(const std::vector<std::string>& ranking, const Judgments& judgments,
                       size_t k);

// Average precision over the first k (precision at each relevant document found, divided by all
// relevant documents).
double average_precision(const std::vector<std::string>& ranking, const Judgments& judgments,
                         size_t k);

struct Query {
  std::string id;
  std::string text;
};

struct Collection {
  std::vector<SourceDocument> corpus;
  std::vector<Query> queries;                  // only those with judgments
  std::map<std::string, Judgments> judgments;  // by query id
  std::string layout;                          // "SMART" or "BEIR"
};

// A directory in SMART layout (`*.all.*` or `*.all` documents, `*.qry` queries, a `*qrel*`
// file of "query document relevance" lines) or BEIR layout (corpus.jsonl, queries.jsonl,
// qrels/test.tsv). SMART quirk (Cranfield): the n-th query is judged as query n, and relevance
// 1 is the best of 1..4 (gain 5 - r); -1 and 0 are not relevant. BEIR scores are gains.
Collection load_collection(const std::string& directory);

// The value at `fraction` (0.5: the median) of `values` by nearest rank; 0 when empty. For the
// latency lines of eval-retrieval and bench-retrieval.
double percentile(std::vector<double> values, double fraction);

}  // namespace chatflow::retrieval
