// Private keys for the JWT and key-set tests: RSA (RS256) and EC P-256 (ES256) keys made with
// OpenSSL, their public halves as JSON Web Keys and PEM, and tokens they sign.
#pragma once

#include <memory>
#include <string>

#include <openssl/evp.h>

namespace chatflow::testing {

class SigningKey {
 public:
  // "RS256" (a fresh 2048-bit RSA key) or "ES256" (a fresh P-256 key).
  SigningKey(std::string algorithm, std::string key_id);

  const std::string& algorithm() const { return algorithm_; }
  const std::string& key_id() const { return key_id_; }
  // The public key as a JWK object's text; `alg` is written unless `with_alg` is false.
  std::string jwk(bool with_alg = true) const;
  std::string public_pem() const;
  // A token over `claims` (a JSON object's text) with header {"alg", "kid"} (no kid when
  // `key_id` is empty), signed by this key.
  std::string sign(const std::string& claims, const std::string& key_id) const;
  std::string sign(const std::string& claims) const { return sign(claims, key_id_); }
  // The signature alone, as JWS writes it (ES256: r || s).
  std::string signature(const std::string& data) const;

 private:
  std::string algorithm_;
  std::string key_id_;
  std::shared_ptr<EVP_PKEY> key_;
};

// {"keys": [jwk, ...]}
std::string key_set(std::initializer_list<std::string> jwks);

}  // namespace chatflow::testing
