// Certificates made by openssl for the TLS tests, in a temporary directory removed with the
// object: a CA, a server certificate it signed for localhost and 127.0.0.1, one it signed for
// another name only, a client certificate it signed (mutual TLS), and a second CA that signed
// none of them. Tests skip when openssl is missing.
#pragma once

#include <string>

namespace chatflow::testing {

class TestCertificates {
 public:
  // True when an openssl command is on PATH.
  static bool available();

  // Makes them all; throws std::runtime_error with openssl's output when it fails.
  TestCertificates();
  ~TestCertificates();
  TestCertificates(const TestCertificates&) = delete;
  TestCertificates& operator=(const TestCertificates&) = delete;

  std::string ca() const { return file("ca.pem"); }
  std::string other_ca() const { return file("other_ca.pem"); }
  std::string server_certificate() const { return file("server.pem"); }
  std::string server_key() const { return file("server.key"); }
  // Signed by ca() for elsewhere.invalid only.
  std::string elsewhere_certificate() const { return file("elsewhere.pem"); }
  std::string elsewhere_key() const { return file("elsewhere.key"); }
  std::string client_certificate() const { return file("client.pem"); }
  std::string client_key() const { return file("client.key"); }
  const std::string& directory() const { return directory_; }

 private:
  std::string file(const std::string& name) const { return directory_ + "/" + name; }

  std::string directory_;
};

}  // namespace chatflow::testing
