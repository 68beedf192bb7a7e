// The few cryptographic operations chatflow needs, on OpenSSL: hashes of API keys, HMAC, RSA and
// ECDSA signatures of JSON Web Tokens, random keys, and comparisons that take the same time
// whatever the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace chatflow::security {

// SHA-256 of `data`, as 64 lower-case hex digits.
std::string sha256_hex(std::string_view data);

// HMAC-SHA256 of `data` under `key`, raw 32 bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);

// Whether `signature` is a valid RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signature of `data` under
// the PEM public key `public_key_pem`. Throws std::invalid_argument when the key cannot be read.
bool rs256_verify(std::string_view public_key_pem, std::string_view data,
                  std::string_view signature);

// A public key that JWT signatures are checked with, parsed once: RSA (RS256) or EC P-256
// (ES256). Immutable, so one may be shared by threads.
class PublicKey {
 public:
  enum class Type { rsa, ec_p256 };

  // From a PEM "PUBLIC KEY" (SubjectPublicKeyInfo); throws std::invalid_argument when it is not
  // one, or not RSA or EC P-256.
  static std::shared_ptr<const PublicKey> from_pem(std::string_view pem);
  // From a JSON Web Key's numbers, big-endian bytes: an RSA modulus and exponent, or a P-256
  // point. Throws std::invalid_argument when they make no valid key (a point off the curve).
  static std::shared_ptr<const PublicKey> rsa(std::string_view modulus, std::string_view exponent);
  static std::shared_ptr<const PublicKey> ec_p256(std::string_view x, std::string_view y);

  ~PublicKey();
  PublicKey(const PublicKey&) = delete;
  PublicKey& operator=(const PublicKey&) = delete;

  Type type() const { return type_; }
  int bits() const;
  // RS256: RSASSA-PKCS1-v1_5 with SHA-256. ES256: ECDSA on P-256 with SHA-256, the signature as
  // JWS writes it (r and s, 32 bytes each), not DER.
  bool verify(std::string_view data, std::string_view signature) const;

 private:
  PublicKey(evp_pkey_st* key, Type type) : key_(key), type_(type) {}
  evp_pkey_st* key_;
  Type type_;
};

// `bytes` cryptographically random bytes as lower-case hex (2 * bytes digits).
std::string random_hex(size_t bytes);

// Equal in time independent of where the inputs differ (lengths are not secret).
bool constant_time_equal(std::string_view a, std::string_view b);

// Base64url without padding (RFC 7515), as JWTs use it; nullopt for a malformed input.
std::optional<std::string> base64url_decode(std::string_view text);
std::string base64url_encode(std::string_view bytes);

}  // namespace chatflow::security
