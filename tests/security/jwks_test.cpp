// JSON Web Key Sets: RSA and EC P-256 keys read from their numbers, each pinned to one
// algorithm that a token cannot change (none, HS256 over the public key, RS256 against an EC
// key), keys chosen by kid (required when the set holds several), and keys that cannot be used
// left out with the reason.
#include "framework/security/jwks.h"

#include <gtest/gtest.h>

#include "framework/security/crypto.h"
#include "support/signing_keys.h"

namespace chatflow::security {
namespace {

using testing::key_set;
using testing::SigningKey;

constexpr int64_t kNow = 1'800'000'000;

std::string claims() {
  return R"({"sub":"alice","tenant":"acme","exp":)" + std::to_string(kNow + 600) + "}";
}

// The identity `token` carries when checked against `set`, or JwtError.
Identity verify(const JsonWebKeySet& set, const std::string& token) {
  return verify_jwt(token, set.key_for(read_jwt_header(token)), JwtSettings{}, kNow);
}

std::string why_refused(const JsonWebKeySet& set, const std::string& token) {
  try {
    verify(set, token);
  } catch (const JwtError& error) {
    return error.what();
  }
  return "accepted";
}

const SigningKey& rsa_key() {
  static const SigningKey key("RS256", "rsa-1");
  return key;
}
const SigningKey& ec_key() {
  static const SigningKey key("ES256", "ec-1");
  return key;
}

TEST(Jwks, RsaAndEcKeysVerifyTheirTokensChosenByKid) {
  JsonWebKeySet set = parse_jwks(key_set({rsa_key().jwk(), ec_key().jwk()}), "");
  ASSERT_EQ(set.keys.size(), 2u);
  EXPECT_EQ(set.keys[0].algorithm, "RS256");
  EXPECT_EQ(set.keys[1].algorithm, "ES256");
  EXPECT_EQ(verify(set, rsa_key().sign(claims())).user, "alice");
  EXPECT_EQ(verify(set, ec_key().sign(claims())).tenant, "acme");
  // Signed by one key, naming the other: the named key's signature check fails.
  SigningKey other_rsa("RS256", "rsa-1");
  EXPECT_NE(why_refused(set, other_rsa.sign(claims())).find("signature"), std::string::npos);
}

TEST(Jwks, AKeyWithoutAlgIsPinnedByItsTypeOrTheConfiguredAlgorithm) {
  JsonWebKeySet set = parse_jwks(key_set({rsa_key().jwk(false), ec_key().jwk(false)}), "");
  EXPECT_EQ(set.keys[0].algorithm, "RS256");
  EXPECT_EQ(set.keys[1].algorithm, "ES256");
  // Configured ES256: the RSA key is left out, with the reason.
  JsonWebKeySet only_ec = parse_jwks(key_set({rsa_key().jwk(false), ec_key().jwk(false)}), "ES256");
  ASSERT_EQ(only_ec.keys.size(), 1u);
  EXPECT_EQ(only_ec.keys[0].key_id, "ec-1");
  ASSERT_EQ(only_ec.skipped.size(), 1u);
  EXPECT_NE(only_ec.skipped[0].find("'rsa-1'"), std::string::npos) << only_ec.skipped[0];
  EXPECT_NE(only_ec.skipped[0].find("not the configured ES256"), std::string::npos)
      << only_ec.skipped[0];
}

TEST(Jwks, TheTokenCannotChooseTheAlgorithm) {
  JsonWebKeySet set = parse_jwks(key_set({rsa_key().jwk(), ec_key().jwk()}), "");
  std::string payload = base64url_encode(claims());
  // "none", with the RSA key's kid.
  std::string none = base64url_encode(R"({"alg":"none","kid":"rsa-1"})") + "." + payload + ".";
  EXPECT_NE(why_refused(set, none).find("must be signed with RS256"), std::string::npos);
  // HS256 keyed with the RSA key's public text, as a confused verifier would check it: PEM, and
  // the JWK itself.
  for (const std::string& secret : {rsa_key().public_pem(), rsa_key().jwk()}) {
    std::string signed_part = base64url_encode(R"({"alg":"HS256","kid":"rsa-1"})") + "." + payload;
    std::string token = signed_part + "." + base64url_encode(hmac_sha256(secret, signed_part));
    EXPECT_NE(why_refused(set, token).find("must be signed with RS256"), std::string::npos);
  }
  // An RSA signature that names the EC key's kid, claiming RS256.
  EXPECT_NE(why_refused(set, rsa_key().sign(claims(), "ec-1")).find("must be signed with ES256"),
            std::string::npos);
  // ES256 claimed with an RSA signature of the right length does not pass either.
  std::string signed_part = base64url_encode(R"({"alg":"ES256","kid":"ec-1"})") + "." + payload;
  std::string forged = signed_part + "." + base64url_encode(std::string(64, '\x01'));
  EXPECT_NE(why_refused(set, forged).find("signature"), std::string::npos);
}

TEST(Jwks, KidIsRequiredWhenTheSetHoldsSeveralKeys) {
  JsonWebKeySet two = parse_jwks(key_set({rsa_key().jwk(), ec_key().jwk()}), "");
  std::string refused = why_refused(two, rsa_key().sign(claims(), ""));
  EXPECT_NE(refused.find("names no key ('kid')"), std::string::npos) << refused;
  EXPECT_NE(refused.find("holds 2 keys"), std::string::npos) << refused;
  EXPECT_NE(
      why_refused(two, rsa_key().sign(claims(), "rsa-9")).find("'rsa-9' is not in the key set"),
      std::string::npos);
  // With one key, a token without a kid is checked with it.
  JsonWebKeySet one = parse_jwks(key_set({rsa_key().jwk()}), "");
  EXPECT_EQ(verify(one, rsa_key().sign(claims(), "")).user, "alice");
}

TEST(Jwks, KeysThatCannotBeUsedAreLeftOutWithTheReason) {
  SigningKey small("RS256", "small");
  std::string symmetric =
      R"({"kty":"oct","kid":"shared","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"})";
  std::string encryption = R"({"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"})";
  std::string rs384 = rsa_key().jwk();
  rs384.replace(rs384.find("RS256"), 5, "RS384");
  std::string p384 = R"({"kty":"EC","kid":"p384","crv":"P-384","x":"AA","y":"AA"})";
  std::string off_curve = R"({"kty":"EC","kid":"off","crv":"P-256","x":")" +
                          base64url_encode(std::string(32, '\x01')) + R"(","y":")" +
                          base64url_encode(std::string(32, '\x02')) + "\"}";
  std::string weak_rsa = R"({"kty":"RSA","kid":"weak","n":")" +
                         base64url_encode(std::string(128, '\xc1')) + R"(","e":"AQAB"})";
  JsonWebKeySet set = parse_jwks(key_set({symmetric, encryption, rs384, p384, off_curve, weak_rsa,
                                          ec_key().jwk(), ec_key().jwk()}),
                                 "");
  ASSERT_EQ(set.keys.size(), 1u);
  EXPECT_EQ(set.keys[0].key_id, "ec-1");
  std::string reasons;
  for (const auto& line : set.skipped)
    reasons += line + "\n";
  for (const char* reason :
       {"'shared') left out: it is a symmetric key", "'enc') left out: it is for 'enc'",
        "'rsa-1') left out: its alg RS384", "'p384') left out: its curve 'P-384'",
        "'off') left out: x and y are not a point on P-256",
        "'weak') left out: its RSA modulus has 1024 bits",
        "'ec-1') left out: an earlier key has the same kid"}) {
    EXPECT_NE(reasons.find(reason), std::string::npos) << reason << "\n" << reasons;
  }
}

TEST(Jwks, ASetWithoutUsableKeysOrNotASetIsRefused) {
  for (const char* text : {"", "[]", "{}", R"({"keys":{}})", R"({"keys":[]})",
                           R"({"keys":[{"kty":"oct","k":"AA"}]})"}) {
    EXPECT_THROW(parse_jwks(text, ""), std::invalid_argument) << text;
  }
  try {
    parse_jwks(R"({"keys":[{"kty":"oct","kid":"s","k":"AA"}]})", "");
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("symmetric"), std::string::npos) << error.what();
  }
}

TEST(Jwks, APemEcKeyVerifiesEs256AsTheConfiguredKey) {
  JwtSettings settings;
  settings.algorithm = "ES256";
  settings.public_key_pem = ec_key().public_pem();
  EXPECT_EQ(verify_jwt(ec_key().sign(claims(), ""), settings, kNow).user, "alice");
  settings.algorithm = "RS256";
  EXPECT_THROW(configured_key(settings), JwtError) << "an EC key is no RS256 key";
}

}  // namespace
}  // namespace chatflow::security
