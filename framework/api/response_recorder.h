// Lets a request stage see the answer it let through: the stage wraps the request's sink, and
// the wrapper hears every chunk the client gets (after every stream stage: moderation included)
// before passing it on. Caches store complete answers this way, session history records turns.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/api/request.h"
#include "framework/api/sink.h"

namespace chatflow {

// The answer as the client received it.
struct RecordedAnswer {
  // The deltas in order, each with only its text, reasoning and tool calls (chunks with none of
  // them dropped).
  std::vector<Chunk> chunks;
  std::optional<FinishReason> finish;
  Usage usage;
  bool failed = false;  // ended with an error (or was cancelled)

  std::string text() const;       // the answer itself (reasoning aside)
  std::string reasoning() const;  // the reasoning that came with it
};

class RecordingSink final : public Sink {
 public:
  // `before_last` runs before the final chunk reaches `inner` (and so before the client has the
  // whole answer); `after` runs once the request finished, whatever the outcome. Either may be
  // empty. Both run on pipeline threads.
  RecordingSink(std::shared_ptr<Sink> inner,
                std::function<void(const Request&, const RecordedAnswer&)> before_last,
                std::function<void(const Request&, const RecordedAnswer&)> after);

  void on_chunk(Request& request, const Chunk& chunk) override;
  void on_finish(Request& request) override;
  void on_released(const Request& request) override;

 private:
  std::shared_ptr<Sink> inner_;
  std::function<void(const Request&, const RecordedAnswer&)> before_last_;
  std::function<void(const Request&, const RecordedAnswer&)> after_;
  RecordedAnswer answer_;
};

// Wraps `request.sink` (call from a request stage, before the stream starts).
void record_answer(Request& request,
                   std::function<void(const Request&, const RecordedAnswer&)> before_last,
                   std::function<void(const Request&, const RecordedAnswer&)> after);

}  // namespace chatflow
