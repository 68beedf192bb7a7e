// JSON Web Key Sets (RFC 7517), as identity providers publish their signing keys
// (`https://login.example/.well-known/jwks.json`): the keys JWTs may be verified with, each
// pinned to one algorithm.
//
// A key's algorithm is its `alg` when it has one, else the configured algorithm, else what its
// type allows (RSA: RS256, EC P-256: ES256); a token must name exactly that one. Only public
// signature keys are taken: a symmetric (`oct`) key is never read from a key set, and a key
// for encryption (`use: enc`), of an algorithm chatflow does not verify (RS384, PS256, ...),
// on another curve, or an RSA key under 2048 bits is left out, with the reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/security/jwt.h"

namespace chatflow::security {

struct JsonWebKeySet {
  std::vector<VerificationKey> keys;
  std::vector<std::string> skipped;  // why each key left out was left out, for the log

  // The key a token with this header is checked with; throws JwtError naming why there is none
  // (the kid is unknown, or the token names no kid while the set holds several keys).
  const VerificationKey& key_for(const JwtHeader& header) const;
  // Whether the set holds a key with this kid.
  bool has(const std::string& key_id) const;
};

// Throws std::invalid_argument when `text` is not a key set ({"keys": [...]}) or holds no
// usable key. `algorithm`: the configured algorithm (empty: each key's own); keys of another
// are left out.
JsonWebKeySet parse_jwks(std::string_view text, const std::string& algorithm);

}  // namespace chatflow::security
