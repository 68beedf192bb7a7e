// The retrieval_index resource with `uploads:`: a document a user uploads is chunked into the
// index under that owner's label, retrieved by hybrid_retrieval for that owner and nobody else,
// listed and removed per owner, kept over a restart; each limit and bad input answers its status.
#include "stages/retrieval_index.h"

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "framework/retrieval/document_uploads.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

const retrieval::DocumentOwner kAlice{"acme", "user:alice"};
const retrieval::DocumentOwner kBob{"acme", "user:bob"};

std::string uploads_yaml(const std::string& directory, const std::string& uploads) {
  std::string shared = write_temp_file(
      "uploads-shared.jsonl",
      "{\"id\": \"handbook\", \"title\": \"Handbook\", \"text\": \"Every employee has 25 days "
      "of annual leave.\"}\n");
  return "version: 1\nresources:\n  docs: {type: retrieval_index, path: \"" + directory +
         "\", source: [\"" + shared + "\"], chunk_tokens: 8, overlap: 2, uploads: " + uploads +
         "}\nstages:\n  - {name: retrieve, type: hybrid_retrieval, config: {index: docs, "
         "top_k: 10}}\n  - {name: echo, type: echo}\n";
}

struct Uploads {
  std::unique_ptr<Pipeline> pipeline;
  retrieval::OwnedDocuments* documents = nullptr;
};

Uploads open_uploads(const std::string& directory, const std::string& uploads = "{}") {
  Uploads opened;
  opened.pipeline = build_yaml(uploads_yaml(directory, uploads), builtin_registry());
  if (!opened.pipeline) return opened;
  auto resource =
      std::dynamic_pointer_cast<RetrievalIndexResource>(opened.pipeline->resource("docs"));
  if (resource) opened.documents = resource->owned_documents();
  return opened;
}

std::vector<std::string> retrieved_for(Pipeline& pipeline, const retrieval::DocumentOwner& owner,
                                       const std::string& question,
                                       const std::vector<std::string>& roles = {}) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request(question, sink);
  request->identity.tenant = owner.tenant;
  request->identity.user = owner.owner.substr(owner.owner.find(':') + 1);
  request->identity.roles = roles;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  std::vector<std::string> documents;
  for (const auto& passage : request->context_passages)
    documents.push_back(passage.document + "#" + std::to_string(passage.chunk));
  return documents;
}

bool mentions(const std::vector<std::string>& found, const std::string& document) {
  for (const auto& entry : found) {
    if (entry.rfind(document + "#", 0) == 0) return true;
  }
  return false;
}

// The status and code of the RequestFailure `upload` throws.
std::string refusal(const std::function<void()>& upload) {
  try {
    upload();
  } catch (const RequestFailure& failure) {
    return std::to_string(failure.error().status) + " " + failure.error().code;
  }
  return "accepted";
}

TEST(RetrievalIndexUploads, AnUploadIsRetrievedForItsOwnerAndNobodyElse) {
  auto uploads = open_uploads(fresh_path("uploads-owner"));
  ASSERT_TRUE(uploads.documents);
  auto document = uploads.documents->upload(
      kAlice, "notes/zephyr.md", "",
      "# Zephyr\nThe zephyr project codename ships in October with the quartz release.");
  EXPECT_EQ(document.name, "zephyr.md");
  EXPECT_EQ(document.content_type, "text/markdown");
  EXPECT_EQ(document.chunks, 2);  // 13 words in chunks of 8 sharing 2
  EXPECT_EQ(document.id.rfind("doc-", 0), 0u);

  const std::string question = "when does the zephyr project ship with quartz?";
  EXPECT_TRUE(mentions(retrieved_for(*uploads.pipeline, kAlice, question), document.id));
  EXPECT_FALSE(mentions(retrieved_for(*uploads.pipeline, kBob, question), document.id));
  EXPECT_FALSE(
      mentions(retrieved_for(*uploads.pipeline, {"globex", "user:alice"}, question), document.id));
  // The shared corpus is still there for everyone.
  EXPECT_TRUE(mentions(retrieved_for(*uploads.pipeline, kBob, "days of annual leave"), "handbook"));
}

