// The client side of TLS for every connection chatflow opens to another service: Redis
// (rediss://), an upstream engine, an OTLP collector, an agent's HTTP tool. One context per
// configured destination holds what every connection to it shares (TLS 1.2 or newer, the CA
// certificates trusted, a client certificate for mutual TLS); each connection is then prepared
// for the name it must find in the server's certificate. Verification of the chain and of that
// name is always on, unless a caller asks for `insecure_skip_verify` by that name.
//
// Plain OpenSSL, no Asio: the Redis client runs it over a socket of its own; the Beast clients
// wrap it for Asio with asio_tls.h.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // OpenSSL's SSL

namespace chatflow::net {

struct TlsClientOptions {
  // PEM file of the CA certificates trusted; empty: the system's trust store.
  std::string ca_file;
  // PEM client certificate (with its chain) and its private key, for servers that ask for one
  // (mutual TLS); both or neither.
  std::string certificate_file;
  std::string key_file;
  // Accept any certificate for any name: only for a caller's option documented as insecure.
  bool insecure_skip_verify = false;
};

// A file that cannot be read, a key that does not match its certificate, a session that cannot
// be set up: what failed and OpenSSL's reason.
class TlsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shared by every connection to one destination; copies share one OpenSSL context.
class TlsClientContext {
 public:
  // Throws TlsError naming the file that could not be used and why.
  explicit TlsClientContext(const TlsClientOptions& options);

  ssl_ctx_st* native_handle() const { return context_.get(); }
  bool verifies() const { return verifies_; }

  // Readies a new session before its handshake: SNI (for a DNS name; an IP address is sent
  // none, as RFC 6066 asks) and the name or address the certificate must carry. Throws TlsError.
  void prepare(ssl_st* session, const std::string& expected_name) const;

 private:
  std::shared_ptr<ssl_ctx_st> context_;
  bool verifies_ = true;
};

// Why a handshake on `session` failed, in words a person can act on: the verification result
// when the certificate was refused ("certificate verify failed: unable to get local issuer
// certificate", "... the certificate is not for 'name'"), else `fallback` (the transport's own
// message), else OpenSSL's queued error.
std::string handshake_failure(ssl_st* session, const std::string& expected_name,
                              const std::string& fallback);

}  // namespace chatflow::net
