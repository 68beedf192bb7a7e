#include "framework/security/crypto.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

namespace chatflow::security {
namespace {

std::string to_hex(const unsigned char* bytes, size_t count) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(count * 2);
  for (size_t i = 0; i < count; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed");
  return to_hex(digest, length);
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest,
           &length) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool rs256_verify(std::string_view public_key_pem, std::string_view data,
                  std::string_view signature) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(public_key_pem.data(), static_cast<int>(public_key_pem.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key) throw std::invalid_argument("not a PEM public key");
  if (EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_RSA)
    throw std::invalid_argument("the public key is not an RSA key");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(context.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1)
    return false;
  return EVP_DigestVerify(context.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(), reinterpret_cast<const unsigned char*>(data.data()),
                          data.size()) == 1;
}

namespace {

using KeyPointer = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// A key from OSSL_PARAMs, as OpenSSL 3 builds keys from their numbers; nullptr when the numbers
// make no key of `type`.
KeyPointer key_from_parameters(const char* type, OSSL_PARAM* parameters) {
  KeyPointer key(nullptr, EVP_PKEY_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> context(
      EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* made = nullptr;
  if (!context || EVP_PKEY_fromdata_init(context.get()) != 1 ||
      EVP_PKEY_fromdata(context.get(), &made, EVP_PKEY_PUBLIC_KEY, parameters) != 1) {
    return key;
  }
  key.reset(made);
  return key;
}

struct ParameterList {
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> builder{OSSL_PARAM_BLD_new(),
                                                                          OSSL_PARAM_BLD_free};
  std::vector<std::unique_ptr<BIGNUM, decltype(&BN_free)>> numbers;

  void number(const char* name, std::string_view big_endian) {
    numbers.emplace_back(BN_bin2bn(reinterpret_cast<const unsigned char*>(big_endian.data()),
                                   static_cast<int>(big_endian.size()), nullptr),
                         BN_free);
    if (!numbers.back() || OSSL_PARAM_BLD_push_BN(builder.get(), name, numbers.back().get()) != 1)
      throw std::runtime_error("cannot build a public key's parameters");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> build() {
    return {OSSL_PARAM_BLD_to_param(builder.get()), OSSL_PARAM_free};
  }
};

}  // namespace

std::shared_ptr<const PublicKey> PublicKey::from_pem(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  KeyPointer key(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key) throw std::invalid_argument("not a PEM public key");
  if (EVP_PKEY_get_base_id(key.get()) == EVP_PKEY_RSA)
    return std::shared_ptr<const PublicKey>(new PublicKey(key.release(), Type::rsa));
  if (EVP_PKEY_get_base_id(key.get()) == EVP_PKEY_EC) {
    char curve[64] = {};
    size_t length = 0;
    if (EVP_PKEY_get_utf8_string_param(key.get(), OSSL_PKEY_PARAM_GROUP_NAME, curve, sizeof curve,
                                       &length) == 1 &&
        std::string_view(curve, length) == "prime256v1") {
      return std::shared_ptr<const PublicKey>(new PublicKey(key.release(), Type::ec_p256));
    }
    throw std::invalid_argument("the public key is an EC key on a curve other than P-256");
  }
  throw std::invalid_argument("the public key is neither RSA nor EC P-256");
}

std::shared_ptr<const PublicKey> PublicKey::rsa(std::string_view modulus,
                                                std::string_view exponent) {
  if (modulus.empty() || exponent.empty())
    throw std::invalid_argument("an RSA key needs its modulus and exponent");
  ParameterList parameters;
  parameters.number(OSSL_PKEY_PARAM_RSA_N, modulus);
  parameters.number(OSSL_PKEY_PARAM_RSA_E, exponent);
  auto built = parameters.build();
  KeyPointer key = key_from_parameters("RSA", built.get());
  if (!key) throw std::invalid_argument("the modulus and exponent make no RSA key");
  return std::shared_ptr<const PublicKey>(new PublicKey(key.release(), Type::rsa));
}

std::shared_ptr<const PublicKey> PublicKey::ec_p256(std::string_view x, std::string_view y) {
  if (x.size() != 32 || y.size() != 32)
    throw std::invalid_argument("a P-256 point's x and y are 32 bytes each");
  // The uncompressed point, as SEC 1 writes it.
  std::string point = "\x04" + std::string(x) + std::string(y);
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> builder(OSSL_PARAM_BLD_new(),
                                                                          OSSL_PARAM_BLD_free);
  if (OSSL_PARAM_BLD_push_utf8_string(builder.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) !=
          1 ||
      OSSL_PARAM_BLD_push_octet_string(builder.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size()) != 1) {
    throw std::runtime_error("cannot build a public key's parameters");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> built(
      OSSL_PARAM_BLD_to_param(builder.get()), OSSL_PARAM_free);
  KeyPointer key = key_from_parameters("EC", built.get());
  if (!key) throw std::invalid_argument("x and y are not a point on P-256");
  // fromdata does not check the point is on the curve; a public-key check does.
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> check(
      EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr), EVP_PKEY_CTX_free);
  if (!check || EVP_PKEY_public_check(check.get()) != 1)
    throw std::invalid_argument("x and y are not a point on P-256");
  return std::shared_ptr<const PublicKey>(new PublicKey(key.release(), Type::ec_p256));
}

PublicKey::~PublicKey() {
  EVP_PKEY_free(key_);
}

int PublicKey::bits() const {
  return EVP_PKEY_get_bits(key_);
}

bool PublicKey::verify(std::string_view data, std::string_view signature) const {
  std::string der;
  if (type_ == Type::ec_p256) {
    // JWS writes r || s; OpenSSL verifies a DER ECDSA-Sig-Value.
    if (signature.size() != 64) return false;
    std::unique_ptr<ECDSA_SIG, decltype(&ECDSA_SIG_free)> value(ECDSA_SIG_new(), ECDSA_SIG_free);
    BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data()), 32, nullptr);
    BIGNUM* s =
        BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data()) + 32, 32, nullptr);
    if (!value || !r || !s || ECDSA_SIG_set0(value.get(), r, s) != 1) {
      BN_free(r);
      BN_free(s);
      return false;
    }
    unsigned char* bytes = nullptr;
    int length = i2d_ECDSA_SIG(value.get(), &bytes);
    if (length <= 0) return false;
    der.assign(reinterpret_cast<const char*>(bytes), static_cast<size_t>(length));
    OPENSSL_free(bytes);
    signature = der;
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(context.get(), nullptr, EVP_sha256(), nullptr, key_) != 1) return false;
  return EVP_DigestVerify(context.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(), reinterpret_cast<const unsigned char*>(data.data()),
                          data.size()) == 1;
}

std::string random_hex(size_t bytes) {
  std::string buffer(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(buffer.data()), static_cast<int>(bytes)) != 1)
    throw std::runtime_error("the system's random number generator failed");
  return to_hex(reinterpret_cast<const unsigned char*>(buffer.data()), bytes);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::string> base64url_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
  };
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    int v = value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  // Leftover bits must be zero, or two encodings would decode alike.
  if (count > 0 && (bits & ((1u << count) - 1)) != 0) return std::nullopt;
  return out;
}

std::string base64url_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (unsigned char c : bytes) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += kAlphabet[(bits >> count) & 63];
    }
  }
  if (count > 0) out += kAlphabet[(bits << (6 - count)) & 63];
  return out;
}

}  // namespace chatflow::security
