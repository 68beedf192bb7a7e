// The draft of draft-model speculative decoding (llama.cpp's llama-speculative and --model-draft,
// vLLM's draft models): a smaller model with the target's vocabulary guesses the next tokens
// greedily, each decoding sequence's guesses batched into one draft step per guessed token, and
// the target checks them all in its next step (scheduler.h). The draft keeps its own backend and
// its own small KV pool; each sequence's draft cache follows the tokens the target kept, so only
// the tokens it has not seen yet are computed again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/model.h"
#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

struct DraftSettings {
  std::shared_ptr<const Model> model;  // null: no draft model
  int64_t max_draft = 4;               // tokens guessed per step at most
  // Tokens of one sequence the draft computes in one catching-up step at most (a long prompt
  // catches up over several steps, guessing nothing meanwhile).
  int64_t max_catch_up = 512;
  // Told when the draft's step fails (the model then decodes without guesses), a line at a time.
  std::function<void(const std::string&)> report;
};

// Why `draft` cannot draft for `target`, or "" when it can. As llama.cpp's speculative decoding
// allows, the vocabularies may differ in size by up to 128 tokens (a model padded to a round
// size); every token id both have must be the same token.
std::string draft_mismatch(const Model& target, const Model& draft);

class DraftModel {
 public:
  // `blocks` KV blocks of `block_tokens` positions for all sequences' draft caches; a draft step
  // computes at most `max_step_tokens` tokens.
  DraftModel(DraftSettings settings, std::unique_ptr<Backend> backend, int64_t block_tokens,
             int64_t blocks, int64_t max_step_tokens);

  struct Ask {
    uint64_t sequence = 0;
    std::span<const TokenId> tokens;  // the prompt and the answer so far
    int64_t limit = 0;                // guesses wanted at most (> 0)
  };
  // The guesses for each ask, in order (empty for a sequence still catching up, one the draft
  // cannot take: longer than its context or holding a token outside its vocabulary, or when the
  // draft's pool or step has no room for it). Runs at most `limit` draft steps, all asks batched.
  std::vector<std::vector<TokenId>> propose(std::span<const Ask> asks);
  // The sequence ended or was preempted: its draft cache goes back to the pool.
  void forget(uint64_t sequence);

  BackendInfo backend_info() const { return backend_->info(); }

 private:
  struct Cached {
    KvSequence kv;
    std::vector<TokenId> tokens;  // what kv.length positions hold
  };
  DraftSettings settings_;
  std::unique_ptr<Backend> backend_;
  KvBlockAllocator blocks_;
  int64_t max_step_tokens_;
  std::unordered_map<uint64_t, Cached> cached_;
  SamplingParams greedy_;
  std::vector<StepChunk> chunks_;
  StepOutput output_;
};

}  // namespace chatflow::engine
