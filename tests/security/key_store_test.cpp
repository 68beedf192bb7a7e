#include "framework/security/key_store.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "framework/security/crypto.h"
#include "support/temp_model.h"

namespace chatflow::security {
namespace {

std::string read(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(KeyStore, StoresOnlyHashesAndMatchesTheKey) {
  std::string path = testing::temp_path("keys.yaml");
  KeyStore store;
  std::string alice = store.add("acme", "alice", {"admin"}, {{"rpm", 60}});
  std::string bob = store.add("globex", "bob", {}, {});
  store.save(path);
  std::string file = read(path);
  EXPECT_EQ(file.find(alice), std::string::npos) << "the keys file holds a plain key";
  EXPECT_EQ(file.find(bob), std::string::npos);
  EXPECT_NE(file.find(sha256_hex(alice)), std::string::npos);

  Diagnostics diagnostics;
  auto loaded = KeyStore::load(path, diagnostics);
  ASSERT_TRUE(loaded) << diagnostics.to_string();
  const ApiKeyRecord* record = loaded->match(alice);
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->tenant, "acme");
  EXPECT_EQ(record->roles, std::vector<std::string>{"admin"});
  EXPECT_EQ(record->limits.at("rpm"), 60);
  EXPECT_EQ(loaded->match(bob)->tenant, "globex");
  EXPECT_EQ(loaded->match(alice + "x"), nullptr);
  EXPECT_EQ(loaded->match(""), nullptr);

  ASSERT_TRUE(loaded->revoke(record->id));
  loaded->save(path);
  auto reloaded = KeyStore::load(path, diagnostics);
  ASSERT_TRUE(reloaded);
  EXPECT_EQ(reloaded->match(alice), nullptr) << "a revoked key still matches";
  EXPECT_NE(reloaded->match(bob), nullptr);
}

TEST(KeyStore, RefusesPlainKeysAndBadHashesWithTheirLocation) {
  std::string path = testing::temp_path("bad-keys.yaml");
  std::ofstream(path) << "keys:\n"
                         "  - id: k_1\n"
                         "    key: cf-plain\n"
                         "    sha256: 1234\n"
                         "    tenant: acme\n";
  Diagnostics diagnostics;
  EXPECT_FALSE(KeyStore::load(path, diagnostics));
  std::string report = diagnostics.to_string();
  EXPECT_NE(report.find(path + ":3:5: error: a keys file must never hold a key itself"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find(path + ":4:13: error: 'sha256' must be 64"), std::string::npos) << report;
}

TEST(KeyStore, RefusesUnknownTopLevelKeysAndAliasCycles) {
  std::string path = testing::temp_path("odd-keys.yaml");
  KeyStore store;
  store.add("acme", "alice", {}, {});
  store.save(path);
  std::ofstream(path, std::ios::app) << "extra: 1\n";
  Diagnostics diagnostics;
  EXPECT_FALSE(KeyStore::load(path, diagnostics));
  EXPECT_NE(diagnostics.to_string().find("unknown key 'extra' in a keys file"), std::string::npos)
      << diagnostics.to_string();

  // Found by the fuzzer: an empty key list beside an unknown key was accepted despite the error.
  Diagnostics empty_list;
  EXPECT_FALSE(KeyStore::parse("keys:\nother: 1\n", "keys.yaml", empty_list));
  EXPECT_EQ(empty_list.size(), 1u) << empty_list.to_string();

  // What crashed a serving process, which re-reads its keys file every second.
  std::string cyclic = testing::temp_path("cyclic-keys.yaml");
  store.save(cyclic);
  std::ofstream(cyclic, std::ios::app) << "x: &a [*a]\n";
  Diagnostics cycle;
  EXPECT_FALSE(KeyStore::load(cyclic, cycle));
  EXPECT_NE(cycle.to_string().find("(a cycle)"), std::string::npos) << cycle.to_string();
}

}  // namespace
}  // namespace chatflow::security
