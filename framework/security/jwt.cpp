#include "framework/security/jwt.h"

#include <algorithm>
#include <cmath>

#include <boost/json.hpp>

#include "framework/security/crypto.h"

namespace chatflow::security {
namespace json = boost::json;
namespace {

json::object decode_part(std::string_view part, const char* what) {
  auto bytes = base64url_decode(part);
  if (!bytes) throw JwtError(std::string("the token's ") + what + " is not base64url");
  std::error_code error;
  json::value value = json::parse(*bytes, error);
  if (error || !value.is_object())
    throw JwtError(std::string("the token's ") + what + " is not a JSON object");
  return value.get_object();
}

// NumericDates are clamped to +-2^40 s (about 35,000 years either side of 1970): a claim like
// 1e300 or 2^63 is then an ordinary far date, and adding the leeway cannot overflow.
constexpr int64_t kFarthestDate = int64_t{1} << 40;

// A NumericDate claim, or nullopt when absent; a claim of the wrong type is an error.
std::optional<int64_t> time_claim(const json::object& claims, const char* name) {
  const json::value* value = claims.if_contains(name);
  if (!value) return std::nullopt;
  if (value->is_int64()) return std::clamp(value->get_int64(), -kFarthestDate, kFarthestDate);
  if (value->is_uint64()) {
    return static_cast<int64_t>(std::min<uint64_t>(value->get_uint64(), kFarthestDate));
  }
  if (value->is_double()) {
    double seconds = value->get_double();
    if (std::isnan(seconds)) {
      throw JwtError(std::string("the token's '") + name + "' claim is not a number");
    }
    return static_cast<int64_t>(std::clamp(seconds, -static_cast<double>(kFarthestDate),
                                           static_cast<double>(kFarthestDate)));
  }
  throw JwtError(std::string("the token's '") + name + "' claim is not a number");
}

// The user a token names: sessions and history belong to it, so a token without one would share
// them with every other such token. A number (some providers' subject ids) is its decimal text.
std::string user_of(const json::object& claims, const std::string& name) {
  const json::value* user = claims.if_contains(name);
  if (!user || user->is_null())
    throw JwtError("the token has no '" + name + "' claim naming the user");
  std::string text;
  if (user->is_string()) {
    text = std::string(user->get_string());
  } else if (user->is_int64()) {
    text = std::to_string(user->get_int64());
  } else if (user->is_uint64()) {
    text = std::to_string(user->get_uint64());
  } else {
    throw JwtError("the token's '" + name + "' claim (the user) is not a string or an integer");
  }
  if (text.empty()) throw JwtError("the token's '" + name + "' claim (the user) is empty");
  return text;
}

}  // namespace

bool looks_like_jwt(std::string_view token) {
  return std::count(token.begin(), token.end(), '.') == 2;
}

namespace {

struct TokenParts {
  std::string_view header;
  std::string_view payload;
  std::string_view signature;
  std::string_view signed_part;  // header.payload
};

TokenParts split_token(std::string_view token) {
  size_t first = token.find('.');
  size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (first == std::string_view::npos || second == std::string_view::npos ||
      token.find('.', second + 1) != std::string_view::npos)
    throw JwtError("the token is not a JWT (header.payload.signature)");
  return {token.substr(0, first), token.substr(first + 1, second - first - 1),
          token.substr(second + 1), token.substr(0, second)};
}

JwtHeader header_of(const json::object& header) {
  JwtHeader result;
  const json::value* algorithm = header.if_contains("alg");
  if (!algorithm || !algorithm->is_string())
    throw JwtError("the token's header names no algorithm ('alg')");
  result.algorithm = std::string(algorithm->get_string());
  if (const json::value* key_id = header.if_contains("kid")) {
    if (!key_id->is_string()) throw JwtError("the token's 'kid' is not a string");
    result.key_id = std::string(key_id->get_string());
  }
  return result;
}

}  // namespace

JwtHeader read_jwt_header(std::string_view token) {
  return header_of(decode_part(split_token(token).header, "header"));
}

VerificationKey configured_key(const JwtSettings& settings) {
  VerificationKey key;
  key.algorithm = settings.algorithm;
  if (settings.algorithm == "HS256") {
    key.secret = settings.secret;
  } else {
    try {
      key.public_key = PublicKey::from_pem(settings.public_key_pem);
    } catch (const std::invalid_argument& error) {
      throw JwtError(std::string("the configured public key cannot be used: ") + error.what());
    }
    bool fits =
        (settings.algorithm == "RS256" && key.public_key->type() == PublicKey::Type::rsa) ||
        (settings.algorithm == "ES256" && key.public_key->type() == PublicKey::Type::ec_p256);
    if (!fits) throw JwtError("the configured public key is not a key for " + settings.algorithm);
  }
  return key;
}

Identity verify_jwt(std::string_view token, const JwtSettings& settings, int64_t now) {
  return verify_jwt(token, configured_key(settings), settings, now);
}

Identity verify_jwt(std::string_view token, const VerificationKey& key, const JwtSettings& settings,
                    int64_t now) {
  TokenParts parts = split_token(token);
  json::object header = decode_part(parts.header, "header");
  // The algorithm is the key's, never the token's: "none", or HS256 over an RSA key's public
  // text, must not get through.
  const json::value* algorithm = header.if_contains("alg");
  if (!algorithm || !algorithm->is_string() || algorithm->get_string() != key.algorithm) {
    throw JwtError("the token must be signed with " + key.algorithm);
  }
  auto signature = base64url_decode(parts.signature);
  if (!signature) throw JwtError("the token's signature is not base64url");
  bool valid = false;
  if (key.algorithm == "HS256") {
    valid = !key.secret.empty() &&
            constant_time_equal(hmac_sha256(key.secret, parts.signed_part), *signature);
  } else if (key.public_key) {
    bool fits = (key.algorithm == "RS256" && key.public_key->type() == PublicKey::Type::rsa) ||
                (key.algorithm == "ES256" && key.public_key->type() == PublicKey::Type::ec_p256);
    valid = fits && key.public_key->verify(parts.signed_part, *signature);
  }
  if (!valid) throw JwtError("the token's signature is not valid");
  std::string_view payload_part = parts.payload;

  json::object claims = decode_part(payload_part, "payload");
  auto expires = time_claim(claims, "exp");
  if (!expires) throw JwtError("the token has no 'exp' (expiry) claim");
  if (now > *expires + settings.leeway_s) throw JwtError("the token has expired");
  if (auto not_before = time_claim(claims, "nbf");
      not_before && now + settings.leeway_s < *not_before)
    throw JwtError("the token is not valid yet ('nbf')");
  if (!settings.issuer.empty()) {
    const json::value* issuer = claims.if_contains("iss");
    if (!issuer || !issuer->is_string() || issuer->get_string() != settings.issuer)
      throw JwtError("the token's issuer is not '" + settings.issuer + "'");
  }
  if (!settings.audience.empty()) {
    const json::value* audience = claims.if_contains("aud");
    bool match = false;
    if (audience && audience->is_string()) match = audience->get_string() == settings.audience;
    if (audience && audience->is_array()) {
      for (const auto& item : audience->get_array())
        match = match || (item.is_string() && item.get_string() == settings.audience);
    }
    if (!match) throw JwtError("the token is not meant for audience '" + settings.audience + "'");
  }
  Identity identity;
  const json::value* tenant = claims.if_contains(settings.tenant_claim);
  if (!tenant || !tenant->is_string() || tenant->get_string().empty())
    throw JwtError("the token has no '" + settings.tenant_claim + "' claim naming the tenant");
  identity.tenant = std::string(tenant->get_string());
  if (!settings.user_claim.empty()) identity.user = user_of(claims, settings.user_claim);
  if (const json::value* roles = claims.if_contains(settings.roles_claim)) {
    if (roles->is_array()) {
      for (const auto& role : roles->get_array()) {
        if (role.is_string()) identity.roles.emplace_back(role.get_string());
      }
    } else if (roles->is_string()) {
      std::string_view text = roles->get_string();
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find(' ', start);
        if (end == std::string_view::npos) end = text.size();
        if (end > start) identity.roles.emplace_back(text.substr(start, end - start));
        start = end + 1;
      }
    }
  }
  return identity;
}

}  // namespace chatflow::security
