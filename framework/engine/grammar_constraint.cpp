#include "framework/engine/grammar_constraint.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <optional>

#include "framework/text/stream_markers.h"

namespace chatflow::engine {
namespace {

using text::kThinkingCloses;
using text::kThinkingOpens;
using text::skip_spaces;
constexpr float kNever = -std::numeric_limits<float>::infinity();

void set_bit(std::vector<uint64_t>& bits, size_t id) {
  bits[id / 64] |= uint64_t{1} << (id % 64);
}

bool has_bit(const std::vector<uint64_t>& bits, size_t id) {
  return id / 64 < bits.size() && (bits[id / 64] >> (id % 64) & 1);
}

}  // namespace

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
                           std::vector<TokenId> end_of_generation, MaskBudget budget)
    : grammar_(std::move(grammar)),
      tokens_(std::move(tokens)),
      end_of_generation_(std::move(end_of_generation)),
      budget_(budget),
      masker_(grammar_, tokens_) {}

std::shared_ptr<const std::vector<uint64_t>> GrammarMasks::trigger_forbidden(const Trigger& trigger,
                                                                             size_t matched) const {
  std::lock_guard lock(mutex_);
  auto& slot = trigger_masks_[{trigger.text, matched}];
  if (slot) return slot;
  const auto& table = tokens_->token_bytes;
  auto forbidden = std::make_shared<std::vector<uint64_t>>((table.size() + 63) / 64, 0);
  std::string_view text = trigger.text;
  for (size_t id = 0; id < table.size(); ++id) {
    std::string written = std::string(text.substr(0, matched)) + table[id];
    std::string_view candidate = written;
    if (trigger.at_start && matched == 0) candidate = skip_spaces(candidate);
    size_t found = trigger.at_start
                       ? (candidate.substr(0, text.size()) == text ? 0 : candidate.npos)
                       : candidate.find(text);
    if (found == std::string_view::npos) continue;
    grammar::Matcher matcher(grammar_);
    if (!matcher.advance(candidate.substr(found))) set_bit(*forbidden, id);
  }
  slot = forbidden;
  return slot;
}

std::shared_ptr<const std::vector<uint64_t>> GrammarMasks::think_openers(size_t matched) const {
  std::lock_guard lock(mutex_);
  auto& slot = think_masks_[matched];
  if (slot) return slot;
  const auto& table = tokens_->token_bytes;
  auto openers = std::make_shared<std::vector<uint64_t>>((table.size() + 63) / 64, 0);
  std::string_view rest = kThinkingOpens.substr(matched);
  for (size_t id = 0; id < table.size(); ++id) {
    std::string_view bytes = table[id];
    if (matched == 0) bytes = skip_spaces(bytes);
    if (table[id].empty()) continue;
    bool fits = bytes.size() <= rest.size() ? rest.substr(0, bytes.size()) == bytes
                                            : bytes.substr(0, rest.size()) == rest;
    if (fits) set_bit(*openers, id);
  }
  slot = openers;
  return slot;
}

using Clock = std::chrono::steady_clock;

// One mask computed off the engine thread: the state it is for, and what came of it. Shared by
// the constraint and the work it handed out, so either may outlive the other.
struct MaskJob {
  MaskJob(grammar::Matcher state, uint64_t version, Clock::duration allowance)
      : state(std::move(state)), version(version), allowance(allowance) {}

  void run(grammar::TokenMasker& masker) {
    Clock::time_point start = Clock::now();
    try {
      mask = masker.allowed(state, {start + allowance, &abandoned});
    } catch (const grammar::GrammarWorkCancelled&) {
      // Nobody waits for it any more.
    } catch (const std::exception& error) {  // a grammar limit, the deadline, or memory
      failure = error.what();
    }
    spent = Clock::now() - start;
  }

