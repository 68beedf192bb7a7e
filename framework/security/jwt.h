// JSON Web Tokens (RFC 7519) signed with HS256 or RS256: signature, expiry, not-before, issuer
// and audience checked; the caller's tenant, user and roles read from configured claims.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "framework/api/request.h"

namespace chatflow::security {

struct JwtSettings {
  std::string algorithm;       // "HS256" or "RS256"; a token must name exactly this one
  std::string secret;          // HS256
  std::string public_key_pem;  // RS256
  std::string issuer;          // when set, `iss` must equal it
  std::string audience;        // when set, `aud` (a string or a list) must hold it
  std::string tenant_claim = "tenant";
  std::string user_claim = "sub";
  std::string roles_claim = "roles";
  int64_t leeway_s = 30;  // clock skew allowed for exp and nbf
};

// Why a token was refused, in words for the client.
class JwtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether `token` looks like a JWT (three base64url parts) rather than an API key.
bool looks_like_jwt(std::string_view token);

// The identity a valid token carries; throws JwtError otherwise. `now` is Unix seconds.
Identity verify_jwt(std::string_view token, const JwtSettings& settings, int64_t now);

}  // namespace chatflow::security
