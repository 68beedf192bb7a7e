#include "framework/security/jwks.h"

#include <stdexcept>

#include <boost/json.hpp>

#include "framework/security/crypto.h"

namespace chatflow::security {
namespace json = boost::json;
namespace {

constexpr int kLeastRsaBits = 2048;

std::string text_field(const json::object& key, const char* name) {
  const json::value* value = key.if_contains(name);
  if (!value) return {};
  if (!value->is_string())
    throw std::invalid_argument(std::string("'") + name + "' is not a string");
  return std::string(value->get_string());
}

std::string number_field(const json::object& key, const char* name) {
  std::string text = text_field(key, name);
  if (text.empty()) throw std::invalid_argument(std::string("'") + name + "' is missing");
  auto bytes = base64url_decode(text);
  if (!bytes) throw std::invalid_argument(std::string("'") + name + "' is not base64url");
  return *bytes;
}

// The algorithm a key of this type may verify, given its own `alg` and the configured one;
// throws std::invalid_argument when they disagree or chatflow does not verify it.
std::string pinned_algorithm(const std::string& type_algorithm, const std::string& own,
                             const std::string& configured) {
  std::string algorithm = own.empty() ? type_algorithm : own;
  if (algorithm != type_algorithm) {
    throw std::invalid_argument("its alg " + algorithm + " is not verified here (only " +
                                type_algorithm + " for this key type)");
  }
  if (!configured.empty() && configured != algorithm) {
    throw std::invalid_argument("its algorithm " + algorithm + " is not the configured " +
                                configured);
  }
  return algorithm;
}

VerificationKey read_key(const json::object& key, const std::string& configured) {
  std::string use = text_field(key, "use");
  if (!use.empty() && use != "sig")
    throw std::invalid_argument("it is for '" + use + "', not 'sig'");
  std::string type = text_field(key, "kty");
  std::string own = text_field(key, "alg");
  VerificationKey result;
  result.key_id = text_field(key, "kid");
  if (type == "RSA") {
    result.algorithm = pinned_algorithm("RS256", own, configured);
    result.public_key = PublicKey::rsa(number_field(key, "n"), number_field(key, "e"));
    if (result.public_key->bits() < kLeastRsaBits) {
      throw std::invalid_argument("its RSA modulus has " +
                                  std::to_string(result.public_key->bits()) + " bits, fewer than " +
                                  std::to_string(kLeastRsaBits));
    }
  } else if (type == "EC") {
    std::string curve = text_field(key, "crv");
    if (curve != "P-256") throw std::invalid_argument("its curve '" + curve + "' is not P-256");
    result.algorithm = pinned_algorithm("ES256", own, configured);
    result.public_key = PublicKey::ec_p256(number_field(key, "x"), number_field(key, "y"));
  } else if (type == "oct") {
    throw std::invalid_argument("it is a symmetric key, which is never taken from a key set");
  } else {
    throw std::invalid_argument("its key type '" + type + "' is not RSA or EC");
  }
  return result;
}

}  // namespace

const VerificationKey& JsonWebKeySet::key_for(const JwtHeader& header) const {
  if (!header.key_id) {
    if (keys.size() == 1) return keys.front();
    throw JwtError("the token names no key ('kid'), and the key set holds " +
                   std::to_string(keys.size()) + " keys");
  }
  for (const auto& key : keys) {
    if (key.key_id == *header.key_id) return key;
  }
  std::string shown =
      header.key_id->size() > 64 ? header.key_id->substr(0, 64) + "..." : *header.key_id;
  throw JwtError("the token's key '" + shown + "' is not in the key set");
}

bool JsonWebKeySet::has(const std::string& key_id) const {
  for (const auto& key : keys) {
    if (key.key_id == key_id) return true;
  }
  return false;
}

JsonWebKeySet parse_jwks(std::string_view text, const std::string& algorithm) {
  std::error_code error;
  json::value document = json::parse(text, error);
  if (error) throw std::invalid_argument("not JSON (" + error.message() + ")");
  const json::value* keys =
      document.is_object() ? document.get_object().if_contains("keys") : nullptr;
  if (!keys || !keys->is_array())
    throw std::invalid_argument("not a JSON Web Key Set (an object with a 'keys' list)");
  JsonWebKeySet set;
  size_t index = 0;
  for (const json::value& item : keys->get_array()) {
    std::string name = "key " + std::to_string(index++);
    try {
      if (!item.is_object()) throw std::invalid_argument("it is not an object");
      const json::object& key = item.get_object();
      if (const json::value* kid = key.if_contains("kid"); kid && kid->is_string())
        name += " ('" + std::string(kid->get_string()) + "')";
      VerificationKey read = read_key(key, algorithm);
      if (!read.key_id.empty() && set.has(read.key_id))
        throw std::invalid_argument("an earlier key has the same kid");
      set.keys.push_back(std::move(read));
    } catch (const std::invalid_argument& why) {
      set.skipped.push_back(name + " left out: " + why.what());
    }
  }
  if (set.keys.empty()) {
    std::string reasons;
    for (const auto& line : set.skipped)
      reasons += "; " + line;
    throw std::invalid_argument("it holds no key chatflow can verify tokens with" + reasons);
  }
  return set;
}

}  // namespace chatflow::security
