#include "framework/text/jinja/render_budget.h"

#include <string>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {
namespace {

thread_local RenderBudget* current_budget = nullptr;

[[noreturn]] void over(const std::string& what) {
  throw RenderError(RenderError::Kind::limit, "the chat template's render " + what);
}

std::string size_text(size_t bytes) {
  if (bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

RenderBudget::RenderBudget(const RenderLimits& limits)
    : limits_(limits),
      deadline_(std::chrono::steady_clock::now() + limits.max_time),
      outer_(current_budget) {
  current_budget = this;
}

RenderBudget::~RenderBudget() {
  current_budget = outer_;
  for (const auto& adopted : adopted_)
    if (auto object = adopted.lock()) object->release_values();
}

void RenderBudget::adopt(const std::shared_ptr<Object>& object) {
  if (current_budget != nullptr) current_budget->adopted_.push_back(object);
}

RenderBudget::Level::Level(RenderBudget& budget) : budget_(budget) {
  if (++budget_.depth_ > budget_.limits_.max_depth) {
    --budget_.depth_;
    over("nests expressions, statements and calls deeper than " +
         std::to_string(budget_.limits_.max_depth) + " levels");
  }
  budget_.step();
}

void RenderBudget::over_time_or_steps() {
  if (steps_ > limits_.max_steps)
    over("took more than " + std::to_string(limits_.max_steps) + " steps");
  if (std::chrono::steady_clock::now() > deadline_)
    over("took more than " + std::to_string(limits_.max_time.count()) + " ms");
}

void RenderBudget::check_bytes(size_t bytes) {
  if (current_budget != nullptr && bytes > current_budget->limits_.max_bytes)
    over("built a value or text of more than " + size_text(current_budget->limits_.max_bytes));
}

void RenderBudget::check_nesting(int nesting) {
  if (current_budget != nullptr && nesting > current_budget->limits_.max_depth)
    over("nests lists, dicts or namespaces deeper than " +
         std::to_string(current_budget->limits_.max_depth) + " levels");
}

}  // namespace chatflow::jinja
