// semantic_cache: answers a question asked before in other words. The newest user message (a
// completion's prompt) is embedded and looked up in the partition of everything else the answer
// depends on: tenant, model, system prompt, answer shape (max_tokens, stop, response_format),
// chat template arguments and any retrieved passages; a request without a tenant is never cached.
// A later question of a conversation is only compared with questions asked after the very same
// earlier turns (their digest is the entry's context): "And then what?" or "Why was the dragon
// sad?" mean something else after another story, and whether a question leans on earlier turns
// ("What happened to the princess?") cannot be told from its words. Embedding the whole
// conversation instead let a long session's new question barely move the vector, so a new question
// got the previous turn's answer. A neighbour at or above `threshold` is still checked by the
// verifier (framework/cache/question_verifier.h: numbers, negations, question words, references,
// tense, modal verbs and content words), so "is it safe" never gets the answer to "is it not
// safe". Questions about the present or the caller (today, weather, my balance...) bypass the
// cache. A hit streams through port `hit` with `x-chatflow-cache: semantic` and
// `x-chatflow-cache-similarity`.
//
// With `store: <redis resource>` entries live in Redis and each replica's index follows them
// (framework/cache/redis_semantic_store.h): an answer cached by one replica is found by the
// others. While Redis is out of reach the cache misses (counted as
// chatflow:request_annotations_total{name="semantic_cache",value="store_unavailable"}).
#include <algorithm>
#include <cstdio>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/api/response_recorder.h"
#include "framework/cache/canonical_json.h"
#include "framework/cache/conversation.h"
#include "framework/cache/question_verifier.h"
#include "framework/cache/redis_semantic_store.h"
#include "framework/history/session_branches.h"
#include "framework/cache/semantic_index.h"
#include "framework/moderation/rule_list.h"
#include "framework/security/crypto.h"
#include "framework/storage/failure_log.h"
#include "framework/storage/redis_client.h"
#include "framework/text/normalizer.h"
#include "stages/embedder.h"
#include "stages/redis.h"

namespace chatflow {
namespace {

struct SemanticCacheConfig {
  std::string embedder;
  double threshold = 0.95;
  double ttl_s = 86400;
  int64_t max_entries = 100000;
  int candidates = 4;
  bool deterministic_only = false;
  std::vector<std::string> bypass;
  bool built_in_bypass = true;
  std::string scope = "user";
  std::string store;
};

constexpr PortId kMiss = 0;
constexpr PortId kHit = 1;

// Questions whose answer depends on when or who asks.
const std::vector<std::string> kBuiltInBypass = {"today",
                                                 "tonight",
                                                 "tomorrow",
                                                 "yesterday",
                                                 "right now",
                                                 "at the moment",
                                                 "currently",
                                                 "current",
                                                 "latest",
                                                 "this week",
                                                 "this month",
                                                 "this year",
                                                 "weather",
                                                 "what time",
                                                 "my balance",
                                                 "my account",
                                                 "my order",
                                                 "my orders",
                                                 "my subscription",
                                                 "my password",
                                                 "my name",
                                                 "stock price",
                                                 "exchange rate",
                                                 "news",
                                                 "今天",
                                                 "明天",
                                                 "昨天",
                                                 "现在",
                                                 "当前",
                                                 "目前",
                                                 "最新",
                                                 "天气",
                                                 "余额",
                                                 "我的账户",
                                                 "我的订单",
                                                 "股价",
                                                 "汇率",
                                                 "新闻"};

class SemanticCacheStage final : public RequestStage, public CacheAdmin {
 public:
  SemanticCacheStage(const SemanticCacheConfig& config,
                     std::shared_ptr<const embedding::Embedder> embedder,
                     std::vector<std::shared_ptr<const moderation::RuleList>> bypass,
                     std::shared_ptr<cache::RedisSemanticStore> shared,
                     std::shared_ptr<storage::FailureLog> failures)
      : config_(config),
        embedder_(std::move(embedder)),
        index_(std::make_shared<cache::SemanticIndex>(embedder_->dimensions(),
                                                      static_cast<size_t>(config.max_entries))),
        bypass_(std::move(bypass)),
        shared_(std::move(shared)),
        failures_(std::move(failures)) {}

