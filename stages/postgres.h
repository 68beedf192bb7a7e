// The `postgres` resource: one pool of connections to a PostgreSQL server, shared by the
// resources and stages that keep their state there (quota's ledger, a history_store).
#pragma once

#include <memory>

#include "framework/api/resource.h"
#include "framework/storage/postgres_client.h"

namespace chatflow {

class PostgresResource final : public Resource {
 public:
  explicit PostgresResource(std::shared_ptr<postgres::Client> client)
      : client_(std::move(client)) {}
  const std::shared_ptr<postgres::Client>& client() const { return client_; }

 private:
  std::shared_ptr<postgres::Client> client_;
};

}  // namespace chatflow
