// auth: establishes who is calling. An API key (`Authorization: Bearer <key>` or `x-api-key`)
// is matched against the SHA-256 hashes of a keys file; a JWT (HS256, RS256 or ES256) is
// verified against the configured secret or public key, or against an identity provider's key
// set (`jwks_url`, `jwks_file`), the key chosen by the token's `kid` and the algorithm by the
// key. The identity (tenant, user, roles, per-key
// limits) is then on the request for every later stage, the prefix-cache salt and the logs.
// A role may be limited to some models. The stage is also the server's Authenticator for the
// routes outside the pipeline.
//
// Nothing here waits on a thread. A token whose kid the key set does not hold may ask for the
// set to be fetched again (security/jwks_cache.h): the server's header check then lets the
// request go on to this stage (when it is the pipeline's first), which waits for that fetch
// deferred, holding no pipeline thread, and decides once it has ended. Routes outside the
// pipeline answer such a token 401 at once (the fetch goes on, so a retry finds the new key).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <variant>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/limits/side_request_gate.h"
#include "framework/net/tls_client.h"
#include "framework/security/jwks_cache.h"
#include "framework/security/jwt.h"
#include "framework/security/key_store.h"
#include "framework/security/keys_file.h"
#include "framework/security/loopback.h"
#include "framework/tools/http_post.h"

