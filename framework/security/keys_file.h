// The keys file of a running server: read at start, and read again when it changes on disk, so
// a key added or revoked with `chatflow keys add|revoke` takes effect without a restart.
//
// A change is taken only when it is a keys file worth serving with. A file with errors, or one
// that went from holding keys to holding none (truncated by a script, a half-done copy, an
// editor's save gone wrong), is refused: the refusal is logged once per change of the file and
// the keys read before stay in use. To lock every key out on purpose, revoke them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "framework/security/key_store.h"

namespace chatflow::security {

// The file cannot be served with at start; the message names the file and what is wrong.
class KeysFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class KeysFile {
 public:
  struct Options {
    // Whether a file that holds no keys at all may be served with at start (a deployment that
    // adds its first key while serving, or lets JWTs in only). It never lets a file that held
    // keys be emptied while serving.
    bool allow_empty = false;
    // How often the file's modification time is looked at.
    std::chrono::milliseconds check_interval{1000};
    // Where refusals are said; default: standard error.
    std::function<void(const std::string&)> log;
  };

  // Reads `path`; throws KeysFileError when it has errors or, unless allowed, holds no keys.
  KeysFile(std::string path, Options options);
  explicit KeysFile(std::string path) : KeysFile(std::move(path), Options{}) {}

  // The keys in use: the file as last read, read again first when it changed and the last look
  // is at least check_interval ago.
  std::shared_ptr<const KeyStore> current();

 private:
  // What tells one content of the file from the next without reading it: a rewrite in the same
  // clock tick still changes the size or, renamed over it (as `keys add` saves), the inode.
  struct Version {
    int64_t modified_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const Version&) const = default;
  };
  Version version() const;
  void say(const std::string& message) const;

  std::string path_;
  Options options_;
  std::mutex mutex_;
  std::shared_ptr<const KeyStore> store_;
  Version version_;
  std::chrono::steady_clock::time_point last_check_;
};

}  // namespace chatflow::security
