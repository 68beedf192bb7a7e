#include "framework/text/jinja/tracked_string.h"

#include <algorithm>

#include "framework/text/jinja/render_budget.h"

namespace chatflow::jinja {

TrackedString TrackedString::from_template(std::string text) {
  TrackedString result;
  result.text_ = std::move(text);
  if (!result.text_.empty()) result.template_ranges_.emplace_back(0, result.text_.size());
  return result;
}

TrackedString TrackedString::from_data(std::string text) {
  TrackedString result;
  result.text_ = std::move(text);
  return result;
}

bool TrackedString::all_from_template() const {
  return text_.empty() || (template_ranges_.size() == 1 && template_ranges_[0].first == 0 &&
                           template_ranges_[0].second == text_.size());
}

void TrackedString::mark(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!template_ranges_.empty() && template_ranges_.back().second == begin) {
    template_ranges_.back().second = end;
  } else {
    template_ranges_.emplace_back(begin, end);
  }
}

void TrackedString::append(const TrackedString& other) {
  append_slice(other, 0, other.size());
}

void TrackedString::append(std::string_view text, bool from_template) {
  RenderBudget::check_bytes(text_.size() + text.size());
  size_t begin = text_.size();
  text_ += text;
  if (from_template) mark(begin, text_.size());
}

void TrackedString::append_slice(const TrackedString& source, size_t begin, size_t end) {
  if (begin >= end) return;
  RenderBudget::check_bytes(text_.size() + (end - begin));
  size_t offset = text_.size();
  text_.append(source.text_, begin, end - begin);
  for (const auto& [range_begin, range_end] : source.template_ranges_) {
    if (range_end <= begin) continue;
    if (range_begin >= end) break;
    mark(offset + std::max(range_begin, begin) - begin, offset + std::min(range_end, end) - begin);
  }
}

TrackedString TrackedString::slice(size_t begin, size_t end) const {
  TrackedString result;
  result.append_slice(*this, begin, end);
  return result;
}

}  // namespace chatflow::jinja
