#include "framework/net/tls_client.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace chatflow::net {
namespace {

// The reason of OpenSSL's latest queued error; the queue is emptied.
std::string openssl_reason() {
  unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no reason given by OpenSSL";
  const char* reason = ERR_reason_error_string(code);
  if (reason) return reason;
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// A missing or unreadable file named as such, before OpenSSL's vaguer "system lib".
void require_readable(const std::string& key, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw TlsError(key + " '" + path + "' cannot be read: " + std::strerror(errno));
  std::fclose(file);
}

// An encrypted key would make OpenSSL ask for its passphrase on the terminal: refuse instead.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

bool is_ip_address(const std::string& name) {
  unsigned char address[16];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

}  // namespace

TlsClientContext::TlsClientContext(const TlsClientOptions& options)
    : context_(SSL_CTX_new(TLS_client_method()), SSL_CTX_free),
      verifies_(!options.insecure_skip_verify) {
  if (!context_) throw TlsError("cannot make a TLS context: " + openssl_reason());
  SSL_CTX* context = context_.get();
  if (SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) != 1)
    throw TlsError("cannot require TLS 1.2: " + openssl_reason());
  SSL_CTX_set_default_passwd_cb(context, no_passphrase);
  if (verifies_) {
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
    if (options.ca_file.empty()) {
      if (SSL_CTX_set_default_verify_paths(context) != 1)
        throw TlsError("cannot load the system's trust store: " + openssl_reason());
    } else {
      require_readable("ca_file", options.ca_file);
      if (SSL_CTX_load_verify_locations(context, options.ca_file.c_str(), nullptr) != 1) {
        throw TlsError("ca_file '" + options.ca_file +
                       "' holds no usable PEM certificate: " + openssl_reason());
      }
    }
  } else {
    SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nullptr);
  }
  if (options.certificate_file.empty() != options.key_file.empty()) {
    throw TlsError(
        "certificate_file and key_file go together (a client certificate needs its "
        "private key), but only " +
        std::string(options.key_file.empty() ? "certificate_file" : "key_file") + " is set");
  }
  if (!options.certificate_file.empty()) {
    require_readable("certificate_file", options.certificate_file);
    require_readable("key_file", options.key_file);
    if (SSL_CTX_use_certificate_chain_file(context, options.certificate_file.c_str()) != 1) {
      throw TlsError("certificate_file '" + options.certificate_file +
                     "' holds no usable PEM certificate: " + openssl_reason());
    }
    bool loaded =
        SSL_CTX_use_PrivateKey_file(context, options.key_file.c_str(), SSL_FILETYPE_PEM) == 1;
    if (!loaded && ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
      throw TlsError("key_file '" + options.key_file +
                     "' holds no usable unencrypted PEM private key: " + openssl_reason());
    }
    if (!loaded || SSL_CTX_check_private_key(context) != 1) {
      throw TlsError("key_file '" + options.key_file + "' is not the key of certificate_file '" +
                     options.certificate_file + "': " + openssl_reason());
    }
  }
}

void TlsClientContext::prepare(SSL* session, const std::string& expected_name) const {
  bool address = is_ip_address(expected_name);
  if (!address && SSL_set_tlsext_host_name(session, expected_name.c_str()) != 1)
    throw TlsError("cannot send the server name '" + expected_name + "': " + openssl_reason());
  if (!verifies_) return;
  X509_VERIFY_PARAM* parameters = SSL_get0_param(session);
  X509_VERIFY_PARAM_set_hostflags(parameters, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  int set = address ? X509_VERIFY_PARAM_set1_ip_asc(parameters, expected_name.c_str())
                    : X509_VERIFY_PARAM_set1_host(parameters, expected_name.c_str(), 0);
  if (set != 1) {
    throw TlsError("cannot check certificates for the name '" + expected_name +
                   "': " + openssl_reason());
  }
}

std::string handshake_failure(SSL* session, const std::string& expected_name,
                              const std::string& fallback) {
  long result = session ? SSL_get_verify_result(session) : X509_V_OK;
  if (result == X509_V_ERR_HOSTNAME_MISMATCH || result == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    ERR_clear_error();
    return "certificate verify failed: the certificate is not for '" + expected_name + "'";
  }
  if (result != X509_V_OK) {
    ERR_clear_error();
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(result);
  }
  if (!fallback.empty()) {
    ERR_clear_error();
    return fallback;
  }
  return openssl_reason();
}

}  // namespace chatflow::net
