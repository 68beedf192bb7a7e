// The hybrid_retrieval stage over a small index built from documents written by the test: the
// passages it finds become the request's context (best first, at most top_k), each caller reads
// only what its labels allow, BM25 and dense search are fused by reciprocal rank or by weighted
// normalised scores (both worked out by hand here), and a rewritten question is what it searches.
// echo answers after it; the request shows what the model would have been given.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "stages/retrieval_index.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

const char* const kTravelText = "Travel expenses are refunded within 30 days.";

// The index, built once per test process from the documents below.
std::string index_resource() {
  static const std::string resource = [] {
    std::string source = write_temp_file(
        "hybrid-docs.jsonl",
        "{\"id\": \"leave\", \"title\": \"Leave\", \"text\": \"Every employee has 25 days of "
        "annual leave.\"}\n"
        "{\"id\": \"travel\", \"title\": \"Travel\", \"text\": \"" +
            std::string(kTravelText) +
            "\"}\n"
            "{\"id\": \"acme-parking\", \"title\": \"Parking\", \"text\": \"The parking garage "
            "opens at 7.\", \"acl\": [\"tenant:acme\"]}\n"
            "{\"id\": \"bob-desk\", \"title\": \"Desk\", \"text\": \"The desk by the window "
            "belongs to Bob.\", \"acl\": [\"user:bob\"]}\n");
    std::string directory = temp_path("hybrid-index");
    std::filesystem::remove_all(directory);
    return "  docs: {type: retrieval_index, path: \"" + directory + "\", source: [\"" + source +
           "\"]}\n";
  }();
  return resource;
}

