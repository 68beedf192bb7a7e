// auth: establishes who is calling. An API key (`Authorization: Bearer <key>` or `x-api-key`)
// is matched against the SHA-256 hashes of a keys file; a JWT (HS256 or RS256) is verified
// against the configured secret or public key. The identity (tenant, user, roles, per-key
// limits) is then on the request for every later stage, the prefix-cache salt and the logs.
// A role may be limited to some models. The stage is also the server's Authenticator for the
// routes outside the pipeline.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <sys/stat.h>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/security/jwt.h"
#include "framework/security/key_store.h"

namespace chatflow {
namespace {

struct JwtConfig {
  std::string algorithm;
  std::string secret;
  std::string public_key_file;
  std::string issuer;
  std::string audience;
  std::string tenant_claim = "tenant";
  std::string user_claim = "sub";
  std::string roles_claim = "roles";
  int leeway_s = 30;
};

struct AuthConfig {
  std::string keys_file;
  bool create_keys_file = false;
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

// The keys file as last read, re-read when it changes (keys added or revoked while serving).
class KeysFile {
 public:
  explicit KeysFile(std::string path) : path_(std::move(path)) { reload_or_throw(); }

  std::shared_ptr<const security::KeyStore> current() {
    std::lock_guard lock(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (now - last_check_ >= std::chrono::seconds(1)) {
      last_check_ = now;
      if (modified() != modified_) {
        Diagnostics diagnostics;
        int64_t version = modified();
        if (auto store = security::KeyStore::load(path_, diagnostics)) {
          store_ = std::make_shared<const security::KeyStore>(std::move(*store));
        } else {
          std::cerr << "chatflow: keeping the previous keys; " << path_ << " has errors:\n"
                    << diagnostics.to_string();
        }
        // Said once per change of the file, not every second until it is mended.
        modified_ = version;
      }
    }
    return store_;
  }

 private:
  int64_t modified() const {
    struct stat info {};
    if (::stat(path_.c_str(), &info) != 0) return -1;
    return static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
  }
  void reload_or_throw() {
    Diagnostics diagnostics;
    auto store = security::KeyStore::load(path_, diagnostics);
    if (!store) throw ConfigError("the keys file has errors:\n" + diagnostics.to_string());
    store_ = std::make_shared<const security::KeyStore>(std::move(*store));
    modified_ = modified();
  }

  std::string path_;
  std::mutex mutex_;
  std::shared_ptr<const security::KeyStore> store_;
  int64_t modified_ = -1;
  std::chrono::steady_clock::time_point last_check_ = std::chrono::steady_clock::now();
};

class AuthStage final : public RequestStage, public Authenticator {
 public:
  AuthStage(const AuthConfig& config, std::unique_ptr<KeysFile> keys,
            std::optional<security::JwtSettings> jwt, std::optional<std::string> development_key)
      : config_(config),
        keys_(std::move(keys)),
        jwt_(std::move(jwt)),
        development_key_(std::move(development_key)) {
    for (const auto& [role, models] : config.model_access) {
      std::istringstream words(models);
      std::string model;
      while (words >> model)
        access_[role].push_back(model);
    }
  }

  Route process(Request& request, StageIo&) override {
    request.identity = authenticate(request.headers);
    if (!access_.empty() && !may_use(request.identity, request.model)) {
      throw RequestFailure(
          RequestError{403, "permission_error",
                       "your role does not give access to the model '" + request.model + "'",
                       "model_not_allowed", "model"});
    }
    return Route::to(0);
  }

  Identity authenticate(const HeaderFields& headers) const override {
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
    if (jwt_ && security::looks_like_jwt(credential)) {
      try {
        return security::verify_jwt(credential, *jwt_, unix_now());
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

  bool is_public(std::string_view path) const override {
    for (const auto& open : config_.public_paths) {
      if (open == path) return true;
    }
    return false;
  }

  std::optional<std::string> new_development_key() const override { return development_key_; }

 private:
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
  std::unique_ptr<KeysFile> keys_;
  std::optional<security::JwtSettings> jwt_;
  std::optional<std::string> development_key_;
  std::map<std::string, std::vector<std::string>> access_;
};

std::unique_ptr<Stage> create_auth(const AuthConfig& config, StageContext&) {
  if (config.keys_file.empty() && config.jwt.algorithm.empty())
    throw ConfigError("set 'keys_file', 'jwt', or both");
  std::optional<std::string> development_key;
  std::unique_ptr<KeysFile> keys;
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
    keys = std::make_unique<KeysFile>(config.keys_file);
  }
  std::optional<security::JwtSettings> jwt;
  if (!config.jwt.algorithm.empty()) {
    security::JwtSettings settings;
    settings.algorithm = config.jwt.algorithm;
    settings.issuer = config.jwt.issuer;
    settings.audience = config.jwt.audience;
    settings.tenant_claim = config.jwt.tenant_claim;
    settings.user_claim = config.jwt.user_claim;
    settings.roles_claim = config.jwt.roles_claim;
    settings.leeway_s = config.jwt.leeway_s;
    if (settings.algorithm == "HS256") {
      if (config.jwt.secret.size() < 32)
        throw ConfigError("jwt.secret must be at least 32 bytes for HS256");
      settings.secret = config.jwt.secret;
    } else {
      std::ifstream file(config.jwt.public_key_file);
      if (config.jwt.public_key_file.empty() || !file)
        throw ConfigError("RS256 needs jwt.public_key_file, a readable PEM public key");
      std::stringstream text;
      text << file.rdbuf();
      settings.public_key_pem = text.str();
      if (settings.public_key_pem.find("BEGIN PUBLIC KEY") == std::string::npos)
        throw ConfigError("jwt.public_key_file is not a PEM public key");
    }
    jwt = std::move(settings);
  }
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
  jwt.key("algorithm", &JwtConfig::algorithm, "HS256 or RS256; empty: JWTs are not accepted")
      .choices({"", "HS256", "RS256"});
  jwt.key("secret", &JwtConfig::secret, "HS256 shared secret (use ${ENV_VAR})");
  jwt.key("public_key_file", &JwtConfig::public_key_file, "RS256 PEM public key");
  jwt.key("issuer", &JwtConfig::issuer, "required 'iss', when set");
  jwt.key("audience", &JwtConfig::audience, "required in 'aud', when set");
  jwt.key("tenant_claim", &JwtConfig::tenant_claim, "claim naming the tenant");
  jwt.key("user_claim", &JwtConfig::user_claim, "claim naming the user");
  jwt.key("roles_claim", &JwtConfig::roles_claim, "claim listing roles");
  jwt.key("leeway_s", &JwtConfig::leeway_s, "clock skew allowed for exp and nbf").range(0, 3600);
  type.config().key("keys_file", &AuthConfig::keys_file,
                    "YAML file of API-key hashes (`chatflow keys add`)");
  type.config().key("create_keys_file", &AuthConfig::create_keys_file,
                    "when the keys file is missing, create it with a development key");
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
