// redis: see redis.h. The resource checks Redis once at start: unreachable, it logs so and
// starts anyway, and each user follows its own policy (a rate_limit with on_error: fail_closed
// refuses to start; caches start empty and miss; hot session turns come from the durable store).
#include "stages/redis.h"

#include <cstdio>

#include "framework/api/registry.h"

namespace chatflow {
namespace {

struct RedisConfig {
  std::string url;
  int64_t pool_size = 16;
  int64_t connect_timeout_ms = 250;
  int64_t command_timeout_ms = 250;
  std::string key_prefix = "chatflow:";
};

ResourceTypeInfo redis_resource_type() {
  ResourceTypeBuilder<RedisConfig> type(
      "redis",
      "A Redis server replicas share state through (rate limits, cache entries, hot session "
      "turns): pooled connections with connect and command timeouts.");
  type.config()
      .key("url", &RedisConfig::url,
           "redis://[user:password@]host[:port][/db] or unix:///path/to/socket[?db=N], e.g. "
           "${CHATFLOW_REDIS_URL}")
      .required();
  type.config()
      .key("pool_size", &RedisConfig::pool_size, "connections kept open at most")
      .range(1, 1024);
  type.config()
      .key("connect_timeout_ms", &RedisConfig::connect_timeout_ms,
           "how long opening a connection may take")
      .range(1, 60000);
  type.config()
      .key("command_timeout_ms", &RedisConfig::command_timeout_ms,
           "how long one reply (or a free connection) may take")
      .range(1, 60000);
  type.config().key("key_prefix", &RedisConfig::key_prefix,
                    "starts every key written (several deployments can share one Redis)");
  type.create([](const RedisConfig& config, ResourceContext& context) -> std::shared_ptr<Resource> {
    redis::Endpoint endpoint;
    try {
      endpoint = redis::parse_url(config.url);
    } catch (const std::invalid_argument& error) {
      throw ConfigError(error.what());
    }
    redis::ClientOptions options;
    options.pool_size = static_cast<size_t>(config.pool_size);
    options.connect_timeout = std::chrono::milliseconds(config.connect_timeout_ms);
    options.command_timeout = std::chrono::milliseconds(config.command_timeout_ms);
    auto client = std::make_shared<redis::Client>(endpoint, options);
    auto resource =
        std::make_shared<RedisResource>(context.resource_name(), client, config.key_prefix);
    std::string error;
    if (!client->ping(&error)) {
      std::fprintf(stderr,
                   "chatflow: %s is unreachable at start (%s); what needs it follows its "
                   "on_error until it answers\n",
                   resource->description().c_str(), error.c_str());
    }
    return resource;
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(redis_resource_type);

}  // namespace
}  // namespace chatflow
