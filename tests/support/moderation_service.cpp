#include "support/moderation_service.h"

#include <chrono>
#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

namespace chatflow::testing {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

ModerationService::ModerationService(std::map<std::string, std::string> flagged_words,
                                     std::string hold_word)
    : flagged_words_(std::move(flagged_words)),
      hold_word_(std::move(hold_word)),
      acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
  thread_ = std::thread([this] { serve(); });
}

ModerationService::~ModerationService() {
  stopping_ = true;
  // Wakes the blocking accept (closing the socket would not, on Linux).
  ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  thread_.join();
  for (auto& connection : connections_)
    connection.join();
}

std::string ModerationService::url() const {
  return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) +
         "/v1/moderations";
}

std::vector<ModerationService::Received> ModerationService::received() const {
  std::lock_guard lock(mutex_);
  return received_;
}

void ModerationService::serve() {
  while (!stopping_) {
    boost::system::error_code error;
    tcp::socket socket(io_);
    acceptor_.accept(socket, error);
    if (error) return;
    connections_.emplace_back(
        [this, socket = std::move(socket)]() mutable { answer(std::move(socket)); });
  }
}

void ModerationService::answer(tcp::socket socket) {
  boost::system::error_code error;
  std::string request;
  char piece[4096];
  size_t head_end = std::string::npos;
  while ((head_end = request.find("\r\n\r\n")) == std::string::npos) {
    size_t got = socket.read_some(asio::buffer(piece), error);
    if (error) return;
    request.append(piece, got);
  }
  std::string head = request.substr(0, head_end);
  size_t length = 0;
  for (const char* name : {"Content-Length: ", "content-length: "}) {
    if (size_t at = head.find(name); at != std::string::npos)
      length = std::stoul(head.substr(at + std::string(name).size()));
  }
  std::string body = request.substr(head_end + 4);
  while (body.size() < length) {
    size_t got = socket.read_some(asio::buffer(piece), error);
    if (error) return;
    body.append(piece, got);
  }
  {
    std::lock_guard lock(mutex_);
    received_.push_back({head, body});
  }
  if (body.find(hold_word_) != std::string::npos) {
    // A service that never answers: the client's deadline has to end the call.
    while (!stopping_)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return;
  }
  std::string verdict = verdict_for(body);
  std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(verdict.size()) + "\r\nConnection: close\r\n\r\n" + verdict;
  asio::write(socket, asio::buffer(response), error);
}

std::string ModerationService::verdict_for(const std::string& body) const {
  std::string input;
  boost::system::error_code error;
  boost::json::value parsed = boost::json::parse(body, error);
  if (!error && parsed.is_object()) {
    if (auto* found = parsed.as_object().if_contains("input"); found && found->is_string())
      input = std::string(found->as_string());
  }
  boost::json::object categories;
  boost::json::object scores;
  bool flagged = false;
  for (const auto& [word, category] : flagged_words_) {
    bool hit = input.find(word) != std::string::npos;
    bool already = categories.contains(category) && categories[category].as_bool();
    categories[category] = hit || already;
    scores[category] = hit || already ? 0.9 : 0.1;
    flagged = flagged || hit;
  }
  boost::json::object result{
      {"flagged", flagged}, {"categories", categories}, {"category_scores", scores}};
  return boost::json::serialize(boost::json::object{
      {"id", "modr-test"}, {"model", "test"}, {"results", boost::json::array{result}}});
}

}  // namespace chatflow::testing