// Roles come from key files and identity providers, some of which let users name their groups:
// a role spelled like another user's owner label must not read that user's uploads.
TEST(RetrievalIndexUploads, ARoleNamedLikeAnOwnerLabelReadsNoUploads) {
  auto uploads = open_uploads(fresh_path("uploads-role-label"));
  ASSERT_TRUE(uploads.documents);
  auto document = uploads.documents->upload(
      kBob, "plans.md", "", "# Plans\nThe zephyr project codename ships in October with quartz.");
  const std::string question = "when does the zephyr project ship with quartz?";
  ASSERT_TRUE(mentions(retrieved_for(*uploads.pipeline, kBob, question), document.id));
  const retrieval::DocumentOwner mallory{"acme", "user:mallory"};
  EXPECT_FALSE(mentions(
      retrieved_for(*uploads.pipeline, mallory, question, {"owner:acme/user:bob"}), document.id));
  // The shared corpus is still there for that caller.
  EXPECT_TRUE(mentions(
      retrieved_for(*uploads.pipeline, mallory, "days of annual leave", {"owner:acme/user:bob"}),
      "handbook"));
}

TEST(RetrievalIndexUploads, AnOwnerListsReadsAndRemovesOnlyTheirOwn) {
  auto uploads = open_uploads(fresh_path("uploads-list"));
  ASSERT_TRUE(uploads.documents);
  auto first = uploads.documents->upload(kAlice, "a.txt", "text/plain", "alpha one");
  auto second = uploads.documents->upload(kAlice, "b.txt", "text/plain", "beta two");
  auto bobs = uploads.documents->upload(kBob, "c.txt", "text/plain", "gamma three");
  auto listed = uploads.documents->documents_of(kAlice);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].id, second.id);  // newest first
  EXPECT_EQ(listed[1].id, first.id);
  EXPECT_FALSE(uploads.documents->document(kAlice, bobs.id, nullptr, nullptr));
  EXPECT_FALSE(uploads.documents->remove(kAlice, bobs.id));
  EXPECT_EQ(uploads.documents->documents_of(kBob).size(), 1u);

  EXPECT_TRUE(uploads.documents->remove(kAlice, first.id));
  EXPECT_FALSE(mentions(retrieved_for(*uploads.pipeline, kAlice, "alpha"), first.id));
  EXPECT_TRUE(mentions(retrieved_for(*uploads.pipeline, kAlice, "beta"), second.id));
  EXPECT_EQ(uploads.documents->documents_of(kAlice).size(), 1u);
}

TEST(RetrievalIndexUploads, DocumentsAndTheirChunksOutliveARestart) {
  std::string directory = fresh_path("uploads-restart");
  std::string id;
  {
    auto uploads = open_uploads(directory);
    ASSERT_TRUE(uploads.documents);
    id = uploads.documents->upload(kAlice, "kept.md", "text/markdown", "the obsidian ledger").id;
  }
  auto reopened = open_uploads(directory);
  ASSERT_TRUE(reopened.documents);
  auto listed = reopened.documents->documents_of(kAlice);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, id);
  EXPECT_EQ(listed[0].name, "kept.md");
  EXPECT_TRUE(mentions(retrieved_for(*reopened.pipeline, kAlice, "obsidian ledger"), id));
}