std::unique_ptr<Pipeline> retrieval(const std::string& config = "") {
  return build_yaml("version: 1\nresources:\n" + index_resource() +
                        "stages:\n  - {name: retrieve, type: hybrid_retrieval, config: {index: "
                        "docs" +
                        config + "}}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

std::shared_ptr<Request> ask(Pipeline& pipeline, const std::string& question,
                             const std::function<void(Request&)>& prepare = {}) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(question, sink);
  if (prepare) prepare(*request);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  EXPECT_FALSE(request->error()) << request->error()->message;
  return request;
}

std::vector<std::string> documents(const Request& request) {
  std::vector<std::string> found;
  for (const auto& passage : request.context_passages)
    found.push_back(passage.document);
  return found;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

TEST(HybridRetrieval, ThePassagesFoundBecomeTheContextBestFirst) {
  auto pipeline = retrieval();
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, "how many days of annual leave?");
  ASSERT_FALSE(request->context_passages.empty());
  const ContextPassage& best = request->context_passages.front();
  EXPECT_EQ(best.document, "leave");
  EXPECT_EQ(best.title, "Leave");
  EXPECT_EQ(best.text, "Every employee has 25 days of annual leave.");
  for (size_t i = 1; i < request->context_passages.size(); ++i)
    EXPECT_GE(request->context_passages[i - 1].score, request->context_passages[i].score);
  EXPECT_EQ(request->annotation("retrieved"), std::to_string(request->context_passages.size()));
  EXPECT_TRUE(request->citations.empty()) << "citations are prompt_assembly's";
}

TEST(HybridRetrieval, TopKBoundsThePassagesKept) {
  auto pipeline = retrieval(", top_k: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, "how many days of annual leave?");
  EXPECT_EQ(documents(*request), (std::vector<std::string>{"leave"}));
  EXPECT_EQ(request->annotation("retrieved"), "1");
}

// A document labelled tenant:acme is found for acme's callers only, one labelled user:bob for
// Bob only (the caller's roles are labels too; see RetrievalStages in retrieval_test.cpp).
TEST(HybridRetrieval, TheCallersTenantAndUserAreReadingLabels) {
  auto pipeline = retrieval(", top_k: 10");
  ASSERT_TRUE(pipeline);
  auto as = [&](std::string tenant, std::string user) {
    return documents(
        *ask(*pipeline, "parking garage and the desk by the window", [&](Request& request) {
          request.identity.tenant = tenant;
          request.identity.user = user;
        }));
  };
  auto acme_bob = as("acme", "bob");
  EXPECT_TRUE(has(acme_bob, "acme-parking"));
  EXPECT_TRUE(has(acme_bob, "bob-desk"));
  auto acme_alice = as("acme", "alice");
  EXPECT_TRUE(has(acme_alice, "acme-parking"));
  EXPECT_FALSE(has(acme_alice, "bob-desk"));
  auto globex_bob = as("globex", "bob");
  EXPECT_FALSE(has(globex_bob, "acme-parking"));
  EXPECT_TRUE(has(globex_bob, "bob-desk"));
}

// Roles come from key files and identity providers that may let users name their groups: a role
// spelled like the tenant or user label of someone else reads nothing of theirs.
TEST(HybridRetrieval, ARoleSpelledLikeATenantOrUserLabelIsNoLabel) {
  auto pipeline = retrieval(", top_k: 10");
  ASSERT_TRUE(pipeline);
  auto found =
      documents(*ask(*pipeline, "parking garage and the desk by the window", [](Request& request) {
        request.identity.tenant = "globex";
        request.identity.user = "mallory";
        request.identity.roles = {"tenant:acme", "user:bob", "staff"};
      }));
  EXPECT_FALSE(has(found, "acme-parking"));
  EXPECT_FALSE(has(found, "bob-desk"));
  EXPECT_TRUE(has(found, "travel") || has(found, "leave")) << "the public documents stay";
}

// BM25 finds only what shares a word with the question; dense search always finds the nearest.
TEST(HybridRetrieval, SparseKAndDenseKChooseTheSides) {
  auto sparse_only = retrieval(", dense_k: 0");
  ASSERT_TRUE(sparse_only);
  EXPECT_TRUE(ask(*sparse_only, "zebra")->context_passages.empty());
  EXPECT_EQ(documents(*ask(*sparse_only, "refunded"))[0], "travel");
  auto dense_only = retrieval(", sparse_k: 0");
  ASSERT_TRUE(dense_only);
  EXPECT_FALSE(ask(*dense_only, "zebra")->context_passages.empty());
}

// A passage first on both sides scores 1/(rrf_k + 1) twice.
TEST(HybridRetrieval, ReciprocalRankFusionAddsOneOverKPlusRankPerSide) {
  auto pipeline = retrieval(", rrf_k: 10");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, kTravelText);
  ASSERT_FALSE(request->context_passages.empty());
  EXPECT_EQ(request->context_passages[0].document, "travel");
  EXPECT_DOUBLE_EQ(request->context_passages[0].score, 2.0 / 11.0);
}

// Each side's scores normalised to 0..1 (best 1), then weighted: first on both sides is the sum
// of the weights.
TEST(HybridRetrieval, WeightedFusionAddsTheNormalisedScoresByWeight) {
  auto pipeline = retrieval(", fusion: weighted, sparse_weight: 2, dense_weight: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, kTravelText);
  ASSERT_FALSE(request->context_passages.empty());
  EXPECT_EQ(request->context_passages[0].document, "travel");
  EXPECT_DOUBLE_EQ(request->context_passages[0].score, 3.0);
}

// query_rewrite leaves the standalone question as an attachment; the conversation keeps the
// user's words.
TEST(HybridRetrieval, ARewrittenQuestionIsWhatIsSearched) {
  auto pipeline = retrieval(", top_k: 1");
  ASSERT_TRUE(pipeline);
  auto request = ask(*pipeline, "and how many days of annual leave?", [](Request& request) {
    request.attach(kRetrievalQuery, std::make_shared<std::string>("travel expenses refunded"));
  });
  EXPECT_EQ(documents(*request), (std::vector<std::string>{"travel"}));
}

TEST(HybridRetrieval, ACompletionSearchesItsPrompt) {
  auto pipeline = retrieval(", top_k: 1");
  ASSERT_TRUE(pipeline);
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->kind = RequestKind::completion;
  request->prompt = "travel expenses refunded";
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(documents(*request), (std::vector<std::string>{"travel"}));
}

TEST(HybridRetrieval, NoSideAtAllIsAConfigurationError) {
  Diagnostics diagnostics;
  auto spec = check_yaml("version: 1\nresources:\n" + index_resource() +
                             "stages:\n"
                             "  - {name: retrieve, type: hybrid_retrieval, config: {index: docs, "
                             "sparse_k: 0, dense_k: 0}}\n  - {name: echo, type: echo}\n",
                         builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  EXPECT_EQ(all_errors(diagnostics),
            "test.yaml:5:5: error: stage 'retrieve' (hybrid_retrieval): sparse_k and dense_k are "
            "both 0: nothing would be retrieved\n");
}

TEST(HybridRetrieval, AnUnknownFusionIsRefusedWithTheChoices) {
  Diagnostics diagnostics;
  check_yaml("version: 1\nresources:\n" + index_resource() +
                 "stages:\n"
                 "  - {name: retrieve, type: hybrid_retrieval, config: {index: docs, fusion: "
                 "max}}\n  - {name: echo, type: echo}\n",
             builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:5:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("key 'fusion' must be one of rrf, weighted, got \"max\""),
            std::string::npos)
      << errors;
}

// An index naming another kind of resource is refused by the checks, at the key, naming both
// types (before anything is built).
TEST(HybridRetrieval, AnIndexThatIsNoRetrievalIndexIsRefused) {
  Diagnostics diagnostics;
  auto spec = check_yaml(
      "version: 1\nresources:\n  vectors: {type: embedder}\nstages:\n"
      "  - {name: retrieve, type: hybrid_retrieval, config: {index: vectors}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  EXPECT_FALSE(spec.has_value());
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:5:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("key 'index' needs a resource of type retrieval_index, but 'vectors' is "
                        "of type embedder"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
