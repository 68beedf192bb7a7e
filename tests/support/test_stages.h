// Stage and resource types that exist only in tests: each does one observable thing (count,
// block, fail, branch, generate from another thread) so runtime behaviour can be asserted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "framework/api/registry.h"

namespace chatflow::testing {

// Shared between a test and the stages it builds.
class TestProbe {
 public:
  void count(const std::string& stage);
  int calls(const std::string& stage) const;

  // A gate stages can wait at; `waiting()` tells how many are parked there.
  void wait_at_gate();
  void open_gate();
  int waiting() const { return waiting_.load(); }
  // Spins (with a limit) until `count` stages wait at the gate.
  bool wait_for_waiting(int count) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int> calls_;
  std::condition_variable gate_changed_;
  bool gate_open_ = false;
  std::atomic<int> waiting_{0};
};

// Types: pass, branch, router, generate, append, swallow_final, stream_fail, use_store;
// resources: store, other. See test_stages.cpp for what each does.
Registry test_registry(std::shared_ptr<TestProbe> probe = std::make_shared<TestProbe>());

}  // namespace chatflow::testing
