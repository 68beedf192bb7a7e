#include "framework/api/request.h"

namespace chatflow {

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::content_filter:
      return "content_filter";
  }
  return "stop";
}

std::string Identity::owner() const {
  if (!user.empty()) return "user:" + user;
  if (!key_id.empty()) return "key:" + key_id;
  return {};
}

bool Identity::has_role(std::string_view role) const {
  for (const auto& held : roles) {
    if (held == role) return true;
  }
  return false;
}

std::optional<std::string_view> Request::header(std::string_view name) const {
  for (const auto& [field, value] : headers) {
    if (field == name) return std::string_view(value);
  }
  return std::nullopt;
}

void Request::set_response_header(std::string name, std::string value) {
  std::lock_guard lock(notes_mutex_);
  for (auto& [existing, existing_value] : response_headers_) {
    if (existing == name) {
      existing_value = std::move(value);
      return;
    }
  }
  response_headers_.emplace_back(std::move(name), std::move(value));
}

HeaderFields Request::response_headers() const {
  std::lock_guard lock(notes_mutex_);
  return response_headers_;
}

void Request::on_release(std::function<void(const Request&)> callback) {
  std::lock_guard lock(notes_mutex_);
  release_callbacks_.push_back(std::move(callback));
}

void Request::on_reserve(std::function<bool(int64_t tokens)> reserver) {
  std::lock_guard lock(notes_mutex_);
  reservers_.push_back(std::move(reserver));
}

bool Request::reserve_aside(int64_t tokens) {
  std::vector<std::function<bool(int64_t)>> reservers;
  {
    std::lock_guard lock(notes_mutex_);
    reservers = reservers_;
  }
  for (const auto& reserve : reservers) {
    if (!reserve(tokens)) return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> Request::annotations() const {
  std::lock_guard lock(notes_mutex_);
  return annotations_;
}

std::vector<int32_t> Request::annotation_stages() const {
  std::lock_guard lock(notes_mutex_);
  return annotation_stages_;
}

void Request::annotate(std::string key, std::string value) {
  std::lock_guard lock(notes_mutex_);
  for (size_t i = 0; i < annotations_.size(); ++i) {
    if (annotations_[i].first == key) {
      annotations_[i].second = std::move(value);
      annotation_stages_[i] = detail::running_stage;
      return;
    }
  }
  annotations_.emplace_back(std::move(key), std::move(value));
  annotation_stages_.push_back(detail::running_stage);
}

std::optional<std::string> Request::annotation(std::string_view key) const {
  std::lock_guard lock(notes_mutex_);
  for (const auto& [existing_key, value] : annotations_) {
    if (existing_key == key) return value;
  }
  return std::nullopt;
}

void Request::attach(const std::string& key, std::shared_ptr<void> value) {
  for (auto& [existing_key, existing_value] : attachments_) {
    if (existing_key == key) {
      existing_value = std::move(value);
      return;
    }
  }
  attachments_.emplace_back(key, std::move(value));
}

std::shared_ptr<void> Request::find_attachment(const std::string& key) const {
  for (const auto& [existing_key, value] : attachments_) {
    if (existing_key == key) return value;
  }
  return nullptr;
}

std::string Request::last_user_message() const {
  for (auto message = messages.rbegin(); message != messages.rend(); ++message) {
    if (message->role == "user") return message->content;
  }
  return {};
}

}  // namespace chatflow