namespace chatflow {
namespace {

struct JwtConfig {
  std::string algorithm;
  std::string secret;
  std::string public_key_file;
  std::string jwks_url;
  std::string jwks_file;
  std::string jwks_ca_file;
  double jwks_refresh_s = 300;
  double jwks_min_refresh_s = 30;
  int jwks_timeout_ms = 2000;
  std::string issuer;
  std::string audience;
  bool allow_any_audience = false;
  std::string tenant_claim = "tenant";
  std::string user_claim = "sub";
  std::string roles_claim = "roles";
  int leeway_s = 30;
};

struct AuthConfig {
  std::string keys_file;
  bool create_keys_file = false;
  bool allow_empty_keys_file = false;
  JwtConfig jwt;
  std::map<std::string, std::string> model_access;
  std::vector<std::string> public_paths = {"/health"};
};

[[noreturn]] void unauthenticated(const std::string& message, const std::string& code) {
  throw RequestFailure(RequestError{401, "authentication_error", message, code, {}});
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A token whose key is not in the key set yet, and the fetch of the set whose end decides.
struct AwaitedKey {
  std::string token;
  int64_t fetch = 0;
};

// How JWTs are checked: the claims the settings ask for, with the one configured key or the key
// a provider's key set holds for the token's kid.
struct JwtVerifier {
  security::JwtSettings settings;
  std::optional<security::VerificationKey> key;
  std::unique_ptr<security::JwksCache> key_set;

  // The identity, or the fetch an unknown kid waits for; never waits. Throws JwtError.
  std::variant<Identity, AwaitedKey> verify(const std::string& token,
                                            security::JwksCache::Asker asker) const {
    if (!key_set) return security::verify_jwt(token, *key, settings, unix_now());
    security::JwksCache::Lookup found = key_set->lookup(security::read_jwt_header(token), asker);
    if (!found.key) return AwaitedKey{token, found.awaited_fetch};
    return security::verify_jwt(token, *found.key, settings, unix_now());
  }

  // With the key set as it is now (once the awaited fetch has ended). Throws JwtError.
  Identity verify_now(const std::string& token) const {
    security::VerificationKey chosen = key_set->current_key(security::read_jwt_header(token));
    return security::verify_jwt(token, chosen, settings, unix_now());
  }
};

// The credential in the header fields: `Authorization: Bearer` wins over x-api-key.
std::string credential_of(const HeaderFields& headers) {
  std::string credential;
  bool from_authorization = false;
  for (const auto& [name, value] : headers) {
    if (name == "authorization") {
      std::string_view text = value;
      if (text.size() < 7 || lowercase(text.substr(0, 7)) != "bearer ") {
        unauthenticated("the Authorization header must be 'Bearer <key>'", "invalid_api_key");
      }
      text.remove_prefix(7);
      while (!text.empty() && text.front() == ' ')
        text.remove_prefix(1);
      credential = std::string(text);
      from_authorization = true;
    } else if (name == "x-api-key" && !from_authorization) {
      credential = value;
    }
  }
  if (credential.empty()) {
    unauthenticated("no API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                    "missing_api_key");
  }
  return credential;
}

class AuthStage final : public RequestStage, public Authenticator, public limits::SideRequestGate {
 public:
  AuthStage(const AuthConfig& config, std::unique_ptr<security::KeysFile> keys,
            std::unique_ptr<JwtVerifier> jwt, std::optional<std::string> development_key)
      : config_(config),
        keys_(std::move(keys)),
        development_key_(std::move(development_key)),
        jwt_(std::move(jwt)) {
    for (const auto& [role, models] : config.model_access) {
      std::istringstream words(models);
      std::string model;
      while (words >> model)
        access_[role].push_back(model);
    }
  }

  Route process(Request& request, StageIo& io) override {
    auto decision = decide(request.headers, security::JwksCache::Asker::returning_request);
    if (auto* identity = std::get_if<Identity>(&decision)) {
      admit(request, std::move(*identity));
      return Route::to(0);
    }
    // The token's kid asked for the key set again: wait for that fetch deferred, holding no
    // pipeline thread (the graph's arena may have a single worker).
    auto continuation = std::make_shared<Continuation>(io.defer());
    jwt_->key_set->when_fetched(std::get<AwaitedKey>(decision).fetch,
                                [this, continuation, token = std::get<AwaitedKey>(decision).token] {
                                  decide_after_fetch(*continuation, token);
                                });
    return Route::deferred();
  }

  Identity authenticate(const HeaderFields& headers) const override {
    auto decision = decide(headers, security::JwksCache::Asker::new_request);
    if (auto* identity = std::get_if<Identity>(&decision)) return std::move(*identity);
    unauthenticated(
        "invalid token: the token's key ('kid') is not in the key set yet; the set is being "
        "fetched again from the identity provider: retry in a moment",
        "invalid_token");
  }

  std::optional<Identity> authenticate_or_defer(const HeaderFields& headers) const override {
    auto decision = decide(headers, security::JwksCache::Asker::new_request);
    if (auto* identity = std::get_if<Identity>(&decision)) return std::move(*identity);
    return std::nullopt;
  }

  bool is_public(std::string_view path) const override {
    for (const auto& open : config_.public_paths) {
      if (open == path) return true;
    }
    return false;
  }

  std::optional<std::string> new_development_key() const override { return development_key_; }

 private:
  // The caller, or the key set's fetch that decides; never waits. Throws RequestFailure (401).
  std::variant<Identity, AwaitedKey> decide(const HeaderFields& headers,
                                            security::JwksCache::Asker asker) const {
    std::string credential = credential_of(headers);
    if (jwt_ && security::looks_like_jwt(credential)) {
      try {
        return jwt_->verify(credential, asker);
      } catch (const security::JwtError& error) {
        unauthenticated(std::string("invalid token: ") + error.what(), "invalid_token");
      }
    }
    if (keys_) {
      auto store = keys_->current();
      if (const security::ApiKeyRecord* record = store->match(credential)) {
        Identity identity;
        identity.tenant = record->tenant;
        identity.user = record->user;
        identity.key_id = record->id;
        identity.roles = record->roles;
        identity.limits = record->limits;
        return identity;
      }
    }
    unauthenticated("incorrect API key provided", "invalid_api_key");
  }

  // The identity on the request, once the caller may do what it asks. Throws RequestFailure.
  void admit(Request& request, Identity identity) const {
    request.identity = std::move(identity);
    if (!access_.empty() && !may_use(request.identity, request.model)) {
      throw RequestFailure(
          RequestError{403, "permission_error",
                       "your role does not give access to the model '" + request.model + "'",
                       "model_not_allowed", "model"});
    }
    // Sessions belong to a user or a key; a caller with neither would share "" with every other.
    if (!request.session_id.empty() && request.identity.owner().empty()) {
      throw RequestFailure(
          RequestError{403, "permission_error",
                       "your credential names no user, so it cannot keep a session: send the "
                       "request without session_id (or x-session-id), or use a token with a user "
                       "claim or an API key",
                       "no_session_owner", "session_id"});
    }
  }

  // On the key set's thread, once the fetch the token's kid asked for has ended.
  void decide_after_fetch(Continuation& continuation, const std::string& token) const {
    try {
      Identity identity;
      try {
        identity = jwt_->verify_now(token);
      } catch (const security::JwtError& error) {
        unauthenticated(std::string("invalid token: ") + error.what(), "invalid_token");
      }
      admit(continuation.request(), std::move(identity));
    } catch (const RequestFailure& failure) {
      return continuation.fail(failure.error());
    } catch (const std::exception& error) {
      return continuation.fail(RequestError{500,
                                            "server_error",
                                            std::string("authentication failed: ") + error.what(),
                                            "stage_failed",
                                            {}});
    }
    continuation.resume(0);
  }

  // An embeddings or rerank call, its caller already authenticated by the server: the embedder
  // it names is a model the caller's role must give access to.
  void admit_side_request(Request& request) override {
    if (!access_.empty() && !may_use(request.identity, request.model)) {
      throw RequestFailure(
          RequestError{403, "permission_error",
                       "your role does not give access to the model '" + request.model + "'",
                       "model_not_allowed", "model"});
    }
  }

  bool may_use(const Identity& identity, const std::string& model) const {
    for (const auto& role : identity.roles) {
      auto allowed = access_.find(role);
      if (allowed == access_.end()) continue;
      for (const auto& entry : allowed->second) {
        if (entry == "*" || entry == model) return true;
      }
    }
    return false;
  }

  AuthConfig config_;
  std::unique_ptr<security::KeysFile> keys_;
  std::optional<std::string> development_key_;
  std::map<std::string, std::vector<std::string>> access_;
  // Last, so destroyed first: a key set calls back what still waits for it as it goes, and the
  // callbacks use the members above.
  std::unique_ptr<JwtVerifier> jwt_;
};

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot read '" + path + "'");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

using FetchKeySet = std::function<std::string(security::JwksCache::Clock::time_point)>;

// GETs the key set with a deadline. Plain http only to this host: elsewhere, anyone on the way
// could hand out keys of their own.
FetchKeySet key_set_fetcher(const std::string& url, const std::string& ca_file) {
  std::string error;
  auto endpoint = tools::parse_http_url(url, error);
  if (!endpoint) throw ConfigError("jwt.jwks_url: " + error);
  if (!endpoint->tls && !security::is_loopback_host(endpoint->host)) {
    throw ConfigError("jwt.jwks_url: '" + url +
                      "' is plain http to another host, where anyone on the way could hand out "
                      "keys of their own; use https (jwks_ca_file for a private CA), or http "
                      "only to a loopback address");
  }
  std::shared_ptr<net::TlsClientContext> tls;
  if (!ca_file.empty()) {
    if (!endpoint->tls) throw ConfigError("jwt.jwks_ca_file is for an https jwks_url");
    try {
      net::TlsClientOptions options;
      options.ca_file = ca_file;
      tls = std::make_shared<net::TlsClientContext>(options);
    } catch (const net::TlsError& failure) {
      throw ConfigError(std::string("jwt.jwks_ca_file: ") + failure.what());
    }
  }
  auto where = std::make_shared<const tools::HttpEndpoint>(*endpoint);
  return [where, tls](security::JwksCache::Clock::time_point deadline) {
    tools::HttpPost request;
    request.method = "GET";
    request.endpoint = where.get();
    request.headers = {{"accept", "application/json"}};
    request.deadline = deadline;
    request.max_body_bytes = 1 << 20;
    request.tls = tls.get();
    tools::HttpOutcome outcome = tools::post(request);
    if (outcome.kind != tools::HttpOutcome::Kind::response) throw std::runtime_error(outcome.error);
    if (outcome.status != 200)
      throw std::runtime_error("it answered HTTP " + std::to_string(outcome.status));
    return outcome.body;
  };
}

std::unique_ptr<security::JwksCache> make_key_set(const JwtConfig& config) {
  if (!config.jwks_url.empty() && !config.jwks_file.empty())
    throw ConfigError("set one of jwt.jwks_url and jwt.jwks_file, not both");
  if (!config.secret.empty() || !config.public_key_file.empty()) {
    throw ConfigError(
        "jwt.secret and jwt.public_key_file cannot be used with a key set "
        "(jwks_url, jwks_file): the set names the keys");
  }
  if (config.algorithm == "HS256") {
    throw ConfigError(
        "a key set holds public keys: with jwks_url or jwks_file, jwt.algorithm "
        "is RS256, ES256, or empty (each key's own)");
  }
  if (!config.jwks_ca_file.empty() && config.jwks_url.empty())
    throw ConfigError("jwt.jwks_ca_file is for jwks_url");
  // A provider's keys sign the tokens of every application it serves: without an audience to
  // check, a token issued to any of them would be taken here, roles and all.
  if (config.audience.empty() && !config.allow_any_audience) {
    throw ConfigError(
        "jwt.audience is required with a key set (jwks_url, jwks_file): without it a token the "
        "provider issued to any other application is accepted here; set it to the 'aud' the "
        "provider puts in chatflow's tokens (or, for a key set that signs chatflow's tokens "
        "alone, set jwt.issuer and jwt.allow_any_audience: true)");
  }
  if (config.allow_any_audience && !config.audience.empty()) {
    throw ConfigError("jwt.allow_any_audience: true and jwt.audience '" + config.audience +
                      "' contradict each other; keep one");
  }
  if (config.allow_any_audience && config.issuer.empty()) {
    throw ConfigError(
        "jwt.allow_any_audience needs jwt.issuer: tokens of any audience are taken only from "
        "the one issuer named");
  }
  security::JwksCache::Settings settings;
  settings.algorithm = config.algorithm;
  auto milliseconds = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  settings.refresh_interval = milliseconds(config.jwks_refresh_s);
  settings.min_refresh_interval = milliseconds(config.jwks_min_refresh_s);
  settings.fetch_timeout = std::chrono::milliseconds(config.jwks_timeout_ms);
  if (!config.jwks_file.empty()) {
    settings.source = config.jwks_file;
    settings.fetch = [path = config.jwks_file](auto) { return read_file(path); };
  } else {
    settings.source = config.jwks_url;
    settings.fetch = key_set_fetcher(config.jwks_url, config.jwks_ca_file);
  }
  try {
    return std::make_unique<security::JwksCache>(std::move(settings));
  } catch (const std::runtime_error& error) {
    throw ConfigError(error.what());
  }
}

std::unique_ptr<JwtVerifier> make_jwt_verifier(const JwtConfig& config) {
  bool key_set = !config.jwks_url.empty() || !config.jwks_file.empty();
  if (config.algorithm.empty() && !key_set) return nullptr;
  if (config.allow_any_audience && !key_set) {
    throw ConfigError(
        "jwt.allow_any_audience is for a key set (jwks_url, jwks_file); with one key of its "
        "own, jwt.audience is already optional");
  }
  auto verifier = std::make_unique<JwtVerifier>();
  security::JwtSettings& settings = verifier->settings;
  settings.algorithm = config.algorithm;
  settings.issuer = config.issuer;
  settings.audience = config.audience;
  settings.tenant_claim = config.tenant_claim;
  settings.user_claim = config.user_claim;
  settings.roles_claim = config.roles_claim;
  settings.leeway_s = config.leeway_s;
  if (key_set) {
    verifier->key_set = make_key_set(config);
    return verifier;
  }
  if (settings.algorithm == "HS256") {
    if (config.secret.size() < 32)
      throw ConfigError("jwt.secret must be at least 32 bytes for HS256");
    settings.secret = config.secret;
  } else {
    std::ifstream file(config.public_key_file);
    if (config.public_key_file.empty() || !file) {
      throw ConfigError(settings.algorithm +
                        " needs jwt.public_key_file, a readable PEM public key (or a key set: "
                        "jwks_url, jwks_file)");
    }
    std::stringstream text;
    text << file.rdbuf();
    settings.public_key_pem = text.str();
    if (settings.public_key_pem.find("BEGIN PUBLIC KEY") == std::string::npos)
      throw ConfigError("jwt.public_key_file is not a PEM public key");
  }
  try {
    verifier->key = security::configured_key(settings);
  } catch (const security::JwtError& error) {
    throw ConfigError(std::string("jwt.public_key_file: ") + error.what());
  }
  return verifier;
}

std::unique_ptr<Stage> create_auth(const AuthConfig& config, StageContext&) {
  bool takes_jwts = !config.jwt.algorithm.empty() || !config.jwt.jwks_url.empty() ||
                    !config.jwt.jwks_file.empty();
  if (config.keys_file.empty() && !takes_jwts) throw ConfigError("set 'keys_file', 'jwt', or both");
  std::optional<std::string> development_key;
  std::unique_ptr<security::KeysFile> keys;
  if (!config.keys_file.empty()) {
    std::error_code error;
    if (!std::filesystem::exists(config.keys_file, error)) {
      if (!config.create_keys_file) {
        throw ConfigError("keys file '" + config.keys_file +
                          "' does not exist; create a key with `chatflow keys add --tenant T "
                          "--keys-file " +
                          config.keys_file + "`");
      }
      // First start: one key for the developer, so the quick start works in one step.
      security::KeyStore store;
      development_key = store.add("dev", "dev", {"admin"}, {});
      store.save(config.keys_file);
      std::cerr << "chatflow: created " << config.keys_file
                << " with a development key (tenant 'dev', role admin). It is shown only now:\n"
                << "  " << *development_key << "\n";
    }
    try {
      security::KeysFile::Options options;
      options.allow_empty = config.allow_empty_keys_file;
      keys = std::make_unique<security::KeysFile>(config.keys_file, options);
    } catch (const security::KeysFileError& error) {
      throw ConfigError(error.what());
    }
  }
  std::unique_ptr<JwtVerifier> jwt = make_jwt_verifier(config.jwt);
  return std::make_unique<AuthStage>(config, std::move(keys), std::move(jwt),
                                     std::move(development_key));
}

StageTypeInfo auth_stage_type() {
  StageTypeBuilder<AuthConfig> type(
      "auth", StageKind::request,
      "Authenticates API keys (SHA-256 hashed in a keys file) or JWTs; 401 without, 403 for a "
      "model the caller's roles may not use.");
  type.port("out", PortKind::request, "authenticated requests, identity set");
  SchemaBuilder<JwtConfig> jwt;
  jwt.key("algorithm", &JwtConfig::algorithm,
          "HS256, RS256 or ES256; empty: JWTs are not accepted, unless a key set is given (then "
          "each key's own)")
      .choices({"", "HS256", "RS256", "ES256"});
  jwt.key("secret", &JwtConfig::secret, "HS256 shared secret (use ${ENV_VAR})");
  jwt.key("public_key_file", &JwtConfig::public_key_file, "RS256 or ES256 PEM public key");
  jwt.key("jwks_url", &JwtConfig::jwks_url,
          "an identity provider's JSON Web Key Set (https; http only to loopback): keys chosen "
          "by the token's kid");
  jwt.key("jwks_file", &JwtConfig::jwks_file, "a JSON Web Key Set in a file, instead of a URL");
  jwt.key("jwks_ca_file", &JwtConfig::jwks_ca_file,
          "PEM CA certificates trusted for jwks_url; empty: the system's");
  jwt.key("jwks_refresh_s", &JwtConfig::jwks_refresh_s,
          "fetch the key set again this often; 0: only at start and on unknown kids")
      .range(0, 86400);
  jwt.key("jwks_min_refresh_s", &JwtConfig::jwks_min_refresh_s,
          "unknown kids fetch the set again at most once per this many seconds, and only when "
          "no fetch is under way")
      .range(1, 3600);
  jwt.key("jwks_timeout_ms", &JwtConfig::jwks_timeout_ms,
          "bound on one fetch of the key set (a request whose unknown kid asked for it waits "
          "for its end, holding no thread)")
      .range(50, 60000);
  jwt.key("issuer", &JwtConfig::issuer, "required 'iss', when set");
  jwt.key("audience", &JwtConfig::audience,
          "required in 'aud', when set; must be set with a key set (jwks_url, jwks_file) unless "
          "allow_any_audience");
  jwt.key("allow_any_audience", &JwtConfig::allow_any_audience,
          "with a key set that signs chatflow's tokens alone: no audience check (needs issuer)");
  jwt.key("tenant_claim", &JwtConfig::tenant_claim, "claim naming the tenant");
  jwt.key("user_claim", &JwtConfig::user_claim,
          "claim naming the user, required in every token (a string or an integer); empty: "
          "tokens name no user, and such callers cannot keep sessions");
  jwt.key("roles_claim", &JwtConfig::roles_claim, "claim listing roles");
  jwt.key("leeway_s", &JwtConfig::leeway_s, "clock skew allowed for exp and nbf").range(0, 3600);
  type.config().key("keys_file", &AuthConfig::keys_file,
                    "YAML file of API-key hashes (`chatflow keys add`)");
  type.config().key("create_keys_file", &AuthConfig::create_keys_file,
                    "when the keys file is missing, create it with a development key");
  type.config().key("allow_empty_keys_file", &AuthConfig::allow_empty_keys_file,
                    "start with a keys file that holds no keys (keys added while serving, or "
                    "JWTs only); a file that held keys is never taken emptied while serving");
  type.config().object("jwt", &AuthConfig::jwt, jwt, "JSON Web Token verification");
  type.config().key("model_access", &AuthConfig::model_access,
                    "role -> space-separated model ids it may use ('*': all); empty: no limits");
  type.config().key("public_paths", &AuthConfig::public_paths,
                    "server routes open without credentials");
  type.create(create_auth);
  return type.build();
}

CHATFLOW_REGISTER_TYPE(auth_stage_type);

}  // namespace
}  // namespace chatflow
