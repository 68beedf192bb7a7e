// The rerank stage (kind lexical) over a small index built from documents written by the test:
// it reorders what hybrid_retrieval found by its features and keeps the best top_n as the
// context. The documents are made so that the features come out round: "annual" and "leave" each
// occur in three of the four, so they weigh the same, and each feature is worked out by hand with
// the other weights at 0. (kind llm is tested in retrieval_test.cpp's RetrievalStages.)
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string index_resource() {
  static const std::string resource = [] {
    std::string source = write_temp_file(
        "rerank-docs.jsonl",
        "{\"id\": \"near\", \"title\": \"Near\", \"text\": \"Annual leave is granted every "
        "spring.\"}\n"
        "{\"id\": \"far\", \"title\": \"Far\", \"text\": \"Annual reports are written by the "
        "finance team every quarter, then read by the board, and filed before anyone takes "
        "leave.\"}\n"
        "{\"id\": \"bonus\", \"title\": \"Bonus\", \"text\": \"The annual bonus is paid in "
        "March.\"}\n"
        "{\"id\": \"parental\", \"title\": \"Parental\", \"text\": \"Parental leave lasts "
        "sixteen weeks.\"}\n");
    std::string directory = temp_path("rerank-index");
    std::filesystem::remove_all(directory);
    return "  docs: {type: retrieval_index, path: \"" + directory + "\", source: [\"" + source +
           "\"]}\n";
  }();
  return resource;
}

std::unique_ptr<Pipeline> reranked(const std::string& rerank_config) {
  return build_yaml("version: 1\nresources:\n" + index_resource() +
                        "stages:\n"
                        "  - {name: retrieve, type: hybrid_retrieval, config: {index: docs}}\n"
                        "  - {name: rerank, type: rerank, config: {index: docs" +
                        rerank_config + "}}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

std::shared_ptr<Request> ask(Pipeline& pipeline, const std::string& question) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(question, sink);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  EXPECT_FALSE(request->error()) << request->error()->message;
  return request;
}

std::map<std::string, double> scores(const Request& request) {
  std::map<std::string, double> by_document;
  for (const auto& passage : request.context_passages)
    by_document[passage.document] = passage.score;
  return by_document;
}

TEST(Rerank, TopNPassagesAreKeptBestFirst) {
  auto pipeline = reranked(", top_n: 2");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, "annual leave");
  ASSERT_EQ(request->context_passages.size(), 2u);
  EXPECT_GE(request->context_passages[0].score, request->context_passages[1].score);
}

// The IDF-weighted share of the question's words a passage holds: both words 1, one of two 0.5.
TEST(Rerank, CoverageIsTheShareOfTheQuestionsWordsAPassageHolds) {
  auto pipeline = reranked(", top_n: 4, coverage: 1, proximity: 0, sparse: 0, dense: 0");
  ASSERT_TRUE(pipeline);
  auto found = scores(*ask(*pipeline, "annual leave"));
  ASSERT_EQ(found.size(), 4u);
  EXPECT_DOUBLE_EQ(found["near"], 1.0);
  EXPECT_DOUBLE_EQ(found["far"], 1.0);
  EXPECT_DOUBLE_EQ(found["bonus"], 0.5);
  EXPECT_DOUBLE_EQ(found["parental"], 0.5);
}

// Neighbouring words of the question within 8 words of each other in the passage: "near" has
// them side by side, "far" has both but twenty words apart.
TEST(Rerank, ProximityPrefersTheQuestionsWordsStandingTogether) {
  auto pipeline = reranked(", top_n: 4, coverage: 0, proximity: 1, sparse: 0, dense: 0");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, "annual leave");
  ASSERT_EQ(request->context_passages.size(), 4u);
  EXPECT_EQ(request->context_passages[0].document, "near");
  auto found = scores(*request);
  EXPECT_DOUBLE_EQ(found["near"], 1.0);
  EXPECT_DOUBLE_EQ(found["far"], 0.0);
}

TEST(Rerank, WithoutRetrievalBeforeItTheRequestIsA500SayingWhereItGoes) {
  auto pipeline = build_yaml("version: 1\nresources:\n" + index_resource() +
                                 "stages:\n  - {name: rerank, type: rerank, config: {index: "
                                 "docs}}\n  - {name: echo, type: echo}\n",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("annual leave", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 500);
  EXPECT_EQ(request->error()->message,
            "rerank found no candidates: place it after hybrid_retrieval");
}

TEST(Rerank, KindLlmWithoutAModelIsAConfigurationError) {
  Diagnostics diagnostics;
  auto spec = check_yaml("version: 1\nresources:\n" + index_resource() +
                             "stages:\n"
                             "  - {name: retrieve, type: hybrid_retrieval, config: {index: docs}}\n"
                             "  - {name: rerank, type: rerank, config: {index: docs, kind: llm}}\n"
                             "  - {name: echo, type: echo}\n",
                         builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  EXPECT_EQ(all_errors(diagnostics),
            "test.yaml:6:5: error: stage 'rerank' (rerank): kind llm needs 'model' (a gguf_model "
            "resource)\n");
}

TEST(Rerank, IndexMustNameARetrievalIndexAtItsPlace) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  vectors: {type: embedder}\nstages:\n"
      "  - {name: rerank, type: rerank, config: {index: vectors}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:5:50: error: stage 'rerank' (rerank): key 'index' needs a "
                         "resource of type retrieval_index, but 'vectors' is of type embedder",
                         0),
            0u)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
