// keyword_router: a request stage with two ports. A request whose newest user message contains
// one of `keywords` (whole words, case-insensitive unless `case_sensitive`) leaves through
// `matched`, annotated with the word; every other request through `other`. Route billing
// questions to a dedicated prompt or model, for example.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "chatflow_plugin.hpp"

namespace {

bool word_character(unsigned char c) {
  return std::isalnum(c) || c >= 0x80 || c == '_';
}

class KeywordRouter final : public chatflow_plugin::RequestStage {
 public:
  explicit KeywordRouter(const chatflow_plugin::Config& config)
      : keywords_(config.list("keywords")), case_sensitive_(config.boolean("case_sensitive")) {
    if (keywords_.empty()) throw std::invalid_argument("'keywords' must name at least one word");
    if (!case_sensitive_) {
      for (auto& keyword : keywords_)
        keyword = lower(keyword);
    }
  }

  int process(chatflow_plugin::Request& request) override {
    std::string text = request.question();
    if (!case_sensitive_) text = lower(text);
    for (const auto& keyword : keywords_) {
      for (size_t at = text.find(keyword); at != std::string::npos;
           at = text.find(keyword, at + 1)) {
        bool starts = at == 0 || !word_character(static_cast<unsigned char>(text[at - 1]));
        size_t end = at + keyword.size();
        bool ends = end == text.size() || !word_character(static_cast<unsigned char>(text[end]));
        if (starts && ends) {
          request.annotate("keyword", keyword);
          return kMatched;
        }
      }
    }
    return kOther;
  }

 private:
  static constexpr int kMatched = 0;
  static constexpr int kOther = 1;

  static std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
  }

  std::vector<std::string> keywords_;
  bool case_sensitive_;
};

const cf_port kPorts[] = {{"matched", "the question contains a keyword"},
                          {"other", "every other request"}};
const cf_config_key kKeys[] = {
    {"keywords", CF_VALUE_STRING_LIST, nullptr, 1, "words that send a request to 'matched'"},
    {"case_sensitive", CF_VALUE_BOOLEAN, "false", 0, "match the keywords' case too"}};
const cf_stage_type kTypes[] = {chatflow_plugin::request_stage_type<KeywordRouter>(
    "keyword_router", "Routes requests whose question contains a keyword to port 'matched'.",
    kPorts, 2, kKeys, 2)};

}  // namespace

CHATFLOW_PLUGIN("keyword_router", "1.0.0", "Apache-2.0",
                "A request stage that routes by keywords in the user's question", kTypes)
