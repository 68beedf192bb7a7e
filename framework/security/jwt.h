// JSON Web Tokens (RFC 7519) signed with HS256, RS256 or ES256: signature, expiry, not-before,
// issuer and audience checked; the caller's tenant, user and roles read from configured claims.
// The key decides the algorithm, never the token: a token naming another one ("none", or HS256
// over an RSA key's public text) is refused before its signature is looked at.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "framework/api/request.h"
#include "framework/security/crypto.h"

namespace chatflow::security {

struct JwtSettings {
  // The one configured key (without a key set): "HS256" or "RS256", which a token must name.
  std::string algorithm;
  std::string secret;          // HS256
  std::string public_key_pem;  // RS256
  std::string issuer;          // when set, `iss` must equal it
  std::string audience;        // when set, `aud` (a string or a list) must hold it
  std::string tenant_claim = "tenant";
  // Required in every token (a string, or an integer taken as its decimal text); empty: tokens
  // name no user, and such callers own no sessions.
  std::string user_claim = "sub";
  std::string roles_claim = "roles";
  int64_t leeway_s = 30;  // clock skew allowed for exp and nbf
};

// Why a token was refused, in words for the client.
class JwtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A key a token's signature is checked with, and the one algorithm it may be used with.
struct VerificationKey {
  std::string key_id;                           // the JSON Web Key's `kid`; empty when it has none
  std::string algorithm;                        // "HS256", "RS256" or "ES256"
  std::string secret;                           // HS256
  std::shared_ptr<const PublicKey> public_key;  // RS256 (RSA) or ES256 (EC P-256)
};

// What a token's header claims, read before anything is verified: which key it names (`kid`)
// and the algorithm it says it was signed with.
struct JwtHeader {
  std::string algorithm;
  std::optional<std::string> key_id;
};

// Throws JwtError when the token is not header.payload.signature with a JSON object header
// naming its algorithm.
JwtHeader read_jwt_header(std::string_view token);

// Whether `token` looks like a JWT (three base64url parts) rather than an API key.
bool looks_like_jwt(std::string_view token);

// The identity a valid token carries, its signature checked with `key` (whose algorithm the
// token must name); throws JwtError otherwise. `now` is Unix seconds.
Identity verify_jwt(std::string_view token, const VerificationKey& key, const JwtSettings& settings,
                    int64_t now);
// The same with the settings' own key (algorithm, secret, public_key_pem).
Identity verify_jwt(std::string_view token, const JwtSettings& settings, int64_t now);
// The settings' own key, made once; throws JwtError when it cannot be made.
VerificationKey configured_key(const JwtSettings& settings);

}  // namespace chatflow::security
