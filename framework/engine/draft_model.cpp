#include "framework/engine/draft_model.h"

#include <algorithm>

#include "framework/engine/tokenizer.h"

namespace chatflow::engine {

std::string draft_mismatch(const Model& target, const Model& draft) {
  constexpr int64_t kSizeDifference = 128;
  const Vocabulary& ours = target.tokenizer().vocabulary();
  const Vocabulary& theirs = draft.tokenizer().vocabulary();
  const int64_t difference = target.config().vocabulary - draft.config().vocabulary;
  if (difference > kSizeDifference || difference < -kSizeDifference) {
    return "the draft model has a vocabulary of " + std::to_string(draft.config().vocabulary) +
           " tokens and the model " + std::to_string(target.config().vocabulary) +
           ": a draft must share the model's vocabulary (sizes within " +
           std::to_string(kSizeDifference) + " tokens)";
  }
  for (size_t id = 0; id < std::min(ours.size(), theirs.size()); ++id) {
    if (ours.tokens[id].text != theirs.tokens[id].text) {
      return "token " + std::to_string(id) + " is '" + ours.tokens[id].text +
             "' for the model and '" + theirs.tokens[id].text +
             "' for the draft model: a draft must share the model's vocabulary";
    }
  }
  return "";
}

DraftModel::DraftModel(DraftSettings settings, std::unique_ptr<Backend> backend,
                       int64_t block_tokens, int64_t blocks, int64_t max_step_tokens)
    : settings_(std::move(settings)),
      backend_(std::move(backend)),
      blocks_(block_tokens, blocks),
      max_step_tokens_(max_step_tokens) {
  backend_->allocate_kv_pool({blocks, block_tokens, kernels::KvType::f16});
  greedy_.temperature = 0;
}

void DraftModel::forget(uint64_t sequence) {
  auto found = cached_.find(sequence);
  if (found == cached_.end()) return;
  release(blocks_, found->second.kv);
  cached_.erase(found);
}

std::vector<std::vector<TokenId>> DraftModel::propose(std::span<const Ask> asks) {
  std::vector<std::vector<TokenId>> guesses(asks.size());
  const int64_t context = settings_.model->config().context;
  const int64_t vocabulary = settings_.model->config().vocabulary;
  auto limit_of = [&](const Ask& ask) {
    return std::min(ask.limit, context - static_cast<int64_t>(ask.tokens.size()));
  };
  // The first draft step: each sequence's tokens the draft has not seen, with a guess after them
  // for a sequence whose unseen tokens fit one step and whose draft cache has room for them and
  // its guesses; a sequence further behind only catches up. At most max_step_tokens_ in all.
  chunks_.clear();
  std::vector<size_t> owners;  // the ask of each chunk
  int64_t step_room = max_step_tokens_;
  for (size_t i = 0; i < asks.size() && step_room > 0; ++i) {
    const Ask& ask = asks[i];
    const auto length = static_cast<int64_t>(ask.tokens.size());
    // Past the draft's context the model decodes without guesses from here on.
    if (length >= context) {
      forget(ask.sequence);
      continue;
    }
    Cached& cached = cached_[ask.sequence];
    // Keep what the draft computed for the tokens the target kept.
    auto kept = std::mismatch(cached.tokens.begin(), cached.tokens.end(), ask.tokens.begin(),
                              ask.tokens.end());
    cached.kv.length = std::min<int64_t>(cached.kv.length, kept.first - cached.tokens.begin());
    cached.tokens.resize(static_cast<size_t>(cached.kv.length));
    const int64_t unseen = length - cached.kv.length;
    if (unseen <= 0) continue;  // never: the target's last token is always new to the draft
    std::span<const TokenId> fresh = ask.tokens.subspan(static_cast<size_t>(cached.kv.length));
    // A token of a model's larger vocabulary the draft does not have (a padding id).
    if (std::any_of(fresh.begin(), fresh.end(), [&](TokenId t) { return t >= vocabulary; })) {
      forget(ask.sequence);
      continue;
    }
    StepChunk chunk;
    chunk.start = cached.kv.length;
    const int64_t limit = limit_of(ask);
    if (unseen > std::min(settings_.max_catch_up, step_room) || limit <= 0) {
      const int64_t count = std::min({unseen, settings_.max_catch_up, step_room});
      if (!reserve(blocks_, cached.kv, cached.kv.length + count)) continue;
      chunk.tokens = fresh.first(static_cast<size_t>(count));
      chunk.want = StepChunk::Want::nothing;
    } else {
      if (!reserve(blocks_, cached.kv, length + limit)) continue;
      chunk.tokens = fresh;
      chunk.want = StepChunk::Want::token;
      chunk.draw.params = &greedy_;
    }
    step_room -= static_cast<int64_t>(chunk.tokens.size());
    chunk.block_table = cached.kv.blocks;
    chunks_.push_back(chunk);
    owners.push_back(i);
  }
  if (chunks_.empty()) return guesses;
  backend_->forward(chunks_, output_);
  std::vector<size_t> drafting;
  for (size_t c = 0, drawn = 0; c < chunks_.size(); ++c) {
    Cached& cached = cached_[asks[owners[c]].sequence];
    cached.tokens.insert(cached.tokens.end(), chunks_[c].tokens.begin(), chunks_[c].tokens.end());
    cached.kv.length += static_cast<int64_t>(chunks_[c].tokens.size());
    if (chunks_[c].want != StepChunk::Want::token) continue;
    guesses[owners[c]].push_back(output_.tokens[drawn++].token);
    drafting.push_back(owners[c]);
  }
  // Then one token per drafting sequence per step, each fed its last guess.
  std::vector<TokenId> fed(drafting.size());
  for (int64_t step = 1;; ++step) {
    chunks_.clear();
    owners.clear();
    for (size_t d = 0; d < drafting.size(); ++d) {
      const size_t i = drafting[d];
      if (step >= limit_of(asks[i])) continue;
      Cached& cached = cached_[asks[i].sequence];
      fed[d] = guesses[i].back();
      StepChunk chunk;
      chunk.tokens = std::span<const TokenId>(&fed[d], 1);
      chunk.start = cached.kv.length;
      chunk.block_table = cached.kv.blocks;
      chunk.want = StepChunk::Want::token;
      chunk.draw.params = &greedy_;
      chunks_.push_back(chunk);
      owners.push_back(d);
    }
    if (chunks_.empty()) break;
    backend_->forward(chunks_, output_);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const size_t i = drafting[owners[c]];
      Cached& cached = cached_[asks[i].sequence];
      cached.tokens.push_back(fed[owners[c]]);
      ++cached.kv.length;
      guesses[i].push_back(output_.tokens[c].token);
    }
  }
  return guesses;
}

}  // namespace chatflow::engine
