// A token constraint whose first mask takes as long as a test wants (tests of the scheduler and
// of what happens while a sequence waits for its mask).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "framework/engine/token_constraint.h"

namespace chatflow::testing {

// A constraint whose mask takes as long as the test wants, like a grammar state whose mask is a
// long trie walk: the work it hands out runs until the gate opens (or it is abandoned); a
// scheduler that asked restrict() without that work would wait in restrict() just as long.
class SlowMask final : public engine::TokenConstraint {
 public:
  struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    bool open = false;
    bool started = false;
    bool abandoned = false;

    void wait_open_or_abandoned() {
      std::unique_lock lock(mutex);
      changed.wait(lock, [this] { return open || abandoned; });
    }
    template <class Predicate>
    bool wait_for(Predicate predicate) {
      std::unique_lock lock(mutex);
      return changed.wait_for(lock, std::chrono::seconds(20), predicate);
    }
    void set(bool Gate::*flag) {
      std::lock_guard lock(mutex);
      this->*flag = true;
      changed.notify_all();
    }
  };

  explicit SlowMask(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}

  void restrict(std::span<float>) override {
    if (!handed_out_) gate_->wait_open_or_abandoned();  // computed here, on the engine thread
  }
  void accept(engine::TokenId) override {}
  bool complete() const override { return false; }
  bool engaged() const override { return false; }
  std::function<void()> prepare() override {
    if (handed_out_) return {};
    handed_out_ = true;
    return [gate = gate_] {
      gate->set(&Gate::started);
      gate->wait_open_or_abandoned();
    };
  }
  void abandon() override { gate_->set(&Gate::abandoned); }

 private:
  std::shared_ptr<Gate> gate_;
  bool handed_out_ = false;
};

}  // namespace chatflow::testing
