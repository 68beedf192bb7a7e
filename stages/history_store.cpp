// history_store: see history_store.h.
#include "stages/history_store.h"

#include <algorithm>
#include <ctime>
#include <filesystem>

#include <boost/json.hpp>

#include "framework/api/registry.h"
#include "framework/history/postgres_history_store.h"
#include "framework/history/redis_turn_cache.h"
#include "framework/history/turn_tree.h"
#include "framework/storage/failure_log.h"
#include "framework/text/utf8.h"
#include "stages/postgres.h"
#include "stages/redis.h"

namespace chatflow {

namespace {

namespace json = boost::json;

json::array ids_json(const std::vector<int64_t>& ids) {
  json::array out;
  for (int64_t id : ids)
    out.push_back(id);
  return out;
}

// The path the session shows, each turn with its place in the tree: its id, its parent, and
// its siblings (itself among them) for the page's < n/m > navigation. Stored text came from
// clients and models: it leaves as valid UTF-8 whatever the store holds.
json::array turns_json(const std::vector<history::Turn>& stored) {
  history::TurnTree tree(stored);
  std::vector<history::Turn> turns = history::with_questions(stored, tree);
  json::array out;
  for (int64_t id : tree.shown_path()) {
    const history::Turn& turn = turns[static_cast<size_t>(id - 1)];
    const std::vector<int64_t>& siblings = tree.children(tree.parent(id));
    auto index = std::find(siblings.begin(), siblings.end(), id) - siblings.begin();
    out.push_back({{"id", id},
                   {"parent", tree.parent(id)},
                   {"user", text::repair(turn.user)},
                   {"assistant", text::repair(turn.assistant)},
                   {"status", std::string(history::to_string(turn.status))},
                   {"prompt_tokens", turn.prompt_tokens},
                   {"completion_tokens", turn.completion_tokens},
                   {"created", turn.time},
                   {"siblings", ids_json(siblings)},
                   {"sibling_index", static_cast<int64_t>(index)}});
  }
  return out;
}

SessionInfo info_of(const history::SessionSummary& summary) {
  return {text::repair(summary.session), text::repair(summary.title), summary.created_at,
          summary.updated_at, summary.turns};
}

// Sessions of one owner read for an export at a time.
constexpr size_t kExportPage = 200;

}  // namespace

HistoryStoreResource::HistoryStoreResource(std::unique_ptr<history::HistoryStore> store,
                                           HistoryRetention retention, const std::string& who)
    : store_(std::move(store)), retention_(retention) {
  if (retention_.limits.limits_anything()) {
    sweeper_ = std::make_unique<history::RetentionSweeper>(*store_, retention_.sweep_interval, who);
  }
}

std::optional<SessionContext> HistoryStoreResource::context(const history::SessionKey& key,
                                                            int64_t parent_turn) {
  // The whole session: a path's turns lie anywhere in it.
  std::vector<history::Turn> stored = store_->load(key);
  history::TurnTree tree(stored);
  if (parent_turn > 0 && !tree.has(parent_turn)) return std::nullopt;
  SessionContext context;
  context.parent = tree.parent_for(parent_turn);
  std::vector<int64_t> path = tree.path_to(context.parent);
  size_t limit = retention_.max_turns_loaded;
  size_t skip = limit == 0 || path.size() <= limit ? 0 : path.size() - limit;
  std::vector<history::Turn> turns = history::with_questions(std::move(stored), tree);
  for (int64_t child : tree.children(context.parent))
    context.answered_here.push_back(turns[static_cast<size_t>(child - 1)].user);
  for (size_t i = skip; i < path.size(); ++i)
    context.turns.push_back(std::move(turns[static_cast<size_t>(path[i] - 1)]));
  return context;
}

std::mutex& HistoryStoreResource::session_lock(const history::SessionKey& key) {
  std::hash<std::string> hash;
  size_t stripe = hash(key.tenant) ^ (hash(key.owner) * 31) ^ (hash(key.session) * 1009);
  return session_locks_[stripe % session_locks_.size()];
}

bool HistoryStoreResource::append_turn(const history::SessionKey& key, history::Turn turn,
                                       int64_t parent, bool durable) {
  std::lock_guard lock(session_lock(key));
  std::vector<history::Turn> stored = store_->load(key);
  // A parent that went meanwhile (the session deleted or expired): a new first message.
  if (parent > static_cast<int64_t>(stored.size())) parent = 0;
  history::place_turn(turn, stored, parent);
  return store_->append(key, std::move(turn), durable);
}

SessionBranches::Shown HistoryStoreResource::show_turn(const std::string& tenant,
                                                       const std::string& owner,
                                                       const std::string& session, int64_t turn) {
  history::SessionKey key{tenant, owner, session};
  std::lock_guard lock(session_lock(key));
  int64_t count = static_cast<int64_t>(store_->load(key).size());
  if (count == 0) return Shown::no_session;
  if (turn < 1 || turn > count) return Shown::no_turn;
  return store_->set_active(key, count - turn) ? Shown::shown : Shown::no_session;
}

std::optional<std::string> HistoryStoreResource::session_json(const std::string& tenant,
                                                              const std::string& owner,
                                                              const std::string& session) {
  std::vector<history::Turn> stored = store_->load({tenant, owner, session});
  if (stored.empty()) return std::nullopt;
  return json::serialize(json::object{{"object", "session"},
                                      {"id", text::repair(session)},
                                      {"active_turn", history::TurnTree(stored).active()},
                                      {"turns", turns_json(stored)}});
}

std::optional<SessionInfo> HistoryStoreResource::import_session(
    const std::string& tenant, const std::string& owner, const std::string& session,
    const std::vector<ImportedTurn>& turns, const std::string& title) {
  history::SessionKey key{tenant, owner, session};
  // Under the session's lock: a second import of the same id waits, then finds this one's turns.
  std::lock_guard lock(session_lock(key));
  if (!store_->load(key).empty()) return std::nullopt;
  // Each turn committed before the next is written; an import the store could not finish is
  // removed again, so the client's retry finds no half of it in the way.
  try {
    for (const auto& imported : turns) {
      history::Turn turn;
      turn.user = imported.user;
      turn.assistant = imported.assistant;
      turn.status = history::TurnStatus::completed;
      if (!store_->append(key, std::move(turn), /*durable=*/true))
        throw std::runtime_error("the history store could not write the imported session");
    }
    if (!title.empty()) store_->rename(key, title);
    auto summary = store_->summary(key);
    if (!summary) throw std::runtime_error("the imported session could not be read back");
    return info_of(*summary);
  } catch (...) {
    try {
      store_->remove(key);
    } catch (const std::exception&) {
      // The store that failed the import may fail this too; the import's own error is said.
    }
    throw;
  }
}

void HistoryStoreResource::keep_response(const std::string& tenant, const std::string& owner,
                                         const std::string& id, const KeptResponse& response) {
  store_->keep_response({tenant, owner, id}, response, static_cast<int64_t>(std::time(nullptr)));
}

int64_t HistoryStoreResource::delete_sessions(const std::string& tenant, const std::string& owner) {
  return static_cast<int64_t>(store_->remove_owner(tenant, owner).size());
}

int64_t HistoryStoreResource::export_sessions(
    const std::string& tenant, const std::string& owner,
    const std::function<void(const std::string& line)>& write) {
  // The list first, then each session's turns: pages of summaries stay consistent while turns
  // are read.
  std::vector<history::SessionSummary> sessions;
  std::string after;
  for (;;) {
    auto page = store_->list(tenant, owner, kExportPage, after);
    if (!page) {
      throw std::runtime_error("the sessions changed while they were being exported (session '" +
                               text::repair(after) + "' went); try again");
    }
    sessions.insert(sessions.end(), page->sessions.begin(), page->sessions.end());
    if (!page->has_more || page->sessions.empty()) break;
    after = page->sessions.back().session;
  }
  int64_t written = 0;
  for (const auto& summary : sessions) {
    std::vector<history::Turn> turns = store_->load({tenant, owner, summary.session});
    if (turns.empty()) continue;  // deleted meanwhile
    SessionInfo info = info_of(summary);
    write(json::serialize(json::object{{"object", "session"},
                                       {"id", info.id},
                                       {"title", info.title},
                                       {"created_at", info.created_at},
                                       {"updated_at", info.updated_at},
                                       {"turns", turns_json(turns)}}) +
          "\n");
    ++written;
  }
  return written;
}

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

struct RetentionConfig {
  int64_t max_turns_loaded = 100;
  int64_t ttl_days = 0;
  int64_t max_sessions_per_owner = 0;
  int64_t max_responses_per_owner = 1000;
  int64_t sweep_interval_s = 3600;
};

struct HistoryStoreConfig {
  std::string backend = "sqlite";
  std::string path = "var/history.db";
  std::string database;
  std::string cache;
  RetentionConfig retention;
};

history::Retention limits_of(const HistoryStoreConfig& config) {
  return {config.retention.ttl_days, config.retention.max_sessions_per_owner,
          config.retention.max_responses_per_owner};
}

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
      std::move(failures), limits_of(config));
}

