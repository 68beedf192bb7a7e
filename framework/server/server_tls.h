// The server side of TLS on the main address (server.tls): one OpenSSL context built from the
// certificate, key and (optionally) client CA files, TLS 1.2 or newer, ALPN http/1.1 only.
// Reloading builds a whole new context from the files and swaps it in only when it loads, so a
// half-written or mismatched pair never replaces one that works; connections already open keep
// the context they started with.
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "framework/server/server_config.h"

namespace chatflow::server {

// A file that cannot be read or used, named with OpenSSL's reason.
class TlsSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ServerTls {
 public:
  // Loads the files; throws TlsSetupError naming the file (and the key) that failed.
  explicit ServerTls(TlsSettings settings);

  // The context new connections use.
  std::shared_ptr<boost::asio::ssl::context> context() const;

  struct ReloadOutcome {
    bool ok = false;
    std::string certificate;  // the serving certificate, described (serial, subject, expiry)
    std::string error;        // why the files were not taken
  };
  // Reads the files again; on failure the old context keeps serving.
  ReloadOutcome reload();

  // "serial 1A2B, subject CN=..., expires ..." of the certificate now served.
  std::string describe() const;

 private:
  struct Loaded {
    std::shared_ptr<boost::asio::ssl::context> context;
    std::string description;
  };
  static Loaded load(const TlsSettings& settings);

  TlsSettings settings_;
  mutable std::mutex mutex_;
  Loaded current_;
};

}  // namespace chatflow::server
