#include "support/recording_http_server.h"

#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace chatflow::testing {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

std::string lower(std::string text) {
  for (auto& c : text)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return text;
}

std::string trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  size_t end = text.find_last_not_of(" \t\r");
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

// The request line and header fields of `head` (up to its blank line).
RecordedRequest parse_head(const std::string& head) {
  RecordedRequest request;
  size_t line_end = head.find("\r\n");
  std::string request_line = head.substr(0, line_end);
  size_t first_space = request_line.find(' ');
  size_t second_space = request_line.find(' ', first_space + 1);
  request.method = request_line.substr(0, first_space);
  request.target = request_line.substr(first_space + 1, second_space - first_space - 1);
  for (size_t at = line_end + 2; at < head.size();) {
    size_t end = head.find("\r\n", at);
    if (end == std::string::npos || end == at) break;
    std::string field = head.substr(at, end - at);
    size_t colon = field.find(':');
    if (colon != std::string::npos)
      request.headers[lower(field.substr(0, colon))] = trimmed(field.substr(colon + 1));
    at = end + 2;
  }
  return request;
}

}  // namespace

std::string http_response(int status, const std::string& content_type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
         "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

RecordingServer::RecordingServer(Answer answer)
    : RecordingServer(
          Respond([answer = std::move(answer)](const RecordedRequest& request, const Write& write) {
            write(answer(request));
          })) {}

RecordingServer::RecordingServer(Respond respond)
    : respond_(std::move(respond)),
      acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
  thread_ = std::thread([this] { serve(); });
}

RecordingServer::~RecordingServer() {
  stopping_ = true;
  // Wakes the blocking accept (closing the socket would not, on Linux).
  ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  thread_.join();
}

std::string RecordingServer::url() const {
  return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
}

std::vector<RecordedRequest> RecordingServer::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

void RecordingServer::serve() {
  while (!stopping_) {
    boost::system::error_code error;
    tcp::socket socket(io_);
    acceptor_.accept(socket, error);
    if (error) return;
    answer(socket);
  }
}

// The whole request (its body by Content-Length) is read before answering: closing a connection
// with unread bytes would reset it, and the client could lose the answer.
void RecordingServer::answer(tcp::socket& socket) {
  boost::system::error_code error;
  std::string received;
  char piece[4096];
  size_t head_end;
  while ((head_end = received.find("\r\n\r\n")) == std::string::npos) {
    size_t got = socket.read_some(asio::buffer(piece), error);
    if (error) return;
    received.append(piece, got);
  }
  RecordedRequest request = parse_head(received.substr(0, head_end + 2));
  size_t length = 0;
  if (auto found = request.headers.find("content-length"); found != request.headers.end())
    length = std::stoul(found->second);
  request.body = received.substr(head_end + 4);
  while (request.body.size() < length) {
    size_t got = socket.read_some(asio::buffer(piece), error);
    if (error) return;
    request.body.append(piece, got);
  }
  {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
  }
  respond_(request, [&socket, &error](const std::string& bytes) {
    if (!error) asio::write(socket, asio::buffer(bytes), error);
  });
  socket.shutdown(tcp::socket::shutdown_send, error);
}

}  // namespace chatflow::testing