  const grammar::Matcher state;
  const uint64_t version;
  const Clock::duration allowance;
  std::atomic<bool> abandoned{false};
  // Written by run(), read by the constraint after the scheduler saw run() return.
  std::shared_ptr<const std::vector<uint64_t>> mask;
  std::string failure;
  Clock::duration spent{};
};

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const GrammarMasks> masks, GrammarMasks::Trigger trigger)
      : masks_(std::move(masks)), trigger_(std::move(trigger)) {
    guarded([&] {
      switch (trigger_.reasoning) {
        case GrammarMasks::Reasoning::open:
          phase_ = Phase::reasoning;
          break;
        case GrammarMasks::Reasoning::optional:
          phase_ = Phase::deciding;
          if (trigger_.text.empty()) matcher_.emplace(masks_->grammar_);
          break;
        case GrammarMasks::Reasoning::none:
          begin_answer({});
          break;
      }
    });
  }

  ~GrammarConstraint() override { abandon(); }

  void restrict(std::span<float> logits) override {
    guarded([&] {
      switch (phase_) {
        case Phase::reasoning:
        case Phase::free:
          return;
        case Phase::waiting:
          return forbid(*masks_->trigger_forbidden(trigger_, trigger_matched()), logits);
        case Phase::deciding:
          if (!trigger_.text.empty())
            return forbid(*masks_->trigger_forbidden(trigger_, trigger_matched()), logits);
          return allow(grammar_mask(), masks_->think_openers(think_matched()).get(), logits);
        case Phase::active:
          return allow(grammar_mask(), nullptr, logits);
      }
    });
  }

  void accept(TokenId token) override {
    ++state_version_;
    guarded([&] { accept_bytes(token); });
  }

  std::function<void()> prepare() override {
    if (job_) take_job();
    if (!failure_.empty() || !wants_grammar_mask() || mask_version_ == state_version_) return {};
    if (auto cached = masks_->masker_.cached(*matcher_)) {
      keep_mask(std::move(cached), state_version_);
      return {};
    }
    Clock::duration left = masks_->budget_.per_sequence - spent_;
    if (left <= Clock::duration::zero()) {
      fail_over_time();
      return {};
    }
    job_ = std::make_shared<MaskJob>(*matcher_, state_version_, left);
    return [masks = masks_, job = job_] { job->run(masks->masker_); };
  }

  std::string failure() const override { return failure_; }

  void abandon() override {
    if (job_) job_->abandoned = true;
  }

  bool engaged() const override { return phase_ == Phase::active; }

  bool complete() const override {
    return phase_ == Phase::active && matcher_->accepting() && !matcher_->can_continue();
  }

 private:
  enum class Phase {
    reasoning,  // inside the thinking block: free until it closes
    deciding,   // the text may open a thinking block or start the answer
    waiting,    // the answer is free until the trigger appears
    active,     // the grammar holds the text
    free        // the answer is text (the trigger never came where it had to)
  };

  // Runs `work`, turning a grammar that outgrows its limits (GrammarLimitExceeded from a
  // matcher step, or a mask over its time) into this sequence's failure.
  template <class Work>
  void guarded(Work&& work) {
    if (!failure_.empty()) return;
    try {
      work();
    } catch (const grammar::GrammarLimitExceeded& error) {
      fail(error.what());
    }
  }

  void fail(const std::string& reason) {
    if (failure_.empty()) failure_ = "the answer's grammar cannot be enforced: " + reason;
  }

  void fail_over_time() {
    fail("its token masks took more than " + std::to_string(masks_->budget_.per_sequence.count()) +
         " ms to compute, the budget of one request");
  }

  bool wants_grammar_mask() const {
    return matcher_ &&
           (phase_ == Phase::active || (phase_ == Phase::deciding && trigger_.text.empty()));
  }

  void keep_mask(std::shared_ptr<const std::vector<uint64_t>> mask, uint64_t version) {
    mask_ = std::move(mask);
    mask_version_ = version;
  }

  // The finished job's result, its time charged to this sequence.
  void take_job() {
    std::shared_ptr<MaskJob> job = std::move(job_);
    spent_ += job->spent;
    if (!job->failure.empty()) {
      bool over_time = spent_ >= masks_->budget_.per_sequence;
      return over_time ? fail_over_time() : fail(job->failure);
    }
    if (job->mask) keep_mask(job->mask, job->version);
  }

  void accept_bytes(TokenId token) {
    const auto& table = masks_->tokens_->token_bytes;
    // (a view of the table's string, never of a temporary)
    std::string_view bytes = token >= 0 && static_cast<size_t>(token) < table.size()
                                 ? std::string_view(table[static_cast<size_t>(token)])
                                 : std::string_view();
    switch (phase_) {
      case Phase::free:
        return;
      case Phase::active:
        if (!matcher_->advance(bytes)) phase_ = Phase::free;  // cannot happen under the mask
        return;
      case Phase::reasoning: {
        text_.append(bytes);
        size_t end = text_.find(kThinkingCloses);
        if (end != std::string::npos) {
          begin_answer(text_.substr(end + kThinkingCloses.size()));
        } else if (text_.size() > kThinkingCloses.size()) {
          text_.erase(0, text_.size() - kThinkingCloses.size());
        }
        return;
      }
      case Phase::deciding:
        return decide(bytes);
      case Phase::waiting:
        text_.append(bytes);
        return look_for_trigger();
    }
  }

  // The mask of the current state: the one prepare() made ready, else computed here (a caller
  // that never prepares), within what is left of the budget.
  const std::vector<uint64_t>* grammar_mask() {
    if (!matcher_) return nullptr;
    if (mask_version_ != state_version_) {
      Clock::duration left = masks_->budget_.per_sequence - spent_;
      Clock::time_point start = Clock::now();
      try {
        keep_mask(masks_->masker_.allowed(*matcher_, {start + left, nullptr}), state_version_);
      } catch (const grammar::GrammarLimitExceeded&) {
        spent_ += Clock::now() - start;
        if (spent_ >= masks_->budget_.per_sequence) fail_over_time();
        throw;
      }
      spent_ += Clock::now() - start;
    }
    return mask_.get();
  }

  // Only the tokens in `grammar` or `also` survive; the end of generation only where the
  // grammar may end (or where nothing else may come, so the sequence stops rather than picking
  // from nothing).
  void allow(const std::vector<uint64_t>* grammar, const std::vector<uint64_t>* also,
             std::span<float> logits) {
    std::vector<float> end_logits;
    for (TokenId end : masks_->end_of_generation_)
      end_logits.push_back(static_cast<size_t>(end) < logits.size() ? logits[end] : 0.0f);
    const size_t count = std::min(logits.size(), masks_->tokens_->token_bytes.size());
    bool any = false;
    if (grammar && !also) {
      grammar::apply_mask(*grammar, logits.data(), count);
      any = std::any_of(grammar->begin(), grammar->end(), [](uint64_t bits) { return bits; });
    } else {
      for (size_t id = 0; id < count; ++id) {
        bool kept = (grammar && has_bit(*grammar, id)) || (also && has_bit(*also, id));
        if (!kept) logits[id] = kNever;
        any = any || kept;
      }
    }
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(count), logits.end(), kNever);
    bool may_end = (phase_ == Phase::active && matcher_->accepting()) || !any;
    for (size_t i = 0; i < end_logits.size(); ++i) {
      auto end = static_cast<size_t>(masks_->end_of_generation_[i]);
      if (end < logits.size()) logits[end] = may_end ? end_logits[i] : kNever;
    }
  }

  static void forbid(const std::vector<uint64_t>& forbidden, std::span<float> logits) {
    for (size_t word = 0; word < forbidden.size(); ++word) {
      uint64_t bits = forbidden[word];
      while (bits) {
        size_t id = word * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        if (id < logits.size()) logits[id] = kNever;
        bits &= bits - 1;
      }
    }
  }

  size_t trigger_matched() const {
    if (!trigger_.at_start) return text::partial_marker(text_, trigger_.text);
    std::string_view rest = skip_spaces(text_);
    return trigger_.text.substr(0, rest.size()) == rest ? rest.size() : 0;
  }

  size_t think_matched() const {
    return std::min(skip_spaces(text_).size(), kThinkingOpens.size());
  }

  // The answer proper begins (after any thinking) with `text` already written.
  void begin_answer(std::string text) {
    text_.clear();
    if (!trigger_.text.empty()) {
      phase_ = Phase::waiting;
      text_ = std::move(text);
      look_for_trigger();
      return;
    }
    grammar::Matcher matcher(masks_->grammar_);
    bool fits = matcher.advance(text) || matcher.advance(skip_spaces(text));
    if (!fits) {
      phase_ = Phase::free;
      return;
    }
    matcher_.emplace(std::move(matcher));
    phase_ = Phase::active;
  }

  void decide(std::string_view bytes) {
    text_.append(bytes);
    if (matcher_ && !matcher_->advance(bytes)) matcher_.reset();
    std::string_view rest = skip_spaces(text_);
    if (rest.substr(0, kThinkingOpens.size()) == kThinkingOpens) {
      matcher_.reset();
      phase_ = Phase::reasoning;
      std::string after(rest.substr(kThinkingOpens.size()));
      text_.clear();
      if (!after.empty()) accept_reasoning_text(after);
      return;
    }
    if (kThinkingOpens.substr(0, rest.size()) == rest) return;  // may still open it
    if (!trigger_.text.empty()) return begin_answer(std::move(text_));
    phase_ = matcher_ ? Phase::active : Phase::free;
    text_.clear();
  }

  void accept_reasoning_text(const std::string& text) {
    text_ = text;
    size_t end = text_.find(kThinkingCloses);
    if (end != std::string::npos) begin_answer(text_.substr(end + kThinkingCloses.size()));
  }

  void look_for_trigger() {
    if (trigger_.at_start) {
      std::string_view rest = skip_spaces(text_);
      if (rest.empty()) return;
      if (rest.substr(0, trigger_.text.size()) == trigger_.text)
        return begin_at(text_.size() - rest.size());
      if (trigger_.text.substr(0, rest.size()) == rest) return;  // may still become it
      phase_ = Phase::free;
      text_.clear();
      return;
    }
    size_t found = text_.find(trigger_.text);
    if (found != std::string::npos) return begin_at(found);
    if (text_.size() > trigger_.text.size()) text_.erase(0, text_.size() - trigger_.text.size());
  }

  void begin_at(size_t offset) {
    grammar::Matcher matcher(masks_->grammar_);
    // The mask kept out tokens that would run past the trigger into what the grammar refuses.
    if (matcher.advance(std::string_view(text_).substr(offset))) {
      matcher_.emplace(std::move(matcher));
      phase_ = Phase::active;
    } else {
      phase_ = Phase::free;
    }
    text_.clear();
  }

  std::shared_ptr<const GrammarMasks> masks_;
  GrammarMasks::Trigger trigger_;
  Phase phase_ = Phase::free;
  std::optional<grammar::Matcher> matcher_;
  std::string text_;  // text not yet in the grammar: thinking's end, the trigger's wait
  // Every accepted token may move the matcher: a mask is for the version it was made for.
  uint64_t state_version_ = 0;
  std::shared_ptr<const std::vector<uint64_t>> mask_;  // the last grammar mask, kept alive
  uint64_t mask_version_ = UINT64_MAX;
  std::shared_ptr<MaskJob> job_;  // handed out by prepare(), not yet taken back
  Clock::duration spent_{};       // on this sequence's masks so far
  std::string failure_;
};

std::shared_ptr<TokenConstraint> GrammarMasks::start(Trigger trigger) const {
  return std::make_shared<GrammarConstraint>(shared_from_this(), std::move(trigger));
}

}  // namespace chatflow::engine
