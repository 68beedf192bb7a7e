// The server object's own contract: what a signal during start-up leaves, and where a reload's
// old pipeline is torn down.
#include "framework/server/http_server.h"

#include <arpa/inet.h>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <netinet/in.h>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "framework/api/registry.h"
#include "support/pipeline_helpers.h"
#include "support/test_stages.h"

namespace chatflow::server {
namespace {

using namespace std::chrono_literals;

// `chatflow serve` listens first, builds the pipeline, then prints the URL with port(). A SIGTERM
// while the pipeline was being built closed the listening socket, and port() then threw from
// inside Asio: the server aborted instead of exiting 0.
TEST(HttpServer, PortIsStillKnownAfterAShutdownClosedTheListeningSocket) {
  ServerSettings settings;
  settings.port = 0;
  settings.access_log = "off";
  HttpServer server(settings);
  server.listen();
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  std::thread io([&] { server.run(); });
  server.shutdown();
  io.join();  // the I/O loop ends once the shutdown has closed everything
  EXPECT_EQ(server.port(), port);
}

// `chatflow serve` prints its URL while the I/O thread may not have run yet: a SIGTERM sent the
// moment the URL appears used to meet the default action and kill the process (no drain, no exit
// 0), as a test that started and stopped servers quickly under load saw. Signals are handled from
// handle_signals() on, before run() starts.
TEST(HttpServer, ASignalBeforeTheIoThreadRunsIsAGracefulShutdown) {
  ServerSettings settings;
  settings.port = 0;
  settings.access_log = "off";
  HttpServer server(settings);
  server.listen();
  server.handle_signals();
  ASSERT_EQ(std::raise(SIGTERM), 0);  // would end this process without handle_signals()
  std::thread io([&] { server.run(); });
  io.join();  // run() returns only once the shutdown the signal started has completed
  EXPECT_NE(server.port(), 0);
}

// A blocking loopback client whose reads give up after `timeout`.
class LoopbackClient {
 public:
  LoopbackClient(uint16_t port, std::chrono::seconds timeout)
      : socket_(::socket(AF_INET, SOCK_STREAM, 0)) {
    timeval wait{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(socket_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~LoopbackClient() { ::close(socket_); }
  LoopbackClient(const LoopbackClient&) = delete;
  LoopbackClient& operator=(const LoopbackClient&) = delete;

  bool connected() const { return connected_; }
  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t sent = ::send(socket_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return;
      bytes.remove_prefix(static_cast<size_t>(sent));
    }
  }
  // What arrives until `text` is among it, the connection ends or the timeout passes.
  std::string read_until(std::string_view text) {
    std::string seen;
    char buffer[4096];
    while (seen.find(text) == std::string::npos) {
      ssize_t got = ::recv(socket_, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      seen.append(buffer, static_cast<size_t>(got));
    }
    return seen;
  }

 private:
  int socket_;
  bool connected_ = false;
};

// Lets a test hold a resource's destruction until it says so, and see when it starts and ends.
struct TeardownGate {
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false;
  bool released = false;
  bool done = false;

  void release() {
    std::lock_guard lock(mutex);
    released = true;
    changed.notify_all();
  }
  template <class Predicate>
  bool wait_for(std::chrono::seconds limit, Predicate predicate) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, predicate);
  }
};

// Its destructor blocks (up to 30 s) until the gate is released, as a teardown that joins a
// thread busy with a slow call would.
class SlowTeardownResource final : public Resource {
 public:
  explicit SlowTeardownResource(std::shared_ptr<TeardownGate> gate) : gate_(std::move(gate)) {}
  ~SlowTeardownResource() override {
    std::unique_lock lock(gate_->mutex);
    gate_->entered = true;
    gate_->changed.notify_all();
    gate_->changed.wait_for(lock, 30s, [&] { return gate_->released; });
    gate_->done = true;
    gate_->changed.notify_all();
  }

 private:
  std::shared_ptr<TeardownGate> gate_;
};

Registry registry_with_slow_teardown(const std::shared_ptr<TeardownGate>& gate) {
  Registry registry = testing::test_registry();
  ResourceTypeBuilder<NoConfig> type("slow_teardown", "blocks its destruction at a gate");
  type.create([gate](const NoConfig&, ResourceContext&) -> std::shared_ptr<Resource> {
    return std::make_shared<SlowTeardownResource>(gate);
  });
  registry.add(type.build());
  return registry;
}

// After a reload the old pipeline goes when its last user lets go of it. Here that is a
// connection whose request header was read before the reload (it holds the snapshot it was
// routed with) and whose body comes after: it lets go on the I/O thread. The teardown, however
// long, must happen elsewhere: /health on another connection is answered while it is blocked.
TEST(HttpServer, AReplacedPipelineIsTornDownOffTheIoThread) {
  auto gate = std::make_shared<TeardownGate>();
  Registry registry = registry_with_slow_teardown(gate);
  std::shared_ptr<Pipeline> first = testing::build_yaml(R"(version: 1
name: first
resources:
  slow: {type: slow_teardown}
stages:
  - {name: gen, type: generate, config: {chunks: 1}}
)",
                                                        registry);
  ASSERT_TRUE(first);
  ServerSettings settings;
  settings.port = 0;
  settings.access_log = "off";
  HttpServer server(settings);
  server.listen();
  server.serve(first);
  first.reset();  // the server's snapshot is the only owner now
  server.set_reloader([&registry](const Pipeline&, std::vector<std::string>&, std::string&) {
    return std::shared_ptr<Pipeline>(testing::build_yaml(R"(version: 1
name: second
stages:
  - {name: gen, type: generate, config: {chunks: 1}}
)",
                                                         registry));
  });
  std::thread io([&] { server.run(); });

  const std::string body = R"({"prompt":"x"})";
  LoopbackClient holder(server.port(), 10s);
  ASSERT_TRUE(holder.connected());
  holder.send(
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n");
  ASSERT_NE(holder.read_until("100 Continue").find("100 Continue"), std::string::npos);
  {
    LoopbackClient admin(server.port(), 10s);
    admin.send("POST /admin/reload HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string answer = admin.read_until("\"reloaded\":true");
    ASSERT_NE(answer.find("\"reloaded\":true"), std::string::npos) << answer;
  }
  // The old pipeline drains (it has nothing in flight) on a thread of its own; give it the time
  // to let go of its reference, so the holder's is the last.
  std::this_thread::sleep_for(300ms);
  holder.send(body);
  ASSERT_TRUE(gate->wait_for(10s, [&] { return gate->entered; }))
      << "the old pipeline was not torn down";

  LoopbackClient probe(server.port(), 5s);
  probe.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string health = probe.read_until(R"({"status":"ok"})");
  bool still_tearing_down = gate->wait_for(0s, [&] { return !gate->done; });
  EXPECT_NE(health.find(R"({"status":"ok"})"), std::string::npos)
      << "/health was not answered while the old pipeline was torn down; got: " << health;
  EXPECT_TRUE(still_tearing_down);

  gate->release();
  EXPECT_TRUE(gate->wait_for(10s, [&] { return gate->done; }));
  server.shutdown();
  io.join();
}

}  // namespace
}  // namespace chatflow::server
