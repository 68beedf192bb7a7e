#include "support/test_certificates.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace chatflow::testing {
namespace {

// EC keys: made in milliseconds, where RSA keys take a noticeable part of a second each.
const char kScript[] = R"(set -e
key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
for ca in ca other_ca; do
  openssl req -x509 $key -days 2 -subj "/CN=chatflow test $ca" -keyout $ca.key -out $ca.pem
done
sign() {
  openssl req $key -subj "/CN=$2" -keyout $1.key -out $1.csr
  printf "$3" > $1.ext
  openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile $1.ext -out $1.pem
}
sign server localhost 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'
sign elsewhere elsewhere.invalid 'subjectAltName=DNS:elsewhere.invalid\nextendedKeyUsage=serverAuth\n'
sign client chatflow-client 'extendedKeyUsage=clientAuth\n'
)";

}  // namespace

bool TestCertificates::available() {
  return std::system("openssl version >/dev/null 2>&1") == 0;
}

TestCertificates::TestCertificates() {
  char pattern[] = "/tmp/chatflow-certificates-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("cannot make a temporary directory");
  directory_ = pattern;
  std::ofstream(directory_ + "/make.sh") << kScript;
  std::string command = "cd '" + directory_ + "' && sh make.sh >make.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ostringstream log;
    log << std::ifstream(directory_ + "/make.log").rdbuf();
    throw std::runtime_error("openssl could not make the test certificates: " + log.str());
  }
}

TestCertificates::~TestCertificates() {
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

}  // namespace chatflow::testing
