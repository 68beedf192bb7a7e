// What the engine's scheduler tests share: an observer that records one sequence's answer, a
// greedy sequence, and the answer the plain generator gives it alone (what batching, preemption
// or speculation must not change).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/engine/generator.h"
#include "framework/engine/scheduler.h"

namespace chatflow::testing {

class RecordedAnswer final : public engine::SequenceObserver {
 public:
  void on_token(const engine::SampledToken& token, bool, const engine::SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    tokens_.push_back(token.token);
  }
  void on_finish(engine::FinishCause, const engine::SequenceUsage& usage) override {
    std::lock_guard lock(mutex_);
    usage_ = usage;
    done_ = true;
    changed_.notify_all();
  }
  void on_error(const std::string& message) override {
    std::lock_guard lock(mutex_);
    error_ = message;
    done_ = true;
    changed_.notify_all();
  }
  bool cancelled() const override { return false; }

  // False when it did not end within `limit`.
  bool wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [this] { return done_; });
  }
  bool done() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  std::vector<engine::TokenId> tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  engine::SequenceUsage usage() const {
    std::lock_guard lock(mutex_);
    return usage_;
  }
  std::string error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<engine::TokenId> tokens_;
  engine::SequenceUsage usage_;
  std::string error_;
  bool done_ = false;
};

inline engine::SequenceSpec greedy_sequence(const engine::Model& model, const std::string& text,
                                            int64_t max_tokens) {
  engine::SequenceSpec spec;
  spec.prompt = model.tokenizer().encode(text, true);
  spec.sampling.temperature = 0;
  spec.max_tokens = max_tokens;
  spec.ignore_eos = true;
  return spec;
}

// The tokens the plain generator gives `spec` on its own.
inline std::vector<engine::TokenId> generated_alone(
    const std::shared_ptr<const engine::Model>& model, const engine::SequenceSpec& spec) {
  engine::Generator generator(model, 1);
  engine::GenerationRequest request;
  request.prompt = spec.prompt;
  request.sampling = spec.sampling;
  request.max_tokens = spec.max_tokens;
  request.ignore_eos = spec.ignore_eos;
  return generator.generate(request).tokens;
}

}  // namespace chatflow::testing