  Route process(Request& request, StageIo& io) override {
    const GenerationParams& g = request.generation;
    std::string reason;
    if (request.identity.tenant.empty()) {
      reason = "no_tenant";  // no partition, no cache
    } else if (g.logprobs || g.top_logprobs > 0) {
      reason = "logprobs";
    } else if (config_.deterministic_only && g.temperature != 0.0f && !g.seed) {
      reason = "not_deterministic";
    } else if (request.attachment<bool>(std::string(kRegenerationAttachment))) {
      reason = "regeneration";  // asked again for another answer (history_trim)
    } else if (!g.tools.empty() || has_tool_turns(request)) {
      // A similar question may want the same function with other arguments.
      reason = "tools";
    } else if (request.kind == RequestKind::chat &&
               (request.messages.empty() || request.messages.back().role != "user")) {
      reason = "not_a_question";  // e.g. an assistant message to continue
    } else if (bypassed(request)) {
      reason = "time_or_identity";
    }
    if (!reason.empty()) {
      request.annotate("semantic_cache", "bypass");
      request.annotate("semantic_cache_bypass", reason);  // a bounded set: a metrics label
      return Route::to(kMiss);
    }
    if (shared_ && !shared_->in_step()) {
      request.annotate("semantic_cache", "store_unavailable");
      return Route::to(kMiss);
    }
    std::shared_ptr<cache::SemanticIndex> index = shared_ ? shared_->index() : index_;
    std::string partition = partition_of(request);
    std::string context = context_of(request.kind, request.messages);
    std::string question = cache::newest_question(request.kind, request.messages, request.prompt);
    std::vector<float> vector = embedder_->embed(question);
    for (const auto& match :
         index->search(partition, context, vector, static_cast<size_t>(config_.candidates))) {
      if (match.similarity < config_.threshold) break;
      if (!cache::same_question(question, match.entry->question)) continue;
      if (!cache::within_answer_cap(*match.entry->answer, request.generation)) continue;
      return answer(request, io, *match.entry->answer, match.similarity);
    }
    auto shared = shared_;
    auto failures = failures_;
    auto ttl = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.ttl_s));
    // Stored before the last chunk leaves: a client repeating the question at once finds it.
    record_answer(
        request,
        [index, shared, failures, partition, context, vector, question, ttl](
            const Request& done, const RecordedAnswer& answer) {
          auto cached = cache::cacheable_answer(done, answer, ttl);
          if (!cached) return;
          cache::SemanticEntry entry{vector, question, std::move(cached), context};
          if (!shared) {
            index->insert(partition, std::move(entry));
            return;
          }
          try {
            shared->insert(partition, std::move(entry),
                           std::chrono::duration_cast<std::chrono::milliseconds>(ttl));
          } catch (const redis::Error& error) {
            failures->failed(error.what(), "an answer was cached by this replica only");
          }
        },
        nullptr);
    return Route::to(kMiss);
  }

  std::string cache_name() const override { return "semantic"; }

  size_t forget(const CacheCorrection& correction) override {
    std::string prefix = correction.tenant + '\x1f';
    if (!correction.model.empty()) prefix += correction.model + '\x1f';
    std::vector<float> vector;
    std::string context;
    if (!correction.everything) {
      RequestKind kind = correction.messages.empty() ? RequestKind::completion : RequestKind::chat;
      vector =
          embedder_->embed(cache::newest_question(kind, correction.messages, correction.prompt));
      context = context_of(kind, correction.messages);
    }
    const std::vector<float>* near = correction.everything ? nullptr : &vector;
    auto threshold = static_cast<float>(config_.threshold);
    if (!shared_) return index_->forget(prefix, context, near, threshold);
    try {
      return shared_->forget(prefix, context, near, threshold);
    } catch (const redis::Error& error) {
      // The other replicas did not hear of it: the admin must know.
      failures_->failed(error.what(), "a correction reached this replica only");
      throw RequestFailure(RequestError{503,
                                        "server_error",
                                        "the semantic cache's store is unavailable; the "
                                        "correction did not reach the other replicas, retry "
                                        "shortly",
                                        "cache_store_unavailable",
                                        {}});
    }
  }

 private:
  // Tenant and model first, so a correction finds them by prefix; who may share the answer
  // last. Between them, the digest of everything but the conversation that the answer depends
  // on.
  std::string partition_of(const Request& request) const {
    cache::CacheScope scope =
        config_.scope == "tenant" ? cache::CacheScope::tenant : cache::CacheScope::user;
    std::string depends_on =
        std::string(request.kind == RequestKind::chat ? "chat" : "completion") + '\x1f' +
        cache::system_prompt(request.messages) + '\x1f' +
        cache::answer_shape_json(request.generation) + '\x1f' +
        cache::canonical_json(request.chat_template_kwargs) + '\x1f' +
        cache::passages_json(request.context_passages) + '\x1f' +
        cache::passages_json(request.citations);
    return request.identity.tenant + '\x1f' + request.model + '\x1f' +
           security::sha256_hex(depends_on) + '\x1f' + cache::scope_key(request.identity, scope);
  }

  // The digest of the turns before the newest question; empty for a conversation's first.
  static std::string context_of(RequestKind kind, const std::vector<Message>& messages) {
    std::string earlier = cache::earlier_turns_json(kind, messages);
    return earlier.empty() ? std::string() : security::sha256_hex(earlier);
  }

  static bool has_tool_turns(const Request& request) {
    return std::any_of(request.messages.begin(), request.messages.end(),
                       [](const Message& m) { return m.role == "tool" || !m.tool_calls.empty(); });
  }

  bool bypassed(const Request& request) const {
    std::string normalized =
        text::normalize(cache::newest_question(request.kind, request.messages, request.prompt))
            .text;
    for (const auto& list : bypass_) {
      if (list->matches(normalized)) return true;
    }
    return false;
  }

