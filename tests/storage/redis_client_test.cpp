// The Redis client against a real redis-server: URLs, commands and pipelines, scripts Redis has
// forgotten, AUTH and SELECT, the bounded pool, and failures that name the endpoint and end at
// their timeouts instead of hanging: nothing listening, a server that never answers, a restart.
// Over TLS (rediss://) against a redis-server with openssl-made certificates: commands and
// scripts, mutual TLS, and the certificates it must refuse (unknown CA, another name).
#include "framework/storage/redis_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/redis_server.h"
#include "support/test_certificates.h"

namespace chatflow::redis {
namespace {

using testing::RedisServer;

#define SKIP_WITHOUT_REDIS()                       \
  if (RedisServer::binary().empty())               \
  GTEST_SKIP() << "redis-server is not installed " \
                  "(apt-get install redis-server)"

Client client_for(const std::string& url, size_t pool_size = 4, int timeout_ms = 500,
                  net::TlsClientOptions tls = {}, std::string server_name = {}) {
  ClientOptions options;
  options.pool_size = pool_size;
  options.connect_timeout = std::chrono::milliseconds(timeout_ms);
  options.command_timeout = std::chrono::milliseconds(timeout_ms);
  options.retry_interval = std::chrono::milliseconds(100);
  options.tls = std::move(tls);
  Endpoint endpoint = parse_url(url);
  endpoint.server_name = std::move(server_name);
  return Client(endpoint, options);
}

// A listening socket on a free loopback port, closed with the object. Nobody accepting on it,
// connections complete in the backlog and no byte ever comes back.
class LoopbackListener {
 public:
  LoopbackListener() {
    descriptor_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(descriptor_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        listen(descriptor_, 16) != 0 ||
        getsockname(descriptor_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("cannot listen on loopback");
    port_ = ntohs(address.sin_port);
  }
  ~LoopbackListener() { close(descriptor_); }
  int descriptor() const { return descriptor_; }
  int port() const { return port_; }
  std::string url(const std::string& scheme) const {
    return scheme + "://127.0.0.1:" + std::to_string(port_);
  }

 private:
  int descriptor_ = -1;
  int port_ = 0;
};

TEST(RedisUrl, ReadsHostPortCredentialsAndDatabase) {
  Endpoint full = parse_url("redis://app:s3cret@cache.internal:6380/3");
  EXPECT_EQ(full.host, "cache.internal");
  EXPECT_EQ(full.port, 6380);
  EXPECT_EQ(full.user, "app");
  EXPECT_EQ(full.password, "s3cret");
  EXPECT_EQ(full.database, 3);
  EXPECT_EQ(full.name(), "cache.internal:6380") << "a name never shows the password";

  Endpoint plain = parse_url("redis://127.0.0.1");
  EXPECT_EQ(plain.port, 6379);
  EXPECT_EQ(plain.database, 0);
  EXPECT_TRUE(plain.user.empty() && plain.password.empty());

  Endpoint socket = parse_url("unix:///run/redis/redis.sock?db=2");
  EXPECT_EQ(socket.socket_path, "/run/redis/redis.sock");
  EXPECT_EQ(socket.database, 2);
  EXPECT_EQ(socket.name(), "/run/redis/redis.sock");
}

TEST(RedisUrl, RejectsWhatItCannotRead) {
  for (const char* url : {"http://127.0.0.1:6379", "redis://", "redis://host:port",
                          "redis://host:0", "redis://host:6379/x", "unix://relative.sock"}) {
    try {
      parse_url(url);
      ADD_FAILURE() << url << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(url), std::string::npos) << error.what();
    }
  }
}

TEST(RedisClient, CommandsPipelinesAndErrorReplies) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Client client = client_for(server.url());
  EXPECT_EQ(client.command({"SET", "greeting", std::string("hi\0there", 8)}).text, "OK");
  EXPECT_EQ(client.command({"GET", "greeting"}).text, std::string("hi\0there", 8))
      << "values are binary-safe";
  EXPECT_TRUE(client.command({"GET", "missing"}).is_nil());

  std::vector<Reply> replies = client.pipeline(
      {{"INCR", "counter"}, {"INCR", "counter"}, {"LPUSH", "greeting", "x"}, {"INCR", "counter"}});
  ASSERT_EQ(replies.size(), 4u);
  EXPECT_EQ(replies[0].integer, 1);
  EXPECT_EQ(replies[1].integer, 2);
  EXPECT_EQ(replies[2].kind, Reply::Kind::error) << "an error reply stays in its place";
  EXPECT_EQ(replies[3].integer, 3) << "and the connection goes on";

