// API keys in a YAML file that holds only their SHA-256 hashes, each mapped to a tenant, a user,
// roles and optional limits. `chatflow keys add` makes a key, stores its hash and shows the key
// once; the auth stage matches presented keys against the hashes in constant time.
//
//   keys:
//     - id: k_3f9a1c2e           # public handle, for list and revoke
//       sha256: 9f86d0...        # of the key; the key itself is never stored
//       tenant: acme
//       user: alice
//       roles: [admin]
//       limits: {rpm: 60, tpm: 100000}
//       created: "2026-11-30T12:00:00Z"
//       revoked: false
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/config_value.h"
#include "framework/api/diagnostics.h"

namespace chatflow::security {

struct ApiKeyRecord {
  std::string id;
  std::string sha256;
  std::string tenant;
  std::string user;
  std::vector<std::string> roles;
  std::map<std::string, double> limits;
  std::string created;
  bool revoked = false;
};

class KeyStore {
 public:
  // Reads `path`; every problem goes to `diagnostics` at its file:line:column.
  static std::optional<KeyStore> load(const std::string& path, Diagnostics& diagnostics);
  // The same for the text of a keys file; `file_name` is used in locations.
  static std::optional<KeyStore> parse(const std::string& text, const std::string& file_name,
                                       Diagnostics& diagnostics);

  // A new key for `tenant`; returns the key itself, which exists nowhere else afterwards.
  std::string add(const std::string& tenant, const std::string& user,
                  const std::vector<std::string>& roles,
                  const std::map<std::string, double>& limits);
  // Marks the key with this id revoked; false when there is none.
  bool revoke(const std::string& id);
  // Writes the file atomically (a temporary file renamed over it), readable by its owner only.
  void save(const std::string& path) const;

  // The live record whose hash matches `key`, or nullptr. Every record's hash is compared, in
  // constant time, so the answer's timing says nothing about which bytes matched.
  const ApiKeyRecord* match(std::string_view key) const;
  const std::vector<ApiKeyRecord>& records() const { return records_; }

 private:
  static std::optional<KeyStore> from_tree(const ConfigValue& root, const std::string& path,
                                           Diagnostics& diagnostics);
  std::vector<ApiKeyRecord> records_;
};

// The prefix of every key chatflow makes.
inline constexpr std::string_view kKeyPrefix = "cf-";

}  // namespace chatflow::security
