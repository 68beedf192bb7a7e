#include "framework/security/jwt.h"

#include <memory>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "framework/security/crypto.h"

namespace chatflow::security {
namespace {

constexpr int64_t kNow = 1'800'000'000;
const std::string kSecret = "a-test-secret-that-is-long-enough-for-hs256";

std::string hs256(const std::string& header, const std::string& payload,
                  const std::string& secret = kSecret) {
  std::string signed_part = base64url_encode(header) + "." + base64url_encode(payload);
  return signed_part + "." + base64url_encode(hmac_sha256(secret, signed_part));
}

JwtSettings hs_settings() {
  JwtSettings settings;
  settings.algorithm = "HS256";
  settings.secret = kSecret;
  settings.issuer = "https://login.example";
  settings.audience = "chatflow";
  return settings;
}

std::string claims(const std::string& extra = "") {
  return R"({"iss":"https://login.example","aud":"chatflow","sub":"alice","tenant":"acme",)"
         R"("roles":["admin","user"],"exp":)" +
         std::to_string(kNow + 600) + extra + "}";
}

const std::string kHeader = R"({"alg":"HS256","typ":"JWT"})";

TEST(Jwt, AcceptsAValidHs256TokenAndReadsTheIdentity) {
  Identity identity = verify_jwt(hs256(kHeader, claims()), hs_settings(), kNow);
  EXPECT_EQ(identity.tenant, "acme");
  EXPECT_EQ(identity.user, "alice");
  EXPECT_EQ(identity.roles, (std::vector<std::string>{"admin", "user"}));
}

TEST(Jwt, VerifiesTheRfc7519ExampleToken) {
  // RFC 7519 section 3.1 (its key from RFC 7515 appendix A.1); valid before its exp.
  std::string token =
      "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9."
      "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVl"
      "fQ."
      "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
  JwtSettings settings;
  settings.algorithm = "HS256";
  settings.secret = *base64url_decode(
      "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow");
  settings.tenant_claim = "iss";
  settings.user_claim = "";  // its claims name no user
  EXPECT_EQ(verify_jwt(token, settings, 1300819300).tenant, "joe");
  EXPECT_THROW(verify_jwt(token, settings, 1300819380 + 31), JwtError);  // past exp + leeway
}

TEST(Jwt, RefusesEveryBadToken) {
  JwtSettings settings = hs_settings();
  auto refused = [&](const std::string& token, const std::string& why) {
    try {
      verify_jwt(token, settings, kNow);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const JwtError& error) {
      EXPECT_NE(std::string(error.what()).find(why), std::string::npos) << error.what();
    }
  };
  std::string expired =
      R"({"tenant":"acme","aud":"chatflow","iss":"https://login.example","exp":)" +
      std::to_string(kNow - 120) + "}";
  refused(hs256(kHeader, expired), "expired");
  refused(hs256(kHeader, claims(R"(,"nbf":)" + std::to_string(kNow + 600))), "not valid yet");
  refused(hs256(kHeader, claims(), "another-secret-another-secret-another"), "signature");
  refused(hs256(kHeader, R"({"tenant":"acme","aud":"chatflow","iss":"evil","exp":)" +
                             std::to_string(kNow + 60) + "}"),
          "issuer");
  refused(hs256(kHeader, R"({"tenant":"acme","aud":["other","x"],"iss":"https://login.example",)"
                         R"("exp":)" +
                             std::to_string(kNow + 60) + "}"),
          "audience");
  refused(hs256(kHeader, R"({"aud":"chatflow","iss":"https://login.example","exp":)" +
                             std::to_string(kNow + 60) + "}"),
          "tenant");
  refused(hs256(kHeader, R"({"tenant":"acme","aud":"chatflow","iss":"https://login.example"})"),
          "exp");
  // The token does not get to choose its algorithm.
  std::string none = base64url_encode(R"({"alg":"none"})") + "." + base64url_encode(claims()) + ".";
  refused(none, "HS256");
  refused(hs256(R"({"alg":"HS512"})", claims()), "HS256");
  refused("not.a-token", "not a JWT");
  refused("a*c.def.ghi", "base64url");
  refused("abc.def.ghi", "JSON");
  // An audience list that holds ours is fine.
  EXPECT_NO_THROW(verify_jwt(
      hs256(kHeader,
            R"({"tenant":"t","sub":"u","aud":["x","chatflow"],"iss":"https://login.example",)"
            R"("exp":)" +
                std::to_string(kNow + 60) + "}"),
      settings, kNow));
}

TEST(Jwt, VerifiesRs256WithThePublicKeyOnly) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_RSA_gen(2048), EVP_PKEY_free);
  ASSERT_TRUE(key);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PUBKEY(bio.get(), key.get());
  char* data = nullptr;
  long length = BIO_get_mem_data(bio.get(), &data);
  std::string public_pem(data, static_cast<size_t>(length));