  try {
    client.command({"LPUSH", "greeting", "x"});
    ADD_FAILURE() << "an error reply was not thrown";
  } catch (const Error& error) {
    std::string what = error.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << what;
    EXPECT_NE(what.find("WRONGTYPE"), std::string::npos) << what;
  }
}

TEST(RedisClient, ScriptsRunAgainAfterRedisForgetsThem) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Client client = client_for(server.url());
  Script add("return tonumber(ARGV[1]) + redis.call('INCRBY', KEYS[1], ARGV[2])");
  EXPECT_EQ(client.run(add, {"total"}, {"100", "5"}).integer, 105);
  client.command({"SCRIPT", "FLUSH"});
  EXPECT_EQ(client.run(add, {"total"}, {"100", "5"}).integer, 110);
  Script broken("return redis.call('NO_SUCH_COMMAND')");
  EXPECT_THROW(client.run(broken, {}, {}), Error);
}

TEST(RedisClient, AuthenticatesAndSelectsTheDatabase) {
  SKIP_WITHOUT_REDIS();
  RedisServer server({"--requirepass", "s3cret"});
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  Client anonymous = client_for("redis://" + address);
  try {
    anonymous.command({"GET", "x"});
    ADD_FAILURE() << "no password, yet answered";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("NOAUTH"), std::string::npos) << error.what();
  }
  Client wrong = client_for("redis://default:wrong@" + address);
  try {
    wrong.command({"PING"});
    ADD_FAILURE() << "a wrong password was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("AUTH refused"), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find("wrong"), std::string::npos)
        << "the password is in the error: " << error.what();
  }
  Client second = client_for("redis://default:s3cret@" + address + "/2");
  Client first = client_for("redis://:s3cret@" + address + "/0");
  second.command({"SET", "where", "two"});
  EXPECT_TRUE(first.command({"GET", "where"}).is_nil()) << "SELECT 2 was not applied";
  EXPECT_EQ(second.command({"GET", "where"}).text, "two");
}

TEST(RedisClient, AUnixSocketServesWithItsDatabase) {
  SKIP_WITHOUT_REDIS();
  std::string socket_path = "/tmp/chatflow-redis-test-" + std::to_string(getpid()) + "-" +
                            std::to_string(rand()) + ".sock";
  RedisServer server({"--unixsocket", socket_path});
  Client by_socket = client_for("unix://" + socket_path + "?db=3");
  by_socket.command({"SET", "where", "socket"});
  Client by_port = client_for(server.url() + "/3");
  EXPECT_EQ(by_port.command({"GET", "where"}).text, "socket") << "the same server, database 3";
  Client missing = client_for("unix:///nonexistent/redis.sock");
  std::string error;
  EXPECT_FALSE(missing.ping(&error));
  EXPECT_NE(error.find("redis /nonexistent/redis.sock: connect failed"), std::string::npos)
      << error;
}

TEST(RedisClient, ThePoolOpensAtMostPoolSizeConnections) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Client client = client_for(server.url(), 2, 2000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        client.command({"INCR", "hits"});
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(client.command({"GET", "hits"}).text, "400");
  Client observer = client_for(server.url(), 1);
  std::string clients = observer.command({"CLIENT", "LIST"}).text;
  size_t lines = std::count(clients.begin(), clients.end(), '\n');
  EXPECT_LE(lines, 3u) << "at most two pooled connections and the observer's:\n" << clients;
}

