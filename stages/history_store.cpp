// history_store: see history_store.h.
#include "stages/history_store.h"

#include <filesystem>

#include <boost/json.hpp>

#include "framework/api/registry.h"
#include "framework/history/postgres_history_store.h"
#include "framework/history/redis_turn_cache.h"
#include "framework/storage/failure_log.h"
#include "framework/text/utf8.h"
#include "stages/postgres.h"
#include "stages/redis.h"

namespace chatflow {

std::optional<std::string> HistoryStoreResource::session_json(const std::string& tenant,
                                                              const std::string& owner,
                                                              const std::string& session) {
  namespace json = boost::json;
  std::vector<history::Turn> stored = store_->load({tenant, owner, session});
  if (stored.empty()) return std::nullopt;
  json::array turns;
  for (const auto& turn : stored) {
    // Stored text came from clients and models: it leaves as valid UTF-8 whatever the file holds.
    turns.push_back({{"user", text::repair(turn.user)},
                     {"assistant", text::repair(turn.assistant)},
                     {"status", std::string(history::to_string(turn.status))},
                     {"prompt_tokens", turn.prompt_tokens},
                     {"completion_tokens", turn.completion_tokens},
                     {"created", turn.time}});
  }
  return json::serialize(
      json::object{{"object", "session"}, {"id", text::repair(session)}, {"turns", turns}});
}

namespace {

// Stored text came from clients and models: it leaves as valid UTF-8 whatever the file holds.
SessionInfo info_of(const history::SessionSummary& summary) {
  return {text::repair(summary.session), text::repair(summary.title), summary.created_at,
          summary.updated_at, summary.turns};
}

}  // namespace

std::optional<SessionList> HistoryStoreResource::list_sessions(const std::string& tenant,
                                                               const std::string& owner,
                                                               size_t limit,
                                                               const std::string& after) {
  auto page = store_->list(tenant, owner, limit, after);
  if (!page) return std::nullopt;
  SessionList list;
  list.has_more = page->has_more;
  for (const auto& summary : page->sessions)
    list.sessions.push_back(info_of(summary));
  return list;
}

bool HistoryStoreResource::delete_session(const std::string& tenant, const std::string& owner,
                                          const std::string& session) {
  return store_->remove({tenant, owner, session});
}

std::optional<SessionInfo> HistoryStoreResource::rename_session(const std::string& tenant,
                                                                const std::string& owner,
                                                                const std::string& session,
                                                                const std::string& title) {
  auto summary = store_->rename({tenant, owner, session}, title);
  if (!summary) return std::nullopt;
  return info_of(*summary);
}

namespace {

struct HistoryStoreConfig {
  std::string backend = "sqlite";
  std::string path = "var/history.db";
  std::string database;
  std::string cache;
};

// With `cache: <redis resource>`, the store behind hot session turns in Redis (an hour after a
// session's last use), so every replica sees a session's latest turns.
std::unique_ptr<history::HistoryStore> with_turn_cache(std::unique_ptr<history::HistoryStore> store,
                                                       const HistoryStoreConfig& config,
                                                       ResourceContext& context) {
  if (config.cache.empty()) return store;
  auto redis = context.resource<RedisResource>(config.cache);
  auto failures = std::make_shared<storage::FailureLog>(
      "history_store '" + context.resource_name() + "' (" + redis->description() + ")");
  return std::make_unique<history::RedisTurnCache>(
      std::move(store), redis->client(), redis->key_prefix() + "session:", std::chrono::hours(1),
      std::move(failures));
}

std::unique_ptr<history::HistoryStore> durable_store(const HistoryStoreConfig& config,
                                                     ResourceContext& context) {
  if (config.backend != "postgres" && !config.database.empty())
    throw ConfigError("'database' is for backend postgres; this store's backend is " +
                      config.backend);
  if (config.backend == "memory") return history::make_memory_store();
  if (config.backend == "postgres") {
    if (config.database.empty())
      throw ConfigError("backend postgres needs 'database': the name of a postgres resource");
    auto database = context.resource<PostgresResource>(config.database);
    try {
      return history::make_postgres_store(database->client());
    } catch (const postgres::PostgresError& error) {
      throw ConfigError(error.what());
    }
  }
  std::filesystem::path file(config.path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  try {
    return history::make_sqlite_store(config.path);
  } catch (const std::runtime_error& error) {
    throw ConfigError(error.what());
  }
}

ResourceTypeInfo history_store_resource_type() {
  ResourceTypeBuilder<HistoryStoreConfig> type(
      "history_store",
      "Session turns: SQLite (a file, WAL, one writer thread, batched commits), PostgreSQL "
      "(shared by replicas) or memory, optionally with recent turns in Redis in front.");
  type.config()
      .key("backend", &HistoryStoreConfig::backend, "sqlite, postgres or memory")
      .choices({"sqlite", "postgres", "memory"});
  type.config().key("path", &HistoryStoreConfig::path, "the SQLite file");
  type.config()
      .key("database", &HistoryStoreConfig::database,
           "with backend postgres: a postgres resource (declared before this one)")
      .resource("postgres");
  type.config()
      .key("cache", &HistoryStoreConfig::cache,
           "a redis resource keeping recent sessions' turns in front of the store (write-through), "
           "so every replica sees them")
      .resource("redis");
  type.create(
      [](const HistoryStoreConfig& config, ResourceContext& context) -> std::shared_ptr<Resource> {
        return std::make_shared<HistoryStoreResource>(
            with_turn_cache(durable_store(config, context), config, context));
      });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(history_store_resource_type);

}  // namespace
}  // namespace chatflow
