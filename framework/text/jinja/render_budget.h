// What one render may take. A chat template can come inside a downloaded GGUF, and templates
// are programs: loops, string and list arithmetic and macros could build gigabytes or run for
// minutes, and nesting could exhaust the stack. The interpreter installs a RenderBudget for each
// render; the checks below are free outside one (values built to fill a render's variables).
// Going over a limit is a RenderError of kind `limit`, naming the limit.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace chatflow::jinja {

class Object;

struct RenderLimits {
  // The rendered text, and any one string built on the way; lists and dicts count 32 bytes an
  // item.
  size_t max_bytes = size_t{16} << 20;
  // Statements run and expressions evaluated.
  uint64_t max_steps = 20'000'000;
  std::chrono::milliseconds max_time{10'000};
  // Expressions, statements and calls evaluated within one another; lists, dicts and namespaces
  // held within one another.
  int max_depth = 512;
};

// Lists and dicts count this much per item against max_bytes.
inline constexpr size_t kItemBytes = 32;

class RenderBudget {
 public:
  // Installs itself as this thread's budget until destroyed (renders may nest: a template
  // rendered from inside another keeps its own budget).
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // One more step of the render (a loop's iteration).
  void step() {
    if (++steps_ % 1024 == 0 || steps_ > limits_.max_steps) over_time_or_steps();
  }

  // One more statement or expression, and one level deeper until the Level is destroyed.
  class Level {
   public:
    explicit Level(RenderBudget& budget);
    ~Level() { --budget_.depth_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;

   private:
    RenderBudget& budget_;
  };

  // Throw RenderError(limit) when this thread's render has a budget and a value of `bytes`
  // (nested `nesting` deep) would pass it.
  static void check_bytes(size_t bytes);
  static void check_nesting(int nesting);
  // An object made during this thread's render that holds values (a namespace): it lets go of
  // them when the render ends, so values that refer back to it are not kept alive by it.
  static void adopt(const std::shared_ptr<Object>& object);

 private:
  void over_time_or_steps();

  RenderLimits limits_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  RenderBudget* outer_;
  std::vector<std::weak_ptr<Object>> adopted_;
};

}  // namespace chatflow::jinja
