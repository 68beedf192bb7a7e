// The server object's own contract, without a pipeline: what a signal during start-up leaves.
#include "framework/server/http_server.h"

#include <thread>

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

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
  std::thread io([&] { server.run(/*handle_signals=*/false); });
  server.shutdown();
  io.join();  // the I/O loop ends once the shutdown has closed everything
  EXPECT_EQ(server.port(), port);
}

}  // namespace
}  // namespace chatflow::server