  auto sign = [&](const std::string& header, const std::string& payload) {
    std::string signed_part = base64url_encode(header) + "." + base64url_encode(payload);
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                    EVP_MD_CTX_free);
    EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, key.get());
    size_t size = 0;
    EVP_DigestSign(context.get(), nullptr, &size,
                   reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size());
    std::string signature(size, '\0');
    EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                   reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size());
    signature.resize(size);
    return signed_part + "." + base64url_encode(signature);
  };
  JwtSettings settings;
  settings.algorithm = "RS256";
  settings.public_key_pem = public_pem;
  std::string payload = R"({"tenant":"acme","sub":"bob","exp":)" + std::to_string(kNow + 60) + "}";
  EXPECT_EQ(verify_jwt(sign(R"({"alg":"RS256"})", payload), settings, kNow).user, "bob");
  std::string tampered = sign(R"({"alg":"RS256"})", payload);
  tampered[tampered.size() - 5] = tampered[tampered.size() - 5] == 'A' ? 'B' : 'A';
  EXPECT_THROW(verify_jwt(tampered, settings, kNow), JwtError);
  // HS256 "signed" with the public key's text must not pass as RS256.
  std::string signed_part =
      base64url_encode(R"({"alg":"HS256"})") + "." + base64url_encode(payload);
  EXPECT_THROW(
      verify_jwt(signed_part + "." + base64url_encode(hmac_sha256(public_pem, signed_part)),
                 settings, kNow),
      JwtError);
}

// Sessions and history belong to the user a token names: tokens without one would all share
// one owner, and so each other's sessions.
TEST(Jwt, ATokenWithoutAUsableUserClaimIsRefused) {
  JwtSettings settings = hs_settings();
  auto token = [](const std::string& user_field) {
    return hs256(kHeader, R"({"iss":"https://login.example","aud":"chatflow","tenant":"acme",)" +
                              user_field + R"("exp":)" + std::to_string(kNow + 600) + "}");
  };
  for (const auto& [field, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "the token has no 'sub' claim naming the user"},
           {R"("sub":null,)", "the token has no 'sub' claim naming the user"},
           {R"("sub":"",)", "'sub' claim (the user) is empty"},
           {R"("sub":{"id":"x"},)", "'sub' claim (the user) is not a string or an integer"},
           {R"("sub":["x"],)", "not a string or an integer"},
           {R"("sub":true,)", "not a string or an integer"},
           {R"("sub":1.5,)", "not a string or an integer"},
       }) {
    try {
      Identity identity = verify_jwt(token(field), settings, kNow);
      ADD_FAILURE() << field << ": accepted, user '" << identity.user << "'";
    } catch (const JwtError& error) {
      EXPECT_NE(std::string(error.what()).find(why), std::string::npos)
          << field << ": " << error.what();
    }
  }
  settings.user_claim = "uid";
  EXPECT_THROW(verify_jwt(token(R"("sub":"alice",)"), settings, kNow), JwtError);
  EXPECT_EQ(verify_jwt(token(R"("uid":"alice",)"), settings, kNow).user, "alice");
}

TEST(Jwt, ANumericUserClaimIsItsDecimalText) {
  JwtSettings settings = hs_settings();
  auto token = [](const std::string& user) {
    return hs256(kHeader, R"({"iss":"https://login.example","aud":"chatflow","tenant":"acme",)"
                          R"("sub":)" +
                              user + R"(,"exp":)" + std::to_string(kNow + 600) + "}");
  };
  EXPECT_EQ(verify_jwt(token("1234567890123"), settings, kNow).user, "1234567890123");
  EXPECT_EQ(verify_jwt(token("-7"), settings, kNow).user, "-7");
  EXPECT_EQ(verify_jwt(token("18446744073709551615"), settings, kNow).user, "18446744073709551615");
}

TEST(Jwt, AnEmptyUserClaimSettingMeansTokensNameNoUser) {
  JwtSettings settings = hs_settings();
  settings.user_claim = "";
  Identity identity = verify_jwt(
      hs256(kHeader, R"({"iss":"https://login.example","aud":"chatflow","tenant":"acme",)"
                     R"("sub":"ignored","exp":)" +
                         std::to_string(kNow + 600) + "}"),
      settings, kNow);
  EXPECT_EQ(identity.tenant, "acme");
  EXPECT_EQ(identity.user, "");
  EXPECT_EQ(identity.owner(), "") << "such a caller owns nothing; the session routes refuse it";
}

}  // namespace
}  // namespace chatflow::security

namespace chatflow::security {
namespace {

std::string with_times(const std::string& times) {
  return R"({"iss":"https://login.example","aud":"chatflow","sub":"alice","tenant":"acme",)" +
         times + "}";
}

// A double such as 1e300 used to be cast to int64 (undefined behaviour), and exp + leeway near
// INT64_MAX overflowed into the past.
TEST(Jwt, FarTimeClaimsAreClampedNotOverflowed) {
  JwtSettings settings = hs_settings();
  for (const char* far_future : {"1e300", "9223372036854775807", "18446744073709551615"}) {
    std::string token = hs256(kHeader, with_times(std::string(R"("exp":)") + far_future));
    EXPECT_EQ(verify_jwt(token, settings, kNow).tenant, "acme") << far_future;
  }
  std::string past = hs256(kHeader, with_times(R"("exp":-1e300)"));
  EXPECT_THROW(verify_jwt(past, settings, kNow), JwtError);
  std::string not_yet = hs256(kHeader, with_times(R"("exp":1e300,"nbf":9223372036854775807)"));
  EXPECT_THROW(verify_jwt(not_yet, settings, kNow), JwtError);
}

}  // namespace
}  // namespace chatflow::security
