// The keys file of a running server, read again when it changes: an emptied or broken file is
// refused with a logged reason and the keys read before stay; a file that holds no keys is an
// error at start unless allowed.
#include "framework/security/keys_file.h"

#include <fstream>

#include <gtest/gtest.h>

#include "support/temp_model.h"

namespace chatflow::security {
namespace {

struct Logged {
  std::shared_ptr<std::string> text = std::make_shared<std::string>();
  std::function<void(const std::string&)> sink() {
    return [text = text](const std::string& line) { *text += line; };
  }
};

KeysFile::Options watching(Logged& logged, bool allow_empty = false) {
  KeysFile::Options options;
  options.allow_empty = allow_empty;
  options.check_interval = std::chrono::milliseconds(0);
  options.log = logged.sink();
  return options;
}

struct TwoKeys {
  std::string path;
  std::string alice;
  std::string bob;
};

TwoKeys write_two_keys(const std::string& name) {
  TwoKeys keys{testing::fresh_path(name), {}, {}};
  KeyStore store;
  keys.alice = store.add("acme", "alice", {}, {});
  keys.bob = store.add("acme", "bob", {}, {});
  store.save(keys.path);
  return keys;
}

TEST(KeysFile, AnEmptiedFileIsRefusedAndThePreviousKeysStay) {
  for (const char* emptied : {"", "keys:\n", "keys: []\n", "# all gone\n"}) {
    TwoKeys keys = write_two_keys("keys-file-emptied.yaml");
    Logged logged;
    KeysFile file(keys.path, watching(logged));
    ASSERT_NE(file.current()->match(keys.alice), nullptr);
    std::ofstream(keys.path, std::ios::trunc) << emptied;
    auto store = file.current();
    EXPECT_NE(store->match(keys.alice), nullptr) << "'" << emptied << "' locked alice out";
    EXPECT_NE(store->match(keys.bob), nullptr) << "'" << emptied << "' locked bob out";
    EXPECT_NE(logged.text->find("keeping the previous 2 keys"), std::string::npos) << *logged.text;
    EXPECT_NE(logged.text->find("holds no keys"), std::string::npos) << *logged.text;
    // Said once per change, not at every look.
    std::string once = *logged.text;
    file.current();
    EXPECT_EQ(*logged.text, once);
  }
}

TEST(KeysFile, ABrokenFileIsRefusedAndAMendedOneIsTaken) {
  TwoKeys keys = write_two_keys("keys-file-broken.yaml");
  Logged logged;
  KeysFile file(keys.path, watching(logged));
  std::ofstream(keys.path, std::ios::trunc) << "keys: [\n";
  EXPECT_NE(file.current()->match(keys.alice), nullptr);
  EXPECT_NE(logged.text->find("has errors"), std::string::npos) << *logged.text;
  // Mended, with one key revoked: taken at the next look.
  KeyStore store;
  std::string carol = store.add("acme", "carol", {}, {});
  std::string dave = store.add("acme", "dave", {}, {});
  ASSERT_TRUE(store.revoke(store.records().back().id));
  store.save(keys.path);
  auto current = file.current();
  EXPECT_NE(current->match(carol), nullptr);
  EXPECT_EQ(current->match(dave), nullptr);
  EXPECT_EQ(current->match(keys.alice), nullptr);
}

TEST(KeysFile, AFileWithOnlyRevokedKeysIsTakenAsWritten) {
  TwoKeys keys = write_two_keys("keys-file-all-revoked.yaml");
  Logged logged;
  KeysFile file(keys.path, watching(logged));
  Diagnostics diagnostics;
  auto store = KeyStore::load(keys.path, diagnostics);
  ASSERT_TRUE(store) << diagnostics.to_string();
  for (const auto& record : std::vector<ApiKeyRecord>(store->records()))
    store->revoke(record.id);
  store->save(keys.path);
  EXPECT_EQ(file.current()->match(keys.alice), nullptr) << "revoking every key is deliberate";
  EXPECT_EQ(file.current()->match(keys.bob), nullptr);
  EXPECT_EQ(*logged.text, "");
}

TEST(KeysFile, AFileWithoutKeysIsAnErrorAtStartUnlessAllowed) {
  std::string path = testing::fresh_path("keys-file-empty-at-start.yaml");
  std::ofstream(path) << "keys: []\n";
  Logged logged;
  try {
    KeysFile file(path, watching(logged));
    ADD_FAILURE() << "an empty keys file was accepted at start";
  } catch (const KeysFileError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("holds no keys"), std::string::npos) << message;
    EXPECT_NE(message.find("chatflow keys add"), std::string::npos) << message;
    EXPECT_NE(message.find("allow_empty_keys_file"), std::string::npos) << message;
  }
  KeysFile allowed(path, watching(logged, /*allow_empty=*/true));
  EXPECT_TRUE(allowed.current()->records().empty());
  // The first key added while serving is taken.
  Diagnostics diagnostics;
  auto store = KeyStore::load(path, diagnostics);
  ASSERT_TRUE(store);
  std::string first = store->add("acme", "alice", {}, {});
  store->save(path);
  EXPECT_NE(allowed.current()->match(first), nullptr);
}

}  // namespace
}  // namespace chatflow::security
