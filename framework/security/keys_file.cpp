#include "framework/security/keys_file.h"

#include <iostream>
#include <sys/stat.h>

namespace chatflow::security {

KeysFile::KeysFile(std::string path, Options options)
    : path_(std::move(path)), options_(std::move(options)) {
  Diagnostics diagnostics;
  Version seen = version();
  auto store = KeyStore::load(path_, diagnostics);
  if (!store) throw KeysFileError("the keys file has errors:\n" + diagnostics.to_string());
  if (store->records().empty() && !options_.allow_empty) {
    throw KeysFileError("the keys file '" + path_ +
                        "' holds no keys, so no key could ever be accepted; add one with "
                        "`chatflow keys add --tenant T --keys-file " +
                        path_ + "`, or set allow_empty_keys_file: true to start without any");
  }
  store_ = std::make_shared<const KeyStore>(std::move(*store));
  version_ = seen;
  last_check_ = std::chrono::steady_clock::now();
}

std::shared_ptr<const KeyStore> KeysFile::current() {
  std::lock_guard lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  if (now - last_check_ < options_.check_interval) return store_;
  last_check_ = now;
  Version seen = version();
  if (seen == version_) return store_;
  // Said once per change of the file, not at every look until it is mended.
  version_ = seen;
  Diagnostics diagnostics;
  auto store = KeyStore::load(path_, diagnostics);
  if (!store) {
    say("chatflow: keeping the previous keys; " + path_ + " has errors:\n" +
        diagnostics.to_string());
  } else if (store->records().empty() && !store_->records().empty()) {
    say("chatflow: keeping the previous " + std::to_string(store_->records().size()) + " keys; " +
        path_ +
        " now holds no keys at all, which would refuse every caller (revoke keys with "
        "`chatflow keys revoke` to lock them out)\n");
  } else {
    store_ = std::make_shared<const KeyStore>(std::move(*store));
  }
  return store_;
}

KeysFile::Version KeysFile::version() const {
  struct stat info {};
  if (::stat(path_.c_str(), &info) != 0) return {};
  return {static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec,
          static_cast<int64_t>(info.st_size), static_cast<uint64_t>(info.st_ino)};
}

void KeysFile::say(const std::string& message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    std::cerr << message;
  }
}

}  // namespace chatflow::security
