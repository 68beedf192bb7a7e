// exact_cache: answers a request seen before without the model. The key is SHA-256 over the
// tenant, the model, the cache's version, the whole conversation, chat_template_kwargs (as
// canonical JSON) and every parameter that changes the output, so a changed word, parameter or
// tenant is a miss. Only complete answers
// (finish stop or length, nothing filtered or masked) are kept, by default only of deterministic
// requests (temperature 0 or a seed). A hit streams the stored chunks through port `hit` and the
// stream stages after it, with `x-chatflow-cache: exact`; a miss goes on through `miss`.
//
// With `store: <redis resource>` the entries live in Redis (expiring there) and every replica
// using it shares them; without, in this process's LRU. Redis failing is a miss (counted as
// chatflow:request_annotations_total{name="exact_cache",value="store_unavailable"}), never a
// failed request.
#include <boost/json.hpp>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/api/response_recorder.h"
#include "framework/cache/canonical_json.h"
#include "framework/cache/conversation.h"
#include "framework/cache/lru_store.h"
#include "framework/cache/redis_exact_store.h"
#include "framework/history/session_branches.h"
#include "framework/security/crypto.h"
#include "framework/storage/failure_log.h"
#include "stages/redis.h"

namespace chatflow {
namespace {

struct ExactCacheConfig {
  double ttl_s = 3600;
  int64_t max_entries = 100000;
  int64_t max_bytes = 256 << 20;
  bool deterministic_only = true;
  std::string version = "1";
  std::string scope = "user";
  std::string store;
};

constexpr PortId kMiss = 0;
constexpr PortId kHit = 1;

class ExactCacheStage final : public RequestStage, public CacheAdmin {
 public:
  ExactCacheStage(const ExactCacheConfig& config, std::shared_ptr<cache::RedisExactStore> shared,
                  const std::string& who)
      : config_(config),
        scope_(config.scope == "tenant" ? cache::CacheScope::tenant : cache::CacheScope::user),
        store_(std::make_shared<cache::LruStore>(static_cast<size_t>(config.max_entries),
                                                 static_cast<size_t>(config.max_bytes))),
        shared_(std::move(shared)),
        failures_(std::make_shared<storage::FailureLog>(who)) {}

  Route process(Request& request, StageIo& io) override {
    const GenerationParams& g = request.generation;
    bool cacheable = !g.logprobs && g.top_logprobs == 0 &&
                     (!config_.deterministic_only || g.temperature == 0.0f || g.seed.has_value()) &&
                     !request.attachment<bool>(std::string(kRegenerationAttachment));
    if (!cacheable) {
      request.set_response_header("x-chatflow-cache", "bypass");
      return Route::to(kMiss);
    }
    std::string conversation =
        cache::conversation_json(request.kind, request.messages, request.prompt);
    std::string conversation_digest =
        security::sha256_hex(key_prefix(request.identity.tenant) + conversation);
    // The digest is the tenant's (corrections find every user's entry); the key adds who may
    // get the answer back.
    std::string key = security::sha256_hex(
        conversation_digest + '\x1f' + cache::scope_key(request.identity, scope_) + '\x1f' +
        boost::json::serialize(boost::json::string(request.model)) +
        cache::output_parameters_json(request.generation) + '\x1f' +
        cache::canonical_json(request.chat_template_kwargs));
    auto answer = lookup(request, key);
    // Longer than the gates let this request's answer be (a cap on an answer without
    // max_tokens): generated again, within it.
    if (answer && !cache::within_answer_cap(*answer, request.generation)) answer = nullptr;
    if (answer) {
      request.set_response_header("x-chatflow-cache", "exact");
      request.annotate("cache", "exact");
      request.usage = answer->usage;
      request.citations = answer->citations;
      request.tool_format = answer->tool_format;
      ChunkWriter writer = io.open_stream(kHit);
      for (const Chunk& chunk : answer->chunks)
        writer.write(chunk);
      Chunk last;
      last.finish = answer->finish;
      last.usage = answer->usage;
      writer.write(std::move(last));
      return Route::streaming();
    }
    request.set_response_header("x-chatflow-cache", "miss");
    auto store = store_;
    auto shared = shared_;
    auto failures = failures_;
    auto ttl = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.ttl_s));
    // Stored before the last chunk leaves: a client repeating the question at once finds it.
    record_answer(
        request,
        [store, shared, failures, key, conversation_digest, ttl](const Request& done,
                                                                 const RecordedAnswer& answer) {
          auto entry = cache::cacheable_answer(done, answer, ttl);
          if (!entry) return;
          entry->conversation = conversation_digest;
          if (!shared) {
            store->put(key, std::move(entry));
            return;
          }
          try {
            shared->put(key, *entry, std::chrono::duration_cast<std::chrono::milliseconds>(ttl));
          } catch (const redis::Error& error) {
            failures->failed(error.what(), "an answer was not cached");
          }
        },
        nullptr);
    return Route::to(kMiss);
  }