TEST(RedisClient, NothingListeningFailsNamingTheEndpoint) {
  int port = testing::free_port();
  Client client = client_for("redis://127.0.0.1:" + std::to_string(port));
  std::string error;
  EXPECT_FALSE(client.ping(&error));
  EXPECT_NE(error.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << error;
  EXPECT_NE(error.find("connect failed"), std::string::npos) << error;
}

TEST(RedisClient, AServerThatNeverAnswersTimesOut) {
  LoopbackListener listener;
  Client client = client_for(listener.url("redis"), 2, 100);
  auto started = std::chrono::steady_clock::now();
  try {
    client.command({"GET", "x"});
    ADD_FAILURE() << "a silent server answered";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no reply within 100 ms"), std::string::npos)
        << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
      << "a generous bound: the call must end at its timeout, not hang";
}

// A reply trickled one byte at a time, each well within the timeout, still ends the call at its
// command timeout: the timeout bounds the call, not each read.
TEST(RedisClient, AReplyTrickledByteByByteEndsAtTheCommandTimeout) {
  LoopbackListener listener;
  std::thread trickler([&listener] {
    int peer = accept(listener.descriptor(), nullptr, nullptr);
    char request[256];
    (void)!read(peer, request, sizeof request);
    const std::string reply = "$1000\r\n" + std::string(1000, 'x') + "\r\n";
    for (char byte : reply) {
      if (send(peer, &byte, 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    close(peer);
  });
  Client client = client_for(listener.url("redis"), 1, 300);
  auto started = std::chrono::steady_clock::now();
  try {
    client.command({"GET", "x"});
    ADD_FAILURE() << "the whole reply takes 50 s, yet the call waited for it";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no reply within 300 ms"), std::string::npos)
        << error.what();
  }
  // A generous bound, far below the 50 s the reply takes: the call ended at its timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  shutdown(listener.descriptor(), SHUT_RDWR);  // wakes the accept if no connection came
  trickler.join();
}

TEST(RedisClient, WorksAgainAfterARestartWithoutBeingRebuilt) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Client client = client_for(server.url());
  client.command({"SET", "before", "1"});
  server.stop();
  EXPECT_THROW(client.command({"GET", "before"}), Error) << "the pooled connection is dead";
  EXPECT_THROW(client.command({"GET", "before"}), Error) << "nothing listens";
  server.start();
  bool answered = false;
  for (int attempt = 0; attempt < 100 && !answered; ++attempt) {
    answered = client.ping();
    if (!answered) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(answered) << "the client never reconnected";
  EXPECT_TRUE(client.command({"GET", "before"}).is_nil())
      << "a restarted server without saves is empty";
}

TEST(RedisUrl, RedissIsTls) {
  Endpoint secure = parse_url("rediss://app:s3cret@cache.internal:6380/1");
  EXPECT_TRUE(secure.tls);
  EXPECT_EQ(secure.host, "cache.internal");
  EXPECT_EQ(secure.port, 6380);
  EXPECT_EQ(secure.password, "s3cret");
  EXPECT_EQ(secure.database, 1);
  EXPECT_EQ(parse_url("rediss://cache.internal").port, 6379);
  EXPECT_FALSE(parse_url("redis://cache.internal").tls);
}

#define SKIP_WITHOUT_REDIS_OR_OPENSSL()        \
  SKIP_WITHOUT_REDIS();                        \
  if (!testing::TestCertificates::available()) \
  GTEST_SKIP() << "openssl is not installed (apt-get install openssl)"

class RedisTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (RedisServer::binary().empty() || !testing::TestCertificates::available()) return;
    certificates_ = new testing::TestCertificates();
  }
  static void TearDownTestSuite() {
    delete certificates_;
    certificates_ = nullptr;
  }
  static testing::RedisTls server_tls(bool require_client_certificates = false) {
    return {certificates_->server_certificate(), certificates_->server_key(), certificates_->ca(),
            require_client_certificates};
  }
  static net::TlsClientOptions trusting(const std::string& ca_file) {
    net::TlsClientOptions options;
    options.ca_file = ca_file;
    return options;
  }
  static std::string refusal(Client& client) {
    std::string error;
    EXPECT_FALSE(client.ping(&error)) << "a connection that must be refused answered";
    return error;
  }

  static testing::TestCertificates* certificates_;
};

testing::TestCertificates* RedisTls::certificates_ = nullptr;

TEST_F(RedisTls, CommandsPipelinesAndScriptsRunOverVerifiedTls) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  RedisServer server({}, server_tls());
  Client client = client_for(server.url(), 2, 2000, trusting(certificates_->ca()));
  EXPECT_EQ(client.command({"SET", "greeting", std::string("hi\0there", 8)}).text, "OK");
  EXPECT_EQ(client.command({"GET", "greeting"}).text, std::string("hi\0there", 8));
  std::vector<Reply> replies = client.pipeline({{"INCR", "n"}, {"INCR", "n"}, {"GET", "n"}});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[2].text, "2");
  std::string large(300 * 1024, 'v');  // many TLS records each way
  client.command({"SET", "large", large});
  EXPECT_EQ(client.command({"GET", "large"}).text, large);
  Script add("return tonumber(ARGV[1]) + redis.call('INCRBY', KEYS[1], ARGV[2])");
  EXPECT_EQ(client.run(add, {"total"}, {"100", "5"}).integer, 105);
  client.command({"SCRIPT", "FLUSH"});
  EXPECT_EQ(client.run(add, {"total"}, {"100", "5"}).integer, 110);
  // Connecting by address: the certificate names 127.0.0.1 too.
  Client by_address = client_for("rediss://127.0.0.1:" + std::to_string(server.port()), 1, 2000,
                                 trusting(certificates_->ca()));
  EXPECT_EQ(by_address.command({"GET", "n"}).text, "2");
}

TEST_F(RedisTls, AnUnknownCaIsRefusedNamingTheEndpoint) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  RedisServer server({}, server_tls());
  Client client = client_for(server.url(), 1, 2000, trusting(certificates_->other_ca()));
  std::string error = refusal(client);
  EXPECT_NE(error.find("localhost:" + std::to_string(server.port())), std::string::npos) << error;
  EXPECT_NE(error.find("certificate verify failed"), std::string::npos) << error;
}

