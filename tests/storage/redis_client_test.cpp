// The Redis client against a real redis-server: URLs, commands and pipelines, scripts Redis has
// forgotten, AUTH and SELECT, the bounded pool, and failures that name the endpoint and end at
// their timeouts instead of hanging: nothing listening, a server that never answers, a restart.
#include "framework/storage/redis_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/redis_server.h"

namespace chatflow::redis {
namespace {

using testing::RedisServer;

#define SKIP_WITHOUT_REDIS()                       \
  if (RedisServer::binary().empty())               \
  GTEST_SKIP() << "redis-server is not installed " \
                  "(apt-get install redis-server)"

Client client_for(const std::string& url, size_t pool_size = 4, int timeout_ms = 500) {
  ClientOptions options;
  options.pool_size = pool_size;
  options.connect_timeout = std::chrono::milliseconds(timeout_ms);
  options.command_timeout = std::chrono::milliseconds(timeout_ms);
  options.retry_interval = std::chrono::milliseconds(100);
  return Client(parse_url(url), options);
}

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
  // A listening socket nobody accepts on: the connection completes in the backlog, and no
  // reply ever comes.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  Client client =
      client_for("redis://127.0.0.1:" + std::to_string(ntohs(address.sin_port)), 2, 100);
  try {
    client.command({"GET", "x"});
    ADD_FAILURE() << "a silent server answered";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no reply within 100 ms"), std::string::npos)
        << error.what();
  }
  close(listener);
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

}  // namespace
}  // namespace chatflow::redis
