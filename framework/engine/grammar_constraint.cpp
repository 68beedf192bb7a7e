#include "framework/engine/grammar_constraint.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace chatflow::engine {

std::shared_ptr<const grammar::TokenTable> token_table_of(const Tokenizer& tokenizer) {
  const Vocabulary& vocabulary = tokenizer.vocabulary();
  std::vector<std::string> bytes(vocabulary.size());
  for (size_t id = 0; id < vocabulary.size(); ++id) {
    if (!vocabulary.is_special(static_cast<TokenId>(id)))
      bytes[id] = tokenizer.piece(static_cast<TokenId>(id));
  }
  return grammar::make_token_table(std::move(bytes));
}

GrammarMasks::GrammarMasks(std::shared_ptr<const grammar::Grammar> grammar,
                           std::shared_ptr<const grammar::TokenTable> tokens,
                           std::vector<TokenId> end_of_generation)
    : grammar_(std::move(grammar)),
      tokens_(std::move(tokens)),
      end_of_generation_(std::move(end_of_generation)),
      masker_(grammar_, tokens_) {}

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const GrammarMasks> masks, GrammarMasks::Trigger trigger)
      : masks_(std::move(masks)), trigger_(std::move(trigger)) {
    if (trigger_.texts.empty()) matcher_.emplace(masks_->grammar_);
  }

  void restrict(std::span<float> logits) override {
    if (!matcher_) return;  // waiting for a trigger, or given up
    std::shared_ptr<const std::vector<uint64_t>> allowed = masks_->masker_.allowed(*matcher_);
    std::vector<float> end_logits;
    for (TokenId end : masks_->end_of_generation_)
      end_logits.push_back(static_cast<size_t>(end) < logits.size() ? logits[end] : 0.0f);
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    const size_t count = std::min(logits.size(), masks_->tokens_->token_bytes.size());
    grammar::apply_mask(*allowed, logits.data(), count);
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(count), logits.end(), kNever);
    bool any = std::any_of(allowed->begin(), allowed->end(), [](uint64_t bits) { return bits; });
    // The end of generation only where the text may end (or where the grammar allows nothing
    // more at all, so the sequence stops rather than picking from nothing).
    bool may_end = matcher_->accepting() || !any;
    for (size_t i = 0; i < end_logits.size(); ++i) {
      auto end = static_cast<size_t>(masks_->end_of_generation_[i]);
      if (end < logits.size()) logits[end] = may_end ? end_logits[i] : kNever;
    }
  }

  void accept(TokenId token) override {
    const auto& table = masks_->tokens_->token_bytes;
    std::string_view bytes =
        token >= 0 && static_cast<size_t>(token) < table.size() ? table[token] : "";
    if (matcher_) {
      if (!matcher_->advance(bytes)) matcher_.reset();  // cannot happen under the mask
      return;
    }
    if (gave_up_) return;
    text_.append(bytes);
    look_for_trigger();
  }

  bool engaged() const override { return matcher_.has_value(); }

  bool complete() const override {
    return matcher_ && matcher_->accepting() && !matcher_->can_continue();
  }

 private:
  void look_for_trigger() {
    if (trigger_.at_start) {
      size_t first = text_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return;
      std::string_view rest = std::string_view(text_).substr(first);
      for (const auto& text : trigger_.texts) {
        if (rest.substr(0, text.size()) == text) return begin_at(first);
        if (text.substr(0, rest.size()) == rest) return;  // may still become it
      }
      gave_up_ = true;
      text_.clear();
      return;
    }
    for (const auto& text : trigger_.texts) {
      size_t found = text_.find(text);
      if (found != std::string::npos) return begin_at(found);
    }
    size_t longest = 0;
    for (const auto& text : trigger_.texts)
      longest = std::max(longest, text.size());
    if (text_.size() > longest) text_.erase(0, text_.size() - longest);
  }

  void begin_at(size_t offset) {
    grammar::Matcher matcher(masks_->grammar_);
    if (matcher.advance(std::string_view(text_).substr(offset))) {
      matcher_.emplace(std::move(matcher));
    } else {
      gave_up_ = true;  // the token ran past the trigger into what the grammar refuses
    }
    text_.clear();
  }

  std::shared_ptr<const GrammarMasks> masks_;
  GrammarMasks::Trigger trigger_;
  std::optional<grammar::Matcher> matcher_;
  std::string text_;  // generated text while waiting for a trigger
  bool gave_up_ = false;
};

std::shared_ptr<TokenConstraint> GrammarMasks::start(Trigger trigger) const {
  return std::make_shared<GrammarConstraint>(shared_from_this(), std::move(trigger));
}

}  // namespace chatflow::engine