std::unique_ptr<history::HistoryStore> durable_store(const HistoryStoreConfig& config,
                                                     ResourceContext& context) {
  if (config.backend != "postgres" && !config.database.empty())
    throw ConfigError("'database' is for backend postgres; this store's backend is " +
                      config.backend);
  if (config.backend == "memory") return history::make_memory_store(limits_of(config));
  if (config.backend == "postgres") {
    if (config.database.empty())
      throw ConfigError("backend postgres needs 'database': the name of a postgres resource");
    auto database = context.resource<PostgresResource>(config.database);
    try {
      return history::make_postgres_store(database->client(), limits_of(config),
                                          database->write_buffer_rows());
    } catch (const postgres::PostgresError& error) {
      throw ConfigError(error.what());
    }
  }
  std::filesystem::path file(config.path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  try {
    return history::make_sqlite_store(config.path, limits_of(config));
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
  SchemaBuilder<RetentionConfig> retention;
  retention
      .key("max_turns_loaded", &RetentionConfig::max_turns_loaded,
           "the newest turns of a session a request loads (before history_trim's budget); 0: all")
      .range(0, 1'000'000);
  retention
      .key("ttl_days", &RetentionConfig::ttl_days,
           "days a turn is kept after it was written; 0: forever")
      .range(0, 100'000);
  retention
      .key("max_sessions_per_owner", &RetentionConfig::max_sessions_per_owner,
           "sessions an owner keeps; starting one more deletes the least recently active; 0: "
           "unlimited")
      .range(0, 100'000'000);
  retention
      .key("max_responses_per_owner", &RetentionConfig::max_responses_per_owner,
           "the Responses API's kept responses an owner keeps; keeping one more deletes the "
           "oldest; 0: unlimited")
      .range(0, 100'000'000);
  retention
      .key("sweep_interval_s", &RetentionConfig::sweep_interval_s,
           "how often expired turns and sessions past the limit are deleted (also at start)")
      .range(1, 86'400 * 7);
  type.config().object("retention", &HistoryStoreConfig::retention, retention,
                       "how much history is kept");
  type.create(
      [](const HistoryStoreConfig& config, ResourceContext& context) -> std::shared_ptr<Resource> {
        HistoryRetention retention;
        retention.max_turns_loaded = static_cast<size_t>(config.retention.max_turns_loaded);
        retention.limits = limits_of(config);
        retention.sweep_interval = std::chrono::seconds(config.retention.sweep_interval_s);
        return std::make_shared<HistoryStoreResource>(
            with_turn_cache(durable_store(config, context), config, context), retention,
            "history_store '" + context.resource_name() + "'");
      });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(history_store_resource_type);

}  // namespace
}  // namespace chatflow
