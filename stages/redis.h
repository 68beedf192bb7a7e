// The `redis` resource: one Redis server that replicas share state through (rate-limit
// buckets, cache entries, hot session turns), as a pool of connections with timeouts. The
// stages and stores that name it decide what a request gets while Redis is unreachable.
#pragma once

#include <memory>
#include <string>

#include "framework/api/resource.h"
#include "framework/storage/redis_client.h"

namespace chatflow {

class RedisResource final : public Resource {
 public:
  RedisResource(std::string name, std::shared_ptr<redis::Client> client, std::string key_prefix)
      : name_(std::move(name)), client_(std::move(client)), key_prefix_(std::move(key_prefix)) {}

  const std::shared_ptr<redis::Client>& client() const { return client_; }
  // Every key this resource's users write starts with it.
  const std::string& key_prefix() const { return key_prefix_; }
  // "redis shared (127.0.0.1:6379)": how logs and errors name it.
  std::string description() const {
    return "redis " + name_ + " (" + client_->endpoint().name() + ")";
  }

 private:
  std::string name_;
  std::shared_ptr<redis::Client> client_;
  std::string key_prefix_;
};

}  // namespace chatflow