// Embeds like the n-gram embedder, but its first call waits until the test lets it go.
class HeldEmbedder final : public embedding::Embedder {
 public:
  HeldEmbedder() : inner_(embedding::make_ngram_embedder(64, 3)) {}
  size_t dimensions() const override { return inner_->dimensions(); }
  std::vector<float> embed(std::string_view text) const override {
    std::unique_lock lock(mutex_);
    if (!entered_) {
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }
    return inner_->embed(text);
  }
  std::string describe() const override { return inner_->describe(); }
  bool wait_entered() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [this] { return entered_; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::unique_ptr<embedding::Embedder> inner_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  mutable bool entered_ = false;
  bool released_ = false;
};

// An upload's chunks are embedded before the uploads are locked: while one large upload embeds,
// other owners list, read and upload their documents. Its vectors are then the index's own: the
// document is found by dense search alone.
TEST(RetrievalIndexUploads, OthersUseTheirDocumentsWhileAnUploadEmbeds) {
  std::string directory = fresh_path("uploads-embedding-unlocked");
  auto embedder = std::make_shared<HeldEmbedder>();
  retrieval::ChunkingOptions chunking{8, 2};
  retrieval::DocumentUploads uploads(directory, embedder, chunking, {}, nullptr);
  auto held = std::async(std::launch::async, [&] {
    return uploads.upload(kAlice, "zephyr.md", "",
                          "# Zephyr\nThe zephyr project codename ships in October with quartz.");
  });
  ASSERT_TRUE(embedder->wait_entered());
  auto others = std::async(std::launch::async, [&] {
    auto bobs = uploads.upload(kBob, "b.txt", "text/plain", "gamma three");
    return uploads.documents_of(kBob).size() == 1 && bobs.chunks == 1;
  });
  bool others_went_on = others.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  embedder->release();
  EXPECT_TRUE(others_went_on) << "Bob's upload and list waited for Alice's embedding";
  EXPECT_TRUE(others.get());
  auto alices = held.get();
  EXPECT_EQ(alices.chunks, 2);

  retrieval::RetrievalIndex index(directory, embedder, false);
  retrieval::Reader alice;
  alice.labels = {retrieval::owner_label(kAlice)};
  auto nearest = index.dense(index.embed("zephyr project codename ships in October"), 1, alice);
  ASSERT_EQ(nearest.size(), 1u);
  EXPECT_EQ(index.passage(nearest[0].id).document, alices.id);
}

// A reload builds the new pipeline while the old one still serves: both keep uploads in the same
// directory, and neither drops what the other added.
TEST(RetrievalIndexUploads, TwoPipelinesOnOneDirectoryKeepEachOthersUploads) {
  std::string directory = fresh_path("uploads-shared-directory");
  auto old_pipeline = open_uploads(directory);
  auto new_pipeline = open_uploads(directory);
  ASSERT_TRUE(old_pipeline.documents && new_pipeline.documents);
  auto first = old_pipeline.documents->upload(kAlice, "first.txt", "", "the amber key");
  auto second = new_pipeline.documents->upload(kAlice, "second.txt", "", "the jade key");
  auto third = old_pipeline.documents->upload(kAlice, "third.txt", "", "the onyx key");
  for (auto* documents : {old_pipeline.documents, new_pipeline.documents}) {
    std::vector<std::string> ids;
    for (const auto& document : documents->documents_of(kAlice))
      ids.push_back(document.id);
    EXPECT_EQ(ids, (std::vector<std::string>{third.id, second.id, first.id}));
  }
  EXPECT_TRUE(new_pipeline.documents->remove(kAlice, first.id));
  EXPECT_EQ(old_pipeline.documents->documents_of(kAlice).size(), 2u);
  EXPECT_TRUE(mentions(retrieved_for(*new_pipeline.pipeline, kAlice, "onyx key"), third.id));
}

// `chatflow index --prune` drops what its inputs no longer have; uploads were never an input.
TEST(RetrievalIndexUploads, PruningTheSourcesLeavesUploadsAlone) {
  std::string directory = fresh_path("uploads-prune");
  std::string id;
  {
    auto uploads = open_uploads(directory);
    ASSERT_TRUE(uploads.documents);
    id = uploads.documents->upload(kAlice, "mine.txt", "", "the cobalt ledger").id;
  }
  retrieval::RetrievalIndex writer(directory, embedding::make_ngram_embedder(256, 3), true);
  EXPECT_EQ(writer.prune({}), 1u);  // the handbook
  EXPECT_EQ(writer.document_ids(), (std::set<std::string>{id}));
}

TEST(RetrievalIndexUploads, ChunkOffsetsPointAtTheIndexedPassages) {
  auto uploads = open_uploads(fresh_path("uploads-offsets"));
  ASSERT_TRUE(uploads.documents);
  const std::string text = "one two three four five six seven eight nine ten eleven twelve";
  auto document = uploads.documents->upload(kAlice, "n.txt", "", text);
  std::string stored;
  std::vector<retrieval::ChunkSpan> chunks;
  ASSERT_TRUE(uploads.documents->document(kAlice, document.id, &stored, &chunks));
  EXPECT_EQ(stored, text);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(stored.substr(chunks[0].start, chunks[0].end - chunks[0].start),
            "one two three four five six seven eight");
  EXPECT_EQ(stored.substr(chunks[1].start, chunks[1].end - chunks[1].start),
            "seven eight nine ten eleven twelve");
}

TEST(RetrievalIndexUploads, HtmlIsIndexedAsItsText) {
  auto uploads = open_uploads(fresh_path("uploads-html"));
  ASSERT_TRUE(uploads.documents);
  auto document = uploads.documents->upload(
      kAlice, "page.html", "text/html",
      "<html><head><style>p{color:red}</style><script>var x = 1;</script></head>"
      "<body><p>Fish &amp; chips</p></body></html>");
  std::string stored;
  ASSERT_TRUE(uploads.documents->document(kAlice, document.id, &stored, nullptr));
  EXPECT_EQ(stored.find("color"), std::string::npos) << stored;
  EXPECT_EQ(stored.find("var x"), std::string::npos) << stored;
  EXPECT_NE(stored.find("Fish & chips"), std::string::npos) << stored;
}

TEST(RetrievalIndexUploads, EachLimitAndBadInputHasItsStatus) {
  auto uploads = open_uploads(fresh_path("uploads-limits"),
                              "{max_bytes: 64, max_documents_per_owner: 3, "
                              "max_bytes_per_owner: 100}");
  ASSERT_TRUE(uploads.documents);
  auto& documents = *uploads.documents;
  auto upload = [&](std::string name, std::string type, std::string text) {
    return refusal([&] { documents.upload(kAlice, name, type, text); });
  };
  EXPECT_EQ(upload("big.txt", "text/plain", std::string(65, 'a')), "413 document_too_large");
  EXPECT_EQ(upload("paper.pdf", "application/pdf", "%PDF-1.7"), "415 unsupported_media_type");
  EXPECT_EQ(upload("paper.pdf", "", "%PDF-1.7"), "415 unsupported_media_type");
  EXPECT_EQ(upload("image.txt", "text/plain", std::string("PNG\0data", 8)),
            "415 unsupported_media_type");
  EXPECT_EQ(upload("latin1.txt", "text/plain", "caf\xE9"), "400 invalid_encoding");
  EXPECT_EQ(upload("blank.txt", "text/plain", " \n\t"), "400 empty_document");
  EXPECT_EQ(upload("", "text/plain", "text"), "400 missing_name");
  EXPECT_EQ(upload("data.bin", "application/octet-stream", "text"), "415 unsupported_media_type");
  EXPECT_EQ(upload("data.csv", "application/octet-stream", "a,b\n1,2"), "accepted");  // 7 bytes
  EXPECT_EQ(upload("sixty.txt", "text/plain", std::string(60, 'b')), "accepted");
  EXPECT_EQ(upload("more.txt", "text/plain", std::string(40, 'c')), "413 documents_storage_full");
  EXPECT_EQ(upload("ok.txt", "text/plain", "small"), "accepted");
  EXPECT_EQ(upload("last.txt", "text/plain", "small"), "413 too_many_documents");
  // Bob's quota is his own.
  EXPECT_EQ(refusal([&] { documents.upload(kBob, "bob.txt", "text/plain", "bob's"); }), "accepted");
  EXPECT_EQ(documents.documents_of(kAlice).size(), 3u);
}

TEST(RetrievalIndexUploads, AnIndexWithoutUploadsOffersNone) {
  std::string shared =
      write_temp_file("uploads-none.jsonl", "{\"id\": \"a\", \"text\": \"some text\"}\n");
  auto pipeline = build_yaml("version: 1\nresources:\n  docs: {type: retrieval_index, path: \"" +
                                 fresh_path("uploads-none") + "\", source: [\"" + shared +
                                 "\"]}\nstages:\n  - {name: echo, type: echo}\n",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  auto resource = std::dynamic_pointer_cast<RetrievalIndexResource>(pipeline->resource("docs"));
  ASSERT_TRUE(resource);
  EXPECT_EQ(resource->owned_documents(), nullptr);
}

TEST(RetrievalIndexUploads, UploadsAloneCreateTheIndex) {
  std::string directory = fresh_path("uploads-only");
  auto pipeline =
      build_yaml("version: 1\nresources:\n  docs: {type: retrieval_index, path: \"" + directory +
                     "\", uploads: {}}\nstages:\n  - {name: retrieve, type: "
                     "hybrid_retrieval, config: {index: docs}}\n  - {name: echo, "
                     "type: echo}\n",
                 builtin_registry());
  ASSERT_TRUE(pipeline);
  auto resource = std::dynamic_pointer_cast<RetrievalIndexResource>(pipeline->resource("docs"));
  ASSERT_TRUE(resource && resource->owned_documents());
  EXPECT_TRUE(retrieved_for(*pipeline, kAlice, "anything").empty());
  auto document = resource->owned_documents()->upload(kAlice, "x.txt", "", "the basalt key");
  EXPECT_TRUE(mentions(retrieved_for(*pipeline, kAlice, "basalt"), document.id));
}

}  // namespace
}  // namespace chatflow::testing
