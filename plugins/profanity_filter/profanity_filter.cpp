// profanity_filter: a stream stage replacing listed words in the answer (whole words,
// case-insensitive) with `replacement`. A word can arrive split over chunks, so the text after
// the last word boundary is held back until the next chunk shows where the word ends.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "chatflow_plugin.hpp"

namespace {

bool word_character(unsigned char c) {
  return std::isalnum(c) || c >= 0x80 || c == '\'';
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

class ProfanityFilter final : public chatflow_plugin::StreamStage {
 public:
  explicit ProfanityFilter(const chatflow_plugin::Config& config)
      : replacement_(config.string("replacement")) {
    for (auto& word : config.list("words"))
      words_.push_back(lower(word));
  }

  void* open(chatflow_plugin::Request&) override { return new std::string; }
  void delete_state(void* state) override { delete static_cast<std::string*>(state); }

  void chunk(chatflow_plugin::Request& request, std::string_view text, bool last,
             chatflow_plugin::Output& out, void* state) override {
    std::string& pending = *static_cast<std::string*>(state);
    pending.append(text);
    // Everything up to the last non-word character is complete; the rest may continue.
    size_t complete = pending.size();
    if (!last) {
      while (complete > 0 && word_character(static_cast<unsigned char>(pending[complete - 1])))
        --complete;
    }
    if (complete == 0) return;
    std::string ready = pending.substr(0, complete);
    pending.erase(0, complete);
    size_t replaced = 0;
    out.emit(clean(ready, replaced));
    if (replaced > 0) request.annotate("profanity", std::to_string(replaced));
  }

 private:
  std::string clean(const std::string& text, size_t& replaced) const {
    std::string result;
    for (size_t i = 0; i < text.size();) {
      if (!word_character(static_cast<unsigned char>(text[i]))) {
        result += text[i++];
        continue;
      }
      size_t end = i;
      while (end < text.size() && word_character(static_cast<unsigned char>(text[end])))
        ++end;
      std::string word = text.substr(i, end - i);
      if (std::find(words_.begin(), words_.end(), lower(word)) != words_.end()) {
        result += replacement_;
        ++replaced;
      } else {
        result += word;
      }
      i = end;
    }
    return result;
  }

  std::vector<std::string> words_;
  std::string replacement_;
};

const cf_config_key kKeys[] = {
    {"words", CF_VALUE_STRING_LIST, "darn,heck,dang", 0, "words to replace"},
    {"replacement", CF_VALUE_STRING, "****", 0, "what a replaced word becomes"}};
const cf_stage_type kTypes[] = {chatflow_plugin::stream_stage_type<ProfanityFilter>(
    "profanity_filter", "Replaces listed words in the streamed answer.", kKeys, 2)};

}  // namespace

CHATFLOW_PLUGIN("profanity_filter", "1.0.0", "Apache-2.0",
                "A stream stage that replaces listed words in the answer", kTypes)
