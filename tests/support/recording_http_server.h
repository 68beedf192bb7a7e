// A loopback HTTP/1.1 server for tests of stages that call out (an agent's http tool, an upstream
// engine): it keeps every request it received (method, target, header fields, body) and answers
// each as the test's function says, then closes the connection. One connection at a time, on a
// thread of its own until the object goes.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace chatflow::testing {

struct RecordedRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// A whole HTTP/1.1 response with Content-Length and Connection: close.
std::string http_response(int status, const std::string& content_type, const std::string& body);

class RecordingServer {
 public:
  // Sends bytes to the client at once.
  using Write = std::function<void(const std::string& bytes)>;
  // The whole answer to each request, in one write.
  using Answer = std::function<std::string(const RecordedRequest&)>;
  // The answer written piece by piece: the function may wait between writes (until the client
  // has acted on what it got, say), and the connection closes when it returns.
  using Respond = std::function<void(const RecordedRequest&, const Write& write)>;

  explicit RecordingServer(Answer answer);
  explicit RecordingServer(Respond respond);
  ~RecordingServer();
  RecordingServer(const RecordingServer&) = delete;
  RecordingServer& operator=(const RecordingServer&) = delete;

  // http://127.0.0.1:PORT
  std::string url() const;
  std::vector<RecordedRequest> requests() const;

 private:
  void serve();
  void answer(boost::asio::ip::tcp::socket& socket);

  Respond respond_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::vector<RecordedRequest> requests_;
  std::thread thread_;
};

}  // namespace chatflow::testing
