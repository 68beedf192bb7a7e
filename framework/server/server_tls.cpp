#include "framework/server/server_tls.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

namespace chatflow::server {
namespace {

namespace ssl = boost::asio::ssl;

// OpenSSL's reasons queued by the call that failed, oldest first; the queue is left empty.
std::string openssl_reasons() {
  std::string reasons;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    reasons += (reasons.empty() ? "" : "; ") + std::string(text);
  }
  return reasons.empty() ? "no reason given" : reasons;
}

// The file must exist and be readable before OpenSSL's less precise reasons matter.
void require_readable(const std::string& key, const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    throw TlsSetupError("server.tls." + key + ": cannot read '" + file +
                        "': " + std::strerror(errno));
  }
}

// A private key others on the machine can read is as good as published to them: said at every
// load (start and reload), naming the file and its mode, never its contents.
void warn_if_others_read(const std::string& key_file) {
  struct stat status {};
  if (::stat(key_file.c_str(), &status) != 0) return;
  bool group = status.st_mode & S_IRGRP;
  bool others = status.st_mode & S_IROTH;
  if (!group && !others) return;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
  spdlog::warn(
      "server.tls.key_file: '{}' is readable by {} (mode {}): whoever can read it can pose as "
      "this server; make it readable by its owner alone (chmod 600)",
      key_file,
      group && others ? "its group and others"
      : group         ? "its group"
                      : "others",
      mode);
}

// A key file protected by a passphrase would make OpenSSL ask on the terminal; refuse instead.
int no_passphrase(char*, int, int, void*) {
  return -1;
}

// ALPN: HTTP/1.1 is all this server speaks. A client that offers ALPN without it (h2 alone) is
// refused in the handshake (RFC 7301's no_application_protocol) rather than misunderstood.
int select_http11(SSL*, const unsigned char** out, unsigned char* out_length,
                  const unsigned char* offered, unsigned int offered_length, void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length, kHttp11, sizeof kHttp11, offered,
                            offered_length) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

std::string describe_certificate(X509* certificate) {
  std::string description;
  if (BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr)) {
    if (char* hex = BN_bn2hex(serial)) {
      description = "serial " + std::string(hex);
      OPENSSL_free(hex);
    }
    BN_free(serial);
  }
  char subject[512];
  X509_NAME_oneline(X509_get_subject_name(certificate), subject, sizeof subject);
  description += std::string(", subject ") + subject;
  if (BIO* text = BIO_new(BIO_s_mem())) {
    if (ASN1_TIME_print(text, X509_get0_notAfter(certificate)) == 1) {
      char* data = nullptr;
      long length = BIO_get_mem_data(text, &data);
      description += ", expires " + std::string(data, static_cast<size_t>(length));
    }
    BIO_free(text);
  }
  return description;
}

// The private key alone, so that a key that does not parse and one that belongs to another
// certificate are told apart.
EVP_PKEY* read_private_key(const std::string& file) {
  std::FILE* in = std::fopen(file.c_str(), "r");
  if (!in) {
    throw TlsSetupError("server.tls.key_file: cannot read '" + file + "': " + std::strerror(errno));
  }
  EVP_PKEY* key = PEM_read_PrivateKey(in, nullptr, no_passphrase, nullptr);
  std::fclose(in);
  if (!key) {
    throw TlsSetupError("server.tls.key_file: '" + file +
                        "' holds no usable PEM private key (an encrypted key is not supported): " +
                        openssl_reasons());
  }
  return key;
}

}  // namespace

ServerTls::ServerTls(TlsSettings settings)
    : settings_(std::move(settings)), current_(load(settings_)) {}

ServerTls::Loaded ServerTls::load(const TlsSettings& settings) {
  ERR_clear_error();
  require_readable("certificate_file", settings.certificate_file);
  require_readable("key_file", settings.key_file);
  warn_if_others_read(settings.key_file);
  if (!settings.client_ca_file.empty()) require_readable("client_ca_file", settings.client_ca_file);

  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  // Renegotiation is a client's lever for costing the server handshakes; nothing here needs it.
  SSL_CTX_set_options(
      native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_alpn_select_cb(native, select_http11, nullptr);
  static const unsigned char kSessionContext[] = "chatflow";
  SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);

  if (SSL_CTX_use_certificate_chain_file(native, settings.certificate_file.c_str()) != 1) {
    throw TlsSetupError("server.tls.certificate_file: '" + settings.certificate_file +
                        "' holds no usable PEM certificate: " + openssl_reasons());
  }
  X509* certificate = SSL_CTX_get0_certificate(native);
  EVP_PKEY* key = read_private_key(settings.key_file);
  bool matches = X509_check_private_key(certificate, key) == 1;
  bool used = matches && SSL_CTX_use_PrivateKey(native, key) == 1;
  EVP_PKEY_free(key);
  if (!matches) {
    ERR_clear_error();
    throw TlsSetupError("server.tls.key_file: '" + settings.key_file +
                        "' is not the private key of the certificate in '" +
                        settings.certificate_file + "'");
  }
  if (!used) {
    throw TlsSetupError("server.tls.key_file: '" + settings.key_file +
                        "' cannot be used: " + openssl_reasons());
  }

  if (!settings.client_ca_file.empty()) {
    const std::string& file = settings.client_ca_file;
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(file.c_str());
    if (!names || SSL_CTX_load_verify_locations(native, file.c_str(), nullptr) != 1) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      throw TlsSetupError("server.tls.client_ca_file: '" + file +
                          "' holds no usable PEM CA certificate: " + openssl_reasons());
    }
    SSL_CTX_set_client_CA_list(native, names);
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return Loaded{context, describe_certificate(certificate)};
}

std::shared_ptr<boost::asio::ssl::context> ServerTls::context() const {
  std::lock_guard lock(mutex_);
  return current_.context;
}

std::string ServerTls::describe() const {
  std::lock_guard lock(mutex_);
  return current_.description;
}

ServerTls::ReloadOutcome ServerTls::reload() {
  ReloadOutcome outcome;
  try {
    Loaded fresh = load(settings_);
    std::lock_guard lock(mutex_);
    current_ = std::move(fresh);
    outcome.ok = true;
    outcome.certificate = current_.description;
  } catch (const std::exception& error) {  // TlsSetupError, or Asio failing to make a context
    outcome.error = error.what();
    outcome.certificate = describe();
  }
  return outcome;
}

}  // namespace chatflow::server
