// The few cryptographic operations chatflow needs, on OpenSSL: hashes of API keys, HMAC and RSA
// signatures of JSON Web Tokens, random keys, and comparisons that take the same time whatever
// the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chatflow::security {

// SHA-256 of `data`, as 64 lower-case hex digits.
std::string sha256_hex(std::string_view data);

// HMAC-SHA256 of `data` under `key`, raw 32 bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);

// Whether `signature` is a valid RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signature of `data` under
// the PEM public key `public_key_pem`. Throws std::invalid_argument when the key cannot be read.
bool rs256_verify(std::string_view public_key_pem, std::string_view data,
                  std::string_view signature);

// `bytes` cryptographically random bytes as lower-case hex (2 * bytes digits).
std::string random_hex(size_t bytes);

// Equal in time independent of where the inputs differ (lengths are not secret).
bool constant_time_equal(std::string_view a, std::string_view b);

// Base64url without padding (RFC 7515), as JWTs use it; nullopt for a malformed input.
std::optional<std::string> base64url_decode(std::string_view text);
std::string base64url_encode(std::string_view bytes);

}  // namespace chatflow::security
