#include "support/signing_keys.h"

#include <stdexcept>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "framework/security/crypto.h"

namespace chatflow::testing {
namespace {

std::string big_endian(const EVP_PKEY* key, const char* name, int width = 0) {
  BIGNUM* number = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &number) != 1)
    throw std::runtime_error(std::string("no ") + name);
  std::string bytes(static_cast<size_t>(width > 0 ? width : BN_num_bytes(number)), '\0');
  BN_bn2binpad(number, reinterpret_cast<unsigned char*>(bytes.data()),
               static_cast<int>(bytes.size()));
  BN_free(number);
  return bytes;
}

}  // namespace

SigningKey::SigningKey(std::string algorithm, std::string key_id)
    : algorithm_(std::move(algorithm)), key_id_(std::move(key_id)) {
  EVP_PKEY* made = algorithm_ == "RS256" ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
  if (!made) throw std::runtime_error("cannot make a " + algorithm_ + " key");
  key_.reset(made, EVP_PKEY_free);
}

std::string SigningKey::jwk(bool with_alg) const {
  using security::base64url_encode;
  std::string text = "{";
  if (!key_id_.empty()) text += "\"kid\":\"" + key_id_ + "\",";
  if (with_alg) text += "\"alg\":\"" + algorithm_ + "\",";
  if (algorithm_ == "RS256") {
    text += "\"kty\":\"RSA\",\"use\":\"sig\",\"n\":\"" +
            base64url_encode(big_endian(key_.get(), OSSL_PKEY_PARAM_RSA_N)) + "\",\"e\":\"" +
            base64url_encode(big_endian(key_.get(), OSSL_PKEY_PARAM_RSA_E)) + "\"}";
  } else {
    text += "\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" +
            base64url_encode(big_endian(key_.get(), OSSL_PKEY_PARAM_EC_PUB_X, 32)) + "\",\"y\":\"" +
            base64url_encode(big_endian(key_.get(), OSSL_PKEY_PARAM_EC_PUB_Y, 32)) + "\"}";
  }
  return text;
}

std::string SigningKey::public_pem() const {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PUBKEY(bio.get(), key_.get());
  char* data = nullptr;
  long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

std::string SigningKey::signature(const std::string& data) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, key_.get());
  size_t size = 0;
  auto bytes = reinterpret_cast<const unsigned char*>(data.data());
  EVP_DigestSign(context.get(), nullptr, &size, bytes, data.size());
  std::string signature(size, '\0');
  EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &size, bytes,
                 data.size());
  signature.resize(size);
  if (algorithm_ == "RS256") return signature;
  // DER ECDSA-Sig-Value -> r || s.
  auto der = reinterpret_cast<const unsigned char*>(signature.data());
  std::unique_ptr<ECDSA_SIG, decltype(&ECDSA_SIG_free)> value(
      d2i_ECDSA_SIG(nullptr, &der, static_cast<long>(signature.size())), ECDSA_SIG_free);
  std::string raw(64, '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(value.get()), reinterpret_cast<unsigned char*>(raw.data()), 32);
  BN_bn2binpad(ECDSA_SIG_get0_s(value.get()), reinterpret_cast<unsigned char*>(raw.data()) + 32,
               32);
  return raw;
}

std::string SigningKey::sign(const std::string& claims, const std::string& key_id) const {
  using security::base64url_encode;
  std::string header = "{\"alg\":\"" + algorithm_ + "\"" +
                       (key_id.empty() ? "" : ",\"kid\":\"" + key_id + "\"") + "}";
  std::string signed_part = base64url_encode(header) + "." + base64url_encode(claims);
  return signed_part + "." + base64url_encode(signature(signed_part));
}

std::string key_set(std::initializer_list<std::string> jwks) {
  std::string text = "{\"keys\":[";
  bool first = true;
  for (const auto& jwk : jwks) {
    text += (first ? "" : ",") + jwk;
    first = false;
  }
  return text + "]}";
}

}  // namespace chatflow::testing
