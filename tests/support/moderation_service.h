// A loopback moderation service for the provider's and the moderation stages' tests: answers
// POSTs in the shape of OpenAI's /v1/moderations, flagging an input that contains one of the
// words it was given (under that word's category, with a score of 0.9; every other category
// scores 0.1), and, for an input that contains `hold_word`, answering nothing until the service
// goes (a provider that times out). It keeps every request it read, head and body.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace chatflow::testing {

class ModerationService {
 public:
  // word -> category it trips
  explicit ModerationService(std::map<std::string, std::string> flagged_words,
                             std::string hold_word = "slowpoke");
  ~ModerationService();
  ModerationService(const ModerationService&) = delete;
  ModerationService& operator=(const ModerationService&) = delete;

  std::string url() const;  // http://127.0.0.1:PORT/v1/moderations
  struct Received {
    std::string head;  // request line and header fields
    std::string body;
  };
  std::vector<Received> received() const;

 private:
  void serve();
  void answer(boost::asio::ip::tcp::socket socket);
  std::string verdict_for(const std::string& body) const;

  std::map<std::string, std::string> flagged_words_;
  std::string hold_word_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::vector<Received> received_;
  std::vector<std::thread> connections_;
  std::thread thread_;
};

}  // namespace chatflow::testing
