// redis: see redis.h. The resource checks Redis once at start: unreachable, it logs so and
// starts anyway, and each user follows its own policy (a rate_limit with on_error: fail_closed
// refuses to start; caches start empty and miss; hot session turns come from the durable store).
#include "stages/redis.h"

#include <cstdio>
#include <utility>

#include "framework/api/registry.h"

namespace chatflow {
namespace {

// For rediss:// URLs; verification of the certificate and its name is always on.
struct RedisTlsConfig {
  std::string ca_file;
  std::string certificate_file;
  std::string key_file;
  std::string server_name;
};

struct RedisConfig {
  std::string url;
  int64_t pool_size = 16;
  int64_t connect_timeout_ms = 250;
  int64_t command_timeout_ms = 250;
  std::string key_prefix = "chatflow:";
  RedisTlsConfig tls;
};

// The TLS keys apply to rediss:// alone: set for a plain URL, they would promise encryption the
// connection does not have.
void check_tls_keys(const RedisConfig& config, const redis::Endpoint& endpoint) {
  if (endpoint.tls) return;
  const std::pair<const char*, const std::string*> keys[] = {
      {"ca_file", &config.tls.ca_file},
      {"certificate_file", &config.tls.certificate_file},
      {"key_file", &config.tls.key_file},
      {"server_name", &config.tls.server_name}};
  for (const auto& [key, value] : keys) {
    if (!value->empty()) {
      throw ConfigError(std::string("tls.") + key +
                        " is set, but the url is not rediss://: the connection would not be "
                        "encrypted (write rediss://host:port)");
    }
  }
}

ResourceTypeInfo redis_resource_type() {
  ResourceTypeBuilder<RedisConfig> type(
      "redis",
      "A Redis server replicas share state through (rate limits, cache entries, hot session "
      "turns): pooled connections with connect and command timeouts.");
  type.config()
      .key("url", &RedisConfig::url,
           "redis://[user:password@]host[:port][/db], rediss://... for TLS, or "
           "unix:///path/to/socket[?db=N], e.g. ${CHATFLOW_REDIS_URL}")
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
  SchemaBuilder<RedisTlsConfig> tls;
  tls.key("ca_file", &RedisTlsConfig::ca_file,
          "PEM file of the certificate authorities to trust; empty: the system's");
  tls.key("certificate_file", &RedisTlsConfig::certificate_file,
          "PEM client certificate, for a Redis that requires one (tls-auth-clients)");
  tls.key("key_file", &RedisTlsConfig::key_file, "the client certificate's unencrypted PEM key");
  tls.key("server_name", &RedisTlsConfig::server_name,
          "the name the server's certificate must carry (and SNI); empty: the URL's host");
  type.config().object("tls", &RedisConfig::tls, tls,
                       "rediss:// only: certificates are always verified, chain and name");
  type.create([](const RedisConfig& config, ResourceContext& context) -> std::shared_ptr<Resource> {
    redis::Endpoint endpoint;
    try {
      endpoint = redis::parse_url(config.url);
    } catch (const std::invalid_argument& error) {
      throw ConfigError(error.what());
    }
    check_tls_keys(config, endpoint);
    endpoint.server_name = config.tls.server_name;
    redis::ClientOptions options;
    options.pool_size = static_cast<size_t>(config.pool_size);
    options.connect_timeout = std::chrono::milliseconds(config.connect_timeout_ms);
    options.command_timeout = std::chrono::milliseconds(config.command_timeout_ms);
    options.tls.ca_file = config.tls.ca_file;
    options.tls.certificate_file = config.tls.certificate_file;
    options.tls.key_file = config.tls.key_file;
    std::shared_ptr<redis::Client> client;
    try {
      client = std::make_shared<redis::Client>(endpoint, options);
    } catch (const std::invalid_argument& error) {
      throw ConfigError(std::string("tls.") + error.what());
    }
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
