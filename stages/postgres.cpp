// postgres: see postgres.h. The server must answer at start: a pipeline whose database cannot
// be reached does not start, rather than failing its first requests.
#include "stages/postgres.h"

#include "framework/api/registry.h"

namespace chatflow {
namespace {

struct PostgresConfig {
  std::string url;
  int64_t pool_size = 8;
  int64_t connect_timeout_s = 5;
  int64_t statement_timeout_ms = 5000;
  int64_t write_buffer_rows = 100'000;
};

ResourceTypeInfo postgres_resource_type() {
  ResourceTypeBuilder<PostgresConfig> type(
      "postgres",
      "A pool of connections to a PostgreSQL server (libpq), for state shared by replicas: "
      "quota's ledger, session history.");
  type.config()
      .key("url", &PostgresConfig::url,
           "postgresql://user:password@host:port/database (e.g. ${CHATFLOW_POSTGRES_URL})")
      .required();
  type.config().key("pool_size", &PostgresConfig::pool_size, "connections at most").range(1, 1000);
  type.config()
      .key("connect_timeout_s", &PostgresConfig::connect_timeout_s,
           "seconds to wait for a connection to open")
      .range(1, 600);
  type.config()
      .key("statement_timeout_ms", &PostgresConfig::statement_timeout_ms,
           "the server cancels a statement that runs longer (0: never)")
      .range(0, 3'600'000);
  type.config()
      .key("write_buffer_rows", &PostgresConfig::write_buffer_rows,
           "rows each store keeps while the server cannot be reached (usage settlements, queued "
           "session turns), written once it answers; past it they are dropped and counted in "
           "chatflow:storage_lost_writes_total")
      .range(1, 100'000'000);
  type.create([](const PostgresConfig& config, ResourceContext&) -> std::shared_ptr<Resource> {
    postgres::ClientOptions options;
    options.url = config.url;
    options.pool_size = static_cast<size_t>(config.pool_size);
    options.connect_timeout_s = static_cast<int>(config.connect_timeout_s);
    options.statement_timeout_ms = static_cast<int>(config.statement_timeout_ms);
    try {
      return std::make_shared<PostgresResource>(
          std::make_shared<postgres::Client>(std::move(options)),
          static_cast<size_t>(config.write_buffer_rows));
    } catch (const postgres::PostgresError& error) {
      throw ConfigError(error.what());
    }
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(postgres_resource_type);

}  // namespace
}  // namespace chatflow
