// The `postgres` resource: one pool of connections to a PostgreSQL server, shared by the
// resources and stages that keep their state there (quota's ledger, a history_store).
#pragma once

#include <memory>

#include "framework/api/resource.h"
#include "framework/storage/postgres_client.h"

namespace chatflow {

class PostgresResource final : public Resource {
 public:
  PostgresResource(std::shared_ptr<postgres::Client> client, size_t write_buffer_rows)
      : client_(std::move(client)), write_buffer_rows_(write_buffer_rows) {}
  const std::shared_ptr<postgres::Client>& client() const { return client_; }
  // Rows each store writing in the background here (usage settlements, queued session turns)
  // keeps while the server cannot be reached.
  size_t write_buffer_rows() const { return write_buffer_rows_; }

 private:
  std::shared_ptr<postgres::Client> client_;
  size_t write_buffer_rows_;
};

}  // namespace chatflow