TEST_F(RedisTls, ACertificateForAnotherNameIsRefused) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  RedisServer server({}, server_tls());
  Client client =
      client_for(server.url(), 1, 2000, trusting(certificates_->ca()), "redis.internal");
  std::string error = refusal(client);
  EXPECT_NE(error.find("the certificate is not for 'redis.internal'"), std::string::npos) << error;

  // server_name names what the certificate must carry, whatever the URL connects to.
  Client renamed = client_for("rediss://127.0.0.1:" + std::to_string(server.port()), 1, 2000,
                              trusting(certificates_->ca()), "localhost");
  EXPECT_TRUE(renamed.ping());
}

TEST_F(RedisTls, MutualTlsNeedsTheClientCertificate) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  RedisServer server({}, server_tls(true));
  Client anonymous = client_for(server.url(), 1, 2000, trusting(certificates_->ca()));
  std::string error = refusal(anonymous);
  EXPECT_NE(error.find("localhost:" + std::to_string(server.port())), std::string::npos) << error;

  net::TlsClientOptions with_certificate = trusting(certificates_->ca());
  with_certificate.certificate_file = certificates_->client_certificate();
  with_certificate.key_file = certificates_->client_key();
  Client known = client_for(server.url(), 1, 2000, with_certificate);
  EXPECT_EQ(known.command({"PING"}).text, "PONG");
}

// A plain Redis reads the ClientHello as the start of a command and waits for its end: the
// handshake fails at the connect timeout, and nothing is ever sent in plain text.
TEST_F(RedisTls, ATlsClientNeverFallsBackToPlainText) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  RedisServer plain;
  Client client = client_for("rediss://localhost:" + std::to_string(plain.port()), 1, 300,
                             trusting(certificates_->ca()));
  try {
    client.command({"SET", "leaked", "1"});
    ADD_FAILURE() << "a TLS client was answered by a plain server";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("connect failed"), std::string::npos) << error.what();
  }
  Client observer = client_for(plain.url());
  EXPECT_TRUE(observer.command({"GET", "leaked"}).is_nil()) << "the command went in plain text";
}

TEST_F(RedisTls, AHandshakeNobodyAnswersEndsAtTheConnectTimeout) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  LoopbackListener listener;
  Client client = client_for(listener.url("rediss"), 1, 150, trusting(certificates_->ca()));
  auto started = std::chrono::steady_clock::now();
  std::string error = refusal(client);
  EXPECT_NE(error.find("connect failed: no answer within 150 ms"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

TEST_F(RedisTls, UnusableFilesAreRefusedNamingTheOption) {
  SKIP_WITHOUT_REDIS_OR_OPENSSL();
  auto problem = [](net::TlsClientOptions options) {
    try {
      client_for("rediss://localhost:6379", 1, 100, std::move(options));
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(
      problem(trusting("/nonexistent/ca.pem")).find("ca_file '/nonexistent/ca.pem' cannot be read"),
      std::string::npos);
  EXPECT_NE(problem(trusting(certificates_->server_key())).find("ca_file"), std::string::npos)
      << "a key is no CA certificate";
  net::TlsClientOptions half = trusting(certificates_->ca());
  half.certificate_file = certificates_->client_certificate();
  EXPECT_NE(problem(half).find("go together"), std::string::npos);
  net::TlsClientOptions mismatched = half;
  mismatched.key_file = certificates_->server_key();
  EXPECT_NE(problem(mismatched).find("is not the key of certificate_file"), std::string::npos)
      << problem(mismatched);
}

}  // namespace
}  // namespace chatflow::redis