  std::string cache_name() const override { return "exact"; }

  size_t forget(const CacheCorrection& correction) override {
    if (shared_) return forget_shared(correction);
    if (correction.everything) {
      return store_->erase_if(
          [&](const cache::CachedAnswer& entry) { return entry.tenant == correction.tenant; });
    }
    std::string digest = conversation_digest(correction);
    return store_->erase_if([&](const cache::CachedAnswer& entry) {
      return entry.tenant == correction.tenant && entry.conversation == digest &&
             (correction.model.empty() || entry.model == correction.model);
    });
  }

 private:
  std::string key_prefix(const std::string& tenant) const {
    return boost::json::serialize(boost::json::array{config_.version, tenant});
  }

  std::string conversation_digest(const CacheCorrection& correction) const {
    std::string conversation = cache::conversation_json(
        correction.messages.empty() ? RequestKind::completion : RequestKind::chat,
        correction.messages, correction.prompt);
    return security::sha256_hex(key_prefix(correction.tenant) + conversation);
  }

  std::shared_ptr<const cache::CachedAnswer> lookup(Request& request, const std::string& key) {
    if (!shared_) return store_->get(key);
    try {
      auto answer = shared_->get(request.identity.tenant, key);
      failures_->succeeded();
      return answer;
    } catch (const redis::Error& error) {
      request.annotate("exact_cache", "store_unavailable");
      failures_->failed(error.what(), "requests miss the cache");
      return nullptr;
    }
  }

  // Throws on failure: an admin asking to remove an answer must not hear that it is gone.
  size_t forget_shared(const CacheCorrection& correction) {
    try {
      if (correction.everything) return shared_->forget_tenant(correction.tenant);
      return shared_->forget_conversation(conversation_digest(correction), correction.model);
    } catch (const redis::Error& error) {
      failures_->failed(error.what(), "a correction was refused");
      throw RequestFailure(RequestError{503,
                                        "server_error",
                                        "the exact cache's store is unavailable; nothing was "
                                        "removed, retry shortly",
                                        "cache_store_unavailable",
                                        {}});
    }
  }

  ExactCacheConfig config_;
  cache::CacheScope scope_;
  std::shared_ptr<cache::LruStore> store_;
  std::shared_ptr<cache::RedisExactStore> shared_;  // null: the LRU above
  std::shared_ptr<storage::FailureLog> failures_;
};

StageTypeInfo exact_cache_stage_type() {
  StageTypeBuilder<ExactCacheConfig> type(
      "exact_cache", StageKind::request,
      "Answers a request identical to an earlier one (same tenant, model, conversation and "
      "parameters) from memory; port hit streams it, port miss goes on.");
  type.port("miss", PortKind::request, "requests not answered from the cache");
  type.port("hit", PortKind::stream, "the cached answer, as chunks");
  type.config()
      .key("ttl_s", &ExactCacheConfig::ttl_s, "how long an answer is kept")
      .range(0.001, 1e9);
  type.config()
      .key("max_entries", &ExactCacheConfig::max_entries, "answers kept at most (LRU)")
      .range(1, 1'000'000'000);
  type.config()
      .key("max_bytes", &ExactCacheConfig::max_bytes, "memory for answers at most (LRU)")
      .range(1024, int64_t{1} << 40);
  type.config().key("deterministic_only", &ExactCacheConfig::deterministic_only,
                    "keep only answers of requests with temperature 0 or a seed");
  type.config().key("version", &ExactCacheConfig::version,
                    "part of every key: change it to start from an empty cache");
  type.config()
      .key("scope", &ExactCacheConfig::scope,
           "who shares an answer: user (the same user of the tenant; callers without a user "
           "share the tenant's) or tenant")
      .choices({"user", "tenant"});
  type.config()
      .key("store", &ExactCacheConfig::store,
           "a redis resource: entries shared by every replica using it (max_entries and "
           "max_bytes then do not apply: Redis's maxmemory does); empty: this process's memory")
      .resource("redis");
  type.create([](const ExactCacheConfig& config, StageContext& context) {
    std::shared_ptr<cache::RedisExactStore> shared;
    std::string who = "exact_cache '" + context.stage_name() + "'";
    if (!config.store.empty()) {
      auto redis = context.resource<RedisResource>(config.store);
      shared =
          std::make_shared<cache::RedisExactStore>(redis->client(), redis->key_prefix() + "exact:");
      who += " (" + redis->description() + ")";
    }
    return std::make_unique<ExactCacheStage>(config, std::move(shared), who);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(exact_cache_stage_type);

}  // namespace
}  // namespace chatflow