  Route answer(Request& request, StageIo& io, const cache::CachedAnswer& cached, float similarity) {
    char text[16];
    std::snprintf(text, sizeof text, "%.4f", similarity);
    request.set_response_header("x-chatflow-cache", "semantic");
    request.set_response_header("x-chatflow-cache-similarity", text);
    request.annotate("cache", "semantic");
    request.usage = cached.usage;
    request.citations = cached.citations;
    request.tool_format = cached.tool_format;
    ChunkWriter writer = io.open_stream(kHit);
    for (const Chunk& chunk : cached.chunks)
      writer.write(chunk);
    Chunk last;
    last.finish = cached.finish;
    last.usage = cached.usage;
    writer.write(std::move(last));
    return Route::streaming();
  }

  SemanticCacheConfig config_;
  std::shared_ptr<const embedding::Embedder> embedder_;
  std::shared_ptr<cache::SemanticIndex> index_;
  std::vector<std::shared_ptr<const moderation::RuleList>> bypass_;
  std::shared_ptr<cache::RedisSemanticStore> shared_;  // null: index_ alone
  std::shared_ptr<storage::FailureLog> failures_;
};

StageTypeInfo semantic_cache_stage_type() {
  StageTypeBuilder<SemanticCacheConfig> type(
      "semantic_cache", StageKind::request,
      "Answers paraphrases of earlier questions (per tenant, model, system prompt and earlier "
      "turns), verified for intent (numbers, negations, question and content words); port hit "
      "streams the answer, port miss goes on.");
  type.port("miss", PortKind::request, "requests not answered from the cache");
  type.port("hit", PortKind::stream, "the cached answer, as chunks");
  type.config()
      .key("embedder", &SemanticCacheConfig::embedder,
           "an embedder resource; empty: hashed n-grams (256 dimensions)")
      .resource("embedder");
  type.config()
      .key("threshold", &SemanticCacheConfig::threshold, "cosine similarity a hit needs at least")
      .range(0.5, 1.0);
  type.config()
      .key("ttl_s", &SemanticCacheConfig::ttl_s, "how long an answer is kept")
      .range(0.001, 1e9);
  type.config()
      .key("max_entries", &SemanticCacheConfig::max_entries, "answers kept per partition at most")
      .range(1, 100'000'000);
  type.config()
      .key("candidates", &SemanticCacheConfig::candidates, "neighbours checked per lookup")
      .range(1, 64);
  type.config().key("deterministic_only", &SemanticCacheConfig::deterministic_only,
                    "cache only requests with temperature 0 or a seed");
  type.config().key("bypass", &SemanticCacheConfig::bypass,
                    "rule lists of questions never answered from the cache");
  type.config().key("built_in_bypass", &SemanticCacheConfig::built_in_bypass,
                    "also bypass the built-in time and identity words (today, my balance, ...)");
  type.config()
      .key("scope", &SemanticCacheConfig::scope,
           "who shares an answer: user (the same user of the tenant; callers without a user "
           "share the tenant's) or tenant")
      .choices({"user", "tenant"});
  type.config()
      .key("store", &SemanticCacheConfig::store,
           "a redis resource: entries shared by every replica using it, each replica's index "
           "built from them and kept current; empty: this process's memory")
      .resource("redis");
  type.create([](const SemanticCacheConfig& config, StageContext& context) {
    std::shared_ptr<const embedding::Embedder> embedder = embedder_named(context, config.embedder);
    std::vector<std::shared_ptr<const moderation::RuleList>> bypass;
    if (config.built_in_bypass)
      bypass.push_back(moderation::RuleList::from_phrases("built-in", kBuiltInBypass));
    for (const auto& file : config.bypass) {
      try {
        bypass.push_back(moderation::RuleList::load(file));
      } catch (const std::exception& error) {
        throw ConfigError(error.what());
      }
    }
    std::string who = "semantic_cache '" + context.stage_name() + "'";
    std::shared_ptr<cache::RedisSemanticStore> shared;
    std::shared_ptr<storage::FailureLog> failures;
    if (!config.store.empty()) {
      auto redis = context.resource<RedisResource>(config.store);
      failures = std::make_shared<storage::FailureLog>(who + " (" + redis->description() + ")");
      cache::RedisSemanticOptions options;
      // The vector length is part of the keys: another embedder's entries never meet these.
      // v2: entries keyed by the newest question and its context (earlier entries embedded the
      // whole conversation and are never read).
      options.key_prefix =
          redis->key_prefix() + "semantic:v2:" + std::to_string(embedder->dimensions()) + ":";
      options.dimensions = embedder->dimensions();
      options.max_entries = static_cast<size_t>(config.max_entries);
      shared = std::make_shared<cache::RedisSemanticStore>(redis->client(), options, failures);
    } else {
      failures = std::make_shared<storage::FailureLog>(who);
    }
    return std::make_unique<SemanticCacheStage>(config, std::move(embedder), std::move(bypass),
                                                std::move(shared), std::move(failures));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(semantic_cache_stage_type);

}  // namespace
}  // namespace chatflow
