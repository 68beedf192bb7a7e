#include "framework/engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>

namespace chatflow::engine {

struct Scheduler::Sequence {
  Sequence(uint64_t id, SequenceSpec spec, std::shared_ptr<SequenceObserver> observer)
      : id(id),
        spec(std::move(spec)),
        observer(std::move(observer)),
        sampler(this->spec.sampling),
        tokens(this->spec.prompt) {}
  // Whatever it left running for its constraint stops.
  ~Sequence() {
    if (spec.constraint) spec.constraint->abandon();
  }
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - kv.length; }
  SequenceUsage usage() const {
    return {static_cast<int64_t>(spec.prompt.size()), generated, cached_tokens, drafted_tokens,
            accepted_tokens};
  }

  uint64_t id;
  SequenceSpec spec;
  std::shared_ptr<SequenceObserver> observer;
  Sampler sampler;
  KvSequence kv;
  std::vector<TokenId> tokens;  // the prompt, then every generated token
  int64_t generated = 0;
  int64_t cached_tokens = 0;
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  uint64_t cache_epoch = 0;  // the prefix cache's clears when it was admitted
  bool admitted_before = false;
  bool reported_admission = false;
  bool started = false;
  bool planned = false;                // already in this step's batch: not a preemption victim
  std::vector<uint64_t> block_hashes;  // hash chain of the full blocks of `tokens`
  int64_t published_blocks = 0;        // blocks offered to the prefix cache so far
  bool preparing = false;              // its constraint's work runs on the worker
  // Logits computed while that work ran: sampled once it is done (all of the KV is computed
  // meanwhile, so the sequence is planned in no step).
  std::vector<float> held_logits;
  bool holding = false;
  std::vector<uint64_t> allowed;  // the constraint's mask for the token being drawn
  // Prompt lookup backs off after guesses the model rejected: it sits out `draft_skip` decode
  // steps, twice as many (up to 16) after each rejected step in a row.
  int64_t draft_backoff = 0;
  int64_t draft_skip = 0;
  // A draft model's guesses per step: up to max_draft, one more after a step that kept them all,
  // one more than were kept after a step that did not (the adaptive draft length).
  int64_t draft_length = 0;
};

namespace {

// How often a scheduler whose sequences all wait for their constraints looks again at
// cancellations.
constexpr auto kHeldPoll = std::chrono::milliseconds(10);
// Token masks of different sequences computed at once; the slowest holds up only its own.
constexpr int kConstraintThreads = 2;

int64_t default_blocks(const ModelConfig& model, const SchedulerConfig& config) {
  int64_t per_sequence =
      (std::min<int64_t>(model.context, 2048) + config.block_tokens - 1) / config.block_tokens;
  int64_t blocks = per_sequence * std::max<int64_t>(1, config.max_seqs);
  // Cap the (lazily committed) pool at 4 GiB of address space.
  auto block_bytes =
      static_cast<int64_t>(kv_block_bytes(model, config.block_tokens, config.kv_type));
  return std::max<int64_t>(per_sequence,
                           std::min<int64_t>(blocks, (int64_t{4} << 30) / block_bytes));
}

}  // namespace

Scheduler::Scheduler(std::shared_ptr<const Model> model, SchedulerConfig config)
    : Scheduler(model,
                make_backend(config.backend, model, {config.threads, config.max_batched_tokens}),
                config) {}

Scheduler::Scheduler(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
                     SchedulerConfig config)
    : model_(std::move(model)),
      config_(config),
      backend_(std::move(backend)),
      cache_(config.block_tokens,
             config.kv_blocks > 0 ? config.kv_blocks : default_blocks(model_->config(), config)),
      prefix_cache_(cache_),
      constraint_worker_(kConstraintThreads) {
  backend_->allocate_kv_pool({cache_.total_blocks(), cache_.block_tokens(), config.kv_type});
  backend_info_ = backend_->info();
  if (config_.draft.model) {
    if (std::string mismatch = draft_mismatch(*model_, *config_.draft.model); !mismatch.empty())
      throw std::invalid_argument(mismatch);
    // As many blocks as the model's pool (kv_cache.blocks), each the draft's size.
    draft_model_ = std::make_unique<DraftModel>(
        config_.draft,
        make_backend(config_.backend, config_.draft.model,
                     {config_.threads, config_.max_batched_tokens}),
        config_.block_tokens, cache_.total_blocks(), config_.max_batched_tokens);
    backend_info_.memory = memory_with_draft();
  }
  restore_prefix_cache();
  stats_.total_blocks = cache_.total_blocks();
  stats_.free_blocks = cache_.free_blocks();
  stats_.cached_blocks = prefix_cache_.cached_blocks();
  stats_.evictable_blocks = prefix_cache_.evictable_blocks();
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
  save_prefix_cache();  // every sequence has let go of its blocks by now
}

void Scheduler::restore_prefix_cache() {
  if (config_.persist_path.empty() || !config_.prefix_cache) return;
  auto report = [this](const std::string& line) {
    if (config_.persist_report) config_.persist_report(line);
  };
  persist_identity_ = {model_fingerprint(*model_), backend_info_.name,
                       static_cast<uint32_t>(config_.kv_type), cache_.block_tokens(),
                       backend_->kv_block_bytes()};
  try {
    PrefixCacheRestored restored = engine::restore_prefix_cache(
        config_.persist_path, persist_identity_, prefix_cache_, cache_, *backend_);
    if (!restored.found) {
      report("no saved prefix cache at '" + config_.persist_path + "' yet");
    } else if (!restored.refused.empty()) {
      report("the saved prefix cache '" + config_.persist_path +
             "' is not used: " + restored.refused);
    } else {
      report("restored " + std::to_string(restored.blocks) + " blocks (" +
             std::to_string(restored.blocks * cache_.block_tokens()) +
             " positions) of the prefix cache from '" + config_.persist_path + "'");
    }
  } catch (const std::exception& error) {
    report("the saved prefix cache '" + config_.persist_path + "' is not used: " + error.what());
  }
}

void Scheduler::save_prefix_cache() {
  if (config_.persist_path.empty() || !config_.prefix_cache) return;
  try {
    write_prefix_cache();
  } catch (const std::exception& error) {
    if (config_.persist_report)
      config_.persist_report("the prefix cache was not saved: " + std::string(error.what()));
  }
}

PrefixCacheSaved Scheduler::write_prefix_cache() {
  PrefixCacheSaved saved = engine::save_prefix_cache(
      config_.persist_path, persist_identity_, prefix_cache_, *backend_, config_.persist_max_bytes);
  if (config_.persist_report) {
    config_.persist_report("saved " + std::to_string(saved.blocks) +
                           " blocks of the prefix cache (" + std::to_string(saved.bytes) +
                           " bytes) to '" + config_.persist_path + "'");
  }
  return saved;
}

void Scheduler::between_steps(const std::function<void()>& chore) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::runtime_error("the engine is shutting down");
    chores_.push_back([&chore, done] {
      try {
        chore();
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  work_.notify_all();
  finished.get();
}

PrefixCacheSaved Scheduler::save_prefix_cache_now() {
  if (config_.persist_path.empty()) {
    throw std::runtime_error("no file to save the prefix cache to: set kv_cache.persist.path");
  }
  if (!config_.prefix_cache) throw std::runtime_error("the prefix cache is off");
  PrefixCacheSaved saved;
  between_steps([&] { saved = write_prefix_cache(); });
  return saved;
}

Scheduler::PrefixCacheCleared Scheduler::clear_prefix_cache() {
  PrefixCacheCleared cleared;
  between_steps([&] {
    cleared.blocks = prefix_cache_.clear();
    ++cache_epoch_;
    if (config_.persist_path.empty()) return;
    std::error_code error;
    cleared.file_removed = std::filesystem::remove(config_.persist_path, error);
    if (error) {
      throw std::runtime_error("the prefix cache was cleared but '" + config_.persist_path +
                               "' could not be removed: " + error.message());
    }
  });
  return cleared;
}

int64_t Scheduler::capacity_tokens() const {
  return cache_.total_blocks() * cache_.block_tokens();
}

std::optional<std::string> Scheduler::validate(const SequenceSpec& spec) const {
  const ModelConfig& model = model_->config();
  const int64_t prompt = static_cast<int64_t>(spec.prompt.size());
  if (prompt == 0) return "the prompt is empty";
  for (TokenId token : spec.prompt) {
    if (token < 0 || token >= model.vocabulary) {
      return "token id " + std::to_string(token) + " is outside the vocabulary of " +
             std::to_string(model.vocabulary);
    }
  }
  if (spec.max_tokens < 1) return "max_tokens must be at least 1";
  if (prompt + spec.max_tokens > model.context) {
    return "this model's maximum context length is " + std::to_string(model.context) +
           " tokens, but " + std::to_string(prompt + spec.max_tokens) + " were requested (" +
           std::to_string(prompt) + " in the prompt, " + std::to_string(spec.max_tokens) +
           " for the completion)";
  }
  if (prompt + spec.max_tokens > capacity_tokens()) {
    return "the request needs " + std::to_string(prompt + spec.max_tokens) +
           " tokens of KV cache, but the cache holds " + std::to_string(capacity_tokens());
  }
  return std::nullopt;
}

std::optional<std::string> Scheduler::submit(SequenceSpec spec,
                                             std::shared_ptr<SequenceObserver> observer) {
  if (auto error = validate(spec)) return error;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return "the engine is shutting down";
    incoming_.push_back(
        std::make_unique<Sequence>(next_id_++, std::move(spec), std::move(observer)));
  }
  work_.notify_one();
  return std::nullopt;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

BackendInfo Scheduler::backend_info() const {
  std::lock_guard lock(mutex_);
  return backend_info_;
}

void Scheduler::run() {
  std::vector<std::unique_ptr<Sequence>> running;
  std::deque<std::unique_ptr<Sequence>> waiting;
  std::vector<Prepared> prepared;
  std::vector<std::function<void()>> chores;
  bool progressed = true;
  bool stop = false;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      bool queued = !running.empty() || !waiting.empty();
      auto ready = [&] {
        return stopping_ || !incoming_.empty() || !prepared_.empty() || !chores_.empty() ||
               (progressed && queued);
      };
      if (!progressed && queued)
        work_.wait_for(lock, kHeldPoll, ready);  // still drops sequences cancelled meanwhile
      else
        work_.wait(lock, ready);
      for (auto& sequence : incoming_)
        waiting.push_back(std::move(sequence));
      incoming_.clear();
      prepared.swap(prepared_);
      chores.swap(chores_);
      stop = stopping_;
    }
    for (auto& chore : chores)
      chore();
    chores.clear();
    if (stop) break;
    progressed = step(running, waiting, prepared);
    prepared.clear();
    refresh_stats(running, waiting);
  }
  for (auto& sequence : running) {
    sequence->observer->on_error("the engine is shutting down");
    release_sequence(*sequence);
  }
  for (auto& sequence : waiting) {
    sequence->observer->on_error("the engine is shutting down");
    release_sequence(*sequence);
  }
}

void Scheduler::release_sequence(Sequence& sequence) {
  release(cache_, sequence.kv);
  sequence.published_blocks = 0;
  if (draft_model_) draft_model_->forget(sequence.id);
}

void Scheduler::admit(Sequence& sequence) {
  // Reuse cached full blocks, but always leave the last token to compute: its logits are needed.
  int64_t reusable = (static_cast<int64_t>(sequence.tokens.size()) - 1) / cache_.block_tokens();
  std::vector<BlockId> blocks;
  if (config_.prefix_cache)
    blocks = prefix_cache_.match(sequence.spec.cache_salt, sequence.tokens, reusable);
  sequence.kv.blocks = blocks;
  sequence.kv.length = static_cast<int64_t>(blocks.size()) * cache_.block_tokens();
  sequence.published_blocks = static_cast<int64_t>(blocks.size());
  sequence.cache_epoch = cache_epoch_;
  if (!sequence.admitted_before) sequence.cached_tokens = sequence.kv.length;
  sequence.admitted_before = true;
}

void Scheduler::publish_full_blocks(Sequence& sequence) {
  // A sequence admitted before the cache was cleared offers it nothing more: its prompt is what
  // the clear was meant to forget.
  if (!config_.prefix_cache || sequence.cache_epoch != cache_epoch_) return;
  const int64_t block_tokens = cache_.block_tokens();
  int64_t full = sequence.kv.length / block_tokens;
  while (static_cast<int64_t>(sequence.block_hashes.size()) < full) {
    size_t b = sequence.block_hashes.size();
    uint64_t parent =
        b == 0 ? PrefixCache::root_hash(sequence.spec.cache_salt) : sequence.block_hashes[b - 1];
    sequence.block_hashes.push_back(PrefixCache::block_hash(
        parent, std::span(sequence.tokens).subspan(b * block_tokens, block_tokens)));
  }
  for (; sequence.published_blocks < full; ++sequence.published_blocks) {
    size_t b = static_cast<size_t>(sequence.published_blocks);
    uint64_t parent =
        b == 0 ? PrefixCache::root_hash(sequence.spec.cache_salt) : sequence.block_hashes[b - 1];
    prefix_cache_.insert(sequence.block_hashes[b], parent,
                         std::span(sequence.tokens).subspan(b * block_tokens, block_tokens),
                         sequence.kv.blocks[b]);
  }
}

bool Scheduler::reserve_for(Sequence& sequence, int64_t length,
                            std::vector<std::unique_ptr<Sequence>>& running,
                            std::deque<std::unique_ptr<Sequence>>& waiting) {
  while (true) {
    if (reserve(cache_, sequence.kv, length)) return true;
    int64_t needed = (length + cache_.block_tokens() - 1) / cache_.block_tokens() -
                     static_cast<int64_t>(sequence.kv.blocks.size());
    if (prefix_cache_.make_room(needed)) continue;
    // Preempt the newest sequence that arrived after this one and is not already in this step's
    // batch: it is recomputed later.
    auto victim = running.end();
    for (auto it = running.begin(); it != running.end(); ++it) {
      if (!(*it)->planned && (*it)->id > sequence.id &&
          (victim == running.end() || (*it)->id > (*victim)->id))
        victim = it;
    }
    if (victim == running.end()) return false;
    release_sequence(**victim);
    (*victim)->holding = false;  // recomputed, its logits come again
    (*victim)->held_logits.clear();
    waiting.push_front(std::move(*victim));
    running.erase(victim);
    std::lock_guard lock(mutex_);
    ++stats_.preemptions;
  }
}

// Cancelled sequences leave first, so their blocks are free for this very step.
template <class List>
void Scheduler::drop_cancelled(List& sequences) {
  for (auto it = sequences.begin(); it != sequences.end();) {
    if ((*it)->observer->cancelled()) {
      (*it)->observer->on_dropped();
      release_sequence(**it);
      it = sequences.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<Scheduler::Planned> Scheduler::plan(std::vector<std::unique_ptr<Sequence>>& running,
                                                std::deque<std::unique_ptr<Sequence>>& waiting) {
  std::vector<Planned> plan;
  auto add = [&](Sequence& sequence, int64_t count, bool logits) {
    sequence.planned = true;
    plan.push_back({&sequence, count, logits});
  };
  for (auto& sequence : running)
    sequence->planned = false;
  int64_t budget = config_.max_batched_tokens;
  std::sort(running.begin(), running.end(),
            [](const auto& a, const auto& b) { return a->id < b->id; });

  // 1. Every decoding sequence gets its next token (oldest first).
  if (draft_model_) propose_drafts(running);
  for (size_t i = 0; i < running.size() && budget > 0; ++i) {
    Sequence& sequence = *running[i];
    if (sequence.pending() != 1) continue;
    if (int64_t drafted = draft(sequence, budget - 1)) {
      add(sequence, 1 + drafted, true);
      plan.back().drafted = drafted;
      budget -= 1 + drafted;
      continue;
    }
    if (!reserve_for(sequence, sequence.kv.length + 1, running, waiting)) continue;
    add(sequence, 1, true);
    --budget;
  }
  // 2. Prompts already under way continue, in chunks when allowed.
  for (size_t i = 0; i < running.size() && budget > 0; ++i) {
    Sequence& sequence = *running[i];
    int64_t pending = sequence.pending();
    if (pending <= 1 || sequence.planned) continue;  // planned: decoding with guesses
    int64_t count = config_.chunked_prefill ? std::min(pending, budget) : pending;
    if (!config_.chunked_prefill && count > budget && !plan.empty()) continue;
    if (!reserve_for(sequence, sequence.kv.length + count, running, waiting)) continue;
    add(sequence, count, count == pending);
    budget -= count;
  }
  // 3. Admit waiting sequences while there is room.
  while (!waiting.empty() && budget > 0 &&
         static_cast<int64_t>(running.size()) < config_.max_seqs) {
    Sequence& sequence = *waiting.front();
    admit(sequence);
    int64_t pending = sequence.pending();
    int64_t count = config_.chunked_prefill ? std::min(pending, budget) : pending;
    if ((!config_.chunked_prefill && count > budget && !plan.empty()) ||
        !reserve_for(sequence, sequence.kv.length + count, running, waiting)) {
      release_sequence(sequence);
      break;
    }
    add(sequence, count, count == pending);
    budget -= count;
    if (!sequence.reported_admission) sequence.observer->on_admitted();
    sequence.reported_admission = true;
    // The first mask, while the prompt is computed.
    if (sequence.spec.constraint && !sequence.started) prepare_constraint(sequence);
    running.push_back(std::move(waiting.front()));
    waiting.pop_front();
  }
  return plan;
}

// What a sequence that wants logits asks of the step: its next token, drawn by the backend with
// the sequence's parameters, random number, penalty history and (under a constraint) the mask
// of the tokens allowed; or, while that mask is still being computed, the logits row, held until
// it is ready. A constraint that fails here fails the sequence (nothing is wanted then).
StepChunk::Want Scheduler::wanted(Sequence& sequence, TokenDraw& draw) {
  if (TokenConstraint* constraint = sequence.spec.constraint.get()) {
    prepare_constraint(sequence);
    if (sequence.preparing) return StepChunk::Want::logits;
    constraint->allowed(model_->config().vocabulary, sequence.allowed);
    if (failed_constraint(sequence)) return StepChunk::Want::nothing;
    draw.allowed = sequence.allowed;
  }
  draw.params = &sequence.sampler.params();
  draw.uniform = sequence.sampler.next_uniform();
  draw.history = std::span<const TokenId>(sequence.tokens).subspan(sequence.spec.prompt.size());
  return StepChunk::Want::token;
}

// One step over the planned chunks; false (every planned sequence failed) when it throws.
bool Scheduler::run_batch(std::vector<Planned>& plan, int64_t& prompt_tokens) {
  chunks_.clear();
  for (auto& entry : plan) {
    Sequence& sequence = *entry.sequence;
    StepChunk chunk;
    chunk.tokens =
        std::span<const TokenId>(sequence.tokens)
            .subspan(static_cast<size_t>(sequence.kv.length), static_cast<size_t>(entry.count));
    chunk.start = sequence.kv.length;
    chunk.block_table = sequence.kv.blocks;
    if (entry.drafted > 0)
      entry.want = StepChunk::Want::every_logits;  // the model's choice after each guess
    else
      entry.want = entry.logits ? wanted(sequence, chunk.draw) : StepChunk::Want::nothing;
    chunk.want = entry.want;
    chunks_.push_back(chunk);
    if (entry.drafted == 0 && (entry.count > 1 || !sequence.started)) prompt_tokens += entry.count;
  }
  try {
    backend_->forward(chunks_, output_);
  } catch (const std::exception& error) {
    for (const auto& entry : plan) {
      if (!entry.sequence->observer) continue;
      entry.sequence->observer->on_error(std::string("the forward pass failed: ") + error.what());
      entry.sequence->observer.reset();
    }
    return false;
  }
  for (const auto& entry : plan)
    entry.sequence->kv.length += entry.count;
  return true;
}

// Gives each planned sequence its drawn token and tells its observer, or holds the logits of
// one whose constraint was not ready; a finished sequence lets go of its observer. Returns the
// tokens generated.
int64_t Scheduler::publish(const std::vector<Planned>& plan) {
  const int64_t vocabulary = model_->config().vocabulary;
  size_t row = 0;
  size_t token = 0;
  int64_t generated = 0;
  for (const auto& entry : plan) {
    Sequence& sequence = *entry.sequence;
    if (entry.drafted > 0) {
      generated += take_verified(sequence, entry.drafted, row);
      row += static_cast<size_t>(entry.count);
      publish_full_blocks(sequence);  // after the rejected guesses left the KV
      continue;
    }
    publish_full_blocks(sequence);
    if (entry.want == StepChunk::Want::token) {
      generated += take(sequence, output_.tokens[token++]);
    } else if (entry.want == StepChunk::Want::logits) {
      auto begin = output_.logits.begin() + static_cast<std::ptrdiff_t>(row * vocabulary);
      sequence.held_logits.assign(begin, begin + vocabulary);
      sequence.holding = true;
      ++row;
    }
  }
  return generated;
}

bool Scheduler::may_draft(const Sequence& sequence) const {
  const int64_t max_draft =
      draft_model_ ? config_.draft.max_draft : config_.prompt_lookup.max_draft;
  // A constrained answer decodes as usual: its mask for a position depends on the tokens before.
  return max_draft > 0 && sequence.started && !sequence.spec.constraint;
}

void Scheduler::propose_drafts(const std::vector<std::unique_ptr<Sequence>>& running) {
  proposed_.clear();
  std::vector<DraftModel::Ask> asks;
  for (const auto& sequence : running) {
    if (sequence->pending() != 1 || !may_draft(*sequence) || sequence->draft_skip > 0) continue;
    if (sequence->draft_length <= 0) sequence->draft_length = config_.draft.max_draft;
    const auto length = static_cast<int64_t>(sequence->tokens.size());
    const int64_t limit =
        std::min({sequence->draft_length, sequence->spec.max_tokens - sequence->generated - 1,
                  model_->config().context - length - 1});
    if (limit > 0) asks.push_back({sequence->id, sequence->tokens, limit});
  }
  if (asks.empty()) return;
  std::vector<std::vector<TokenId>> guesses;
  try {
    guesses = draft_model_->propose(asks);
  } catch (const std::exception& error) {
    // No guesses this step: the model decodes as without a draft. Said once per new reason.
    std::string reason = std::string("the draft model's step failed: ") + error.what();
    if (reason != draft_failure_ && config_.draft.report) config_.draft.report(reason);
    draft_failure_ = std::move(reason);
    return;
  }
  for (size_t i = 0; i < asks.size(); ++i)
    proposed_[asks[i].sequence] = std::move(guesses[i]);
}

int64_t Scheduler::draft(Sequence& sequence, int64_t budget) {
  if (!may_draft(sequence)) return 0;
  if (sequence.draft_skip > 0) {
    --sequence.draft_skip;
    return 0;
  }
  const auto length = static_cast<int64_t>(sequence.tokens.size());
  const int64_t room = std::min({budget, sequence.spec.max_tokens - sequence.generated - 1,
                                 model_->config().context - length - 1});
  std::vector<TokenId> guesses;
  if (draft_model_) {
    auto found = proposed_.find(sequence.id);
    if (found != proposed_.end()) guesses = std::move(found->second);
    // A draft with a larger vocabulary may guess an id the model does not have.
    auto outside = std::find_if(guesses.begin(), guesses.end(), [&](TokenId token) {
      return token >= model_->config().vocabulary;
    });
    guesses.erase(outside, guesses.end());
    if (static_cast<int64_t>(guesses.size()) > room)
      guesses.resize(static_cast<size_t>(std::max<int64_t>(room, 0)));
  } else {
    guesses = lookup_draft(config_.prompt_lookup, sequence.tokens, room);
  }
  const auto drafted = static_cast<int64_t>(guesses.size());
  // Guesses never preempt anyone: without room they are not made.
  if (drafted == 0 || !reserve(cache_, sequence.kv, sequence.kv.length + 1 + drafted)) return 0;
  sequence.tokens.insert(sequence.tokens.end(), guesses.begin(), guesses.end());
  return drafted;
}

int64_t Scheduler::take_verified(Sequence& sequence, int64_t drafted, size_t first_row) {
  const int64_t vocabulary = model_->config().vocabulary;
  const auto guessed = sequence.tokens.end() - drafted;
  const std::vector<TokenId> guesses(guessed, sequence.tokens.end());
  sequence.tokens.erase(guessed, sequence.tokens.end());
  // The step computed the last token and every guess; a guess's keys and values stay only once
  // the model has chosen the same token there (the rest are overwritten when reached again).
  sequence.kv.length -= drafted;
  sequence.drafted_tokens += drafted;
  int64_t generated = 0;
  int64_t accepted = 0;
  for (int64_t i = 0; i <= drafted && sequence.observer; ++i) {
    auto begin = output_.logits.begin() +
                 static_cast<std::ptrdiff_t>((first_row + static_cast<size_t>(i)) * vocabulary);
    verify_row_.assign(begin, begin + vocabulary);
    const size_t prompt = sequence.spec.prompt.size();
    std::span<const TokenId> history(sequence.tokens.data() + prompt,
                                     sequence.tokens.size() - prompt);
    // Each guess is checked by the sampling rule (sampler.h: verify_guess); the row after the
    // last guess gives one more token, drawn as usual.
    bool guess_kept = false;
    SampledToken chosen;
    if (i < drafted) {
      VerifiedToken verified =
          sequence.sampler.verify(verify_row_, history, guesses[static_cast<size_t>(i)]);
      chosen = std::move(verified.token);
      guess_kept = verified.accepted;
    } else {
      chosen = sequence.sampler.sample(verify_row_, history);
    }
    // Counted before take(), which may end the sequence and report its usage.
    if (guess_kept) {
      ++accepted;
      ++sequence.accepted_tokens;
    }
    generated += take(sequence, chosen);
    if (!guess_kept || !sequence.observer) break;
    ++sequence.kv.length;
  }
  if (accepted == 0) {
    sequence.draft_backoff = std::min<int64_t>(2 * sequence.draft_backoff + 1, 16);
    sequence.draft_skip = sequence.draft_backoff;
  } else {
    sequence.draft_backoff = 0;
  }
  sequence.draft_length = accepted == drafted
                              ? std::min(config_.draft.max_draft, sequence.draft_length + 1)
                              : accepted + 1;
  std::lock_guard lock(mutex_);
  stats_.drafted_tokens += drafted;
  stats_.accepted_tokens += accepted;
  return generated;
}

// The constraint's slow work, when it has some, goes to the worker; the sequence is `preparing`
// until the engine thread sees it finished.
void Scheduler::prepare_constraint(Sequence& sequence) {
  if (sequence.preparing || !sequence.observer) return;
  std::function<void()> work = sequence.spec.constraint->prepare();
  if (!work) return;
  sequence.preparing = true;
  constraint_worker_.post([this, id = sequence.id, work = std::move(work)] {
    std::string error;
    try {
      work();
    } catch (const std::exception& thrown) {
      error = thrown.what();
    }
    {
      std::lock_guard lock(mutex_);
      prepared_.push_back({id, std::move(error)});
    }
    work_.notify_one();
  });
}

// Fails the sequence when its constraint cannot go on (a budget spent).
bool Scheduler::failed_constraint(Sequence& sequence) {
  std::string reason = sequence.spec.constraint->failure();
  if (reason.empty()) return false;
  sequence.observer->on_error(reason);
  sequence.observer.reset();
  return true;
}

// One token of `sequence` from logits it held while its constraint's mask was computed: the same
// draw the backend makes (sampler.h), here on the host. Returns the tokens generated (0 or 1).
int64_t Scheduler::sample(Sequence& sequence, std::span<float> logits) {
  std::span<const TokenId> history(sequence.tokens.data() + sequence.spec.prompt.size(),
                                   sequence.tokens.size() - sequence.spec.prompt.size());
  if (TokenConstraint* constraint = sequence.spec.constraint.get()) {
    constraint->restrict(logits);
    if (failed_constraint(sequence)) return 0;
  }
  return take(sequence, sequence.sampler.sample(logits, history));
}

int64_t Scheduler::take(Sequence& sequence, const SampledToken& sampled) {
  TokenConstraint* constraint = sequence.spec.constraint.get();
  bool first = !sequence.started;
  sequence.started = true;
  bool end_of_generation = model_->tokenizer().vocabulary().is_end_of_generation(sampled.token);
  if (end_of_generation && (!sequence.spec.ignore_eos || (constraint && constraint->engaged()))) {
    sequence.observer->on_finish(FinishCause::end_of_generation, sequence.usage());
    sequence.observer.reset();
    return 0;
  }
  sequence.tokens.push_back(sampled.token);
  ++sequence.generated;
  if (constraint) {
    constraint->accept(sampled.token);
    if (failed_constraint(sequence)) return 1;
  }
  sequence.observer->on_token(sampled, first, sequence.usage());
  if (constraint && constraint->complete()) {
    sequence.observer->on_finish(FinishCause::end_of_generation, sequence.usage());
    sequence.observer.reset();
  } else if (sequence.generated >= sequence.spec.max_tokens ||
             static_cast<int64_t>(sequence.tokens.size()) >= model_->config().context) {
    sequence.observer->on_finish(FinishCause::length, sequence.usage());
    sequence.observer.reset();
  } else if (constraint) {
    prepare_constraint(sequence);  // the next mask, while the next forward pass runs
  }
  return 1;
}

// Sequences whose constraint work finished: a sequence holding logits samples them now (or
// hands out more work). Returns the tokens generated.
int64_t Scheduler::resume_prepared(std::vector<Prepared>& prepared,
                                   std::vector<std::unique_ptr<Sequence>>& running,
                                   std::deque<std::unique_ptr<Sequence>>& waiting) {
  int64_t generated = 0;
  for (Prepared& done : prepared) {
    auto is_it = [&](const auto& sequence) { return sequence->id == done.id; };
    auto found = std::find_if(running.begin(), running.end(), is_it);
    Sequence* sequence = found != running.end() ? found->get() : nullptr;
    if (!sequence) {
      auto queued = std::find_if(waiting.begin(), waiting.end(), is_it);
      if (queued != waiting.end()) (*queued)->preparing = false;
      continue;  // preempted (its logits come again), or gone
    }
    sequence->preparing = false;
    if (!sequence->observer) continue;
    if (!done.error.empty()) {
      sequence->observer->on_error("the answer's constraint failed: " + done.error);
      sequence->observer.reset();
      continue;
    }
    if (!sequence->holding) continue;  // prepared ahead; taken at its next sampling
    prepare_constraint(*sequence);
    if (sequence->preparing) continue;
    sequence->holding = false;
    std::vector<float> logits = std::move(sequence->held_logits);
    sequence->held_logits.clear();
    generated += sample(*sequence, logits);
  }
  release_finished(running);
  return generated;
}

void Scheduler::release_finished(std::vector<std::unique_ptr<Sequence>>& running) {
  std::erase_if(running, [&](const auto& sequence) {
    if (sequence->observer) return false;
    release_sequence(*sequence);
    return true;
  });
}

bool Scheduler::step(std::vector<std::unique_ptr<Sequence>>& running,
                     std::deque<std::unique_ptr<Sequence>>& waiting,
                     std::vector<Prepared>& prepared) {
  int64_t generated = resume_prepared(prepared, running, waiting);
  drop_cancelled(running);
  drop_cancelled(waiting);
  std::vector<Planned> planned = plan(running, waiting);
  if (planned.empty()) {
    bool held = std::any_of(running.begin(), running.end(),
                            [](const auto& sequence) { return sequence->holding; });
    if (!held && (!running.empty() || !waiting.empty())) {
      // Nothing can run: only possible when one sequence alone does not fit, which submit rules
      // out.
      for (auto& sequence : running) {
        sequence->observer->on_error("the KV cache is too small to continue this request");
        release_sequence(*sequence);
      }
      running.clear();
    }
    std::lock_guard lock(mutex_);
    stats_.generated_tokens += generated;
    return generated > 0 || !held;
  }
  int64_t prompt_tokens = 0;
  bool ran = run_batch(planned, prompt_tokens);
  if (ran) generated += publish(planned);
  release_finished(running);
  std::lock_guard lock(mutex_);
  stats_.generated_tokens += generated;
  if (!ran) return true;
  ++stats_.steps;
  stats_.prompt_tokens_computed += prompt_tokens;
  return true;
}

BackendMemory Scheduler::memory_with_draft() const {
  BackendMemory memory = backend_->info().memory;
  if (draft_model_) {
    const BackendMemory draft = draft_model_->backend_info().memory;
    memory.weight_bytes += draft.weight_bytes;
    memory.kv_pool_bytes += draft.kv_pool_bytes;
    memory.workspace_bytes += draft.workspace_bytes;
  }
  return memory;
}

void Scheduler::refresh_stats(const std::vector<std::unique_ptr<Sequence>>& running,
                              const std::deque<std::unique_ptr<Sequence>>& waiting) {
  const BackendMemory memory = memory_with_draft();
  int64_t sequence_blocks = 0;
  for (const auto& sequence : running)
    sequence_blocks += static_cast<int64_t>(sequence->kv.blocks.size());
  std::lock_guard lock(mutex_);
  stats_.running = static_cast<int64_t>(running.size());
  stats_.waiting = static_cast<int64_t>(waiting.size() + incoming_.size());
  stats_.free_blocks = cache_.free_blocks();
  backend_info_.memory = memory;
  stats_.cached_blocks = prefix_cache_.cached_blocks();
  stats_.evictable_blocks = prefix_cache_.evictable_blocks();
  stats_.sequence_blocks = sequence_blocks;
  stats_.prefix_queried_blocks = prefix_cache_.queried_blocks();
  stats_.prefix_hit_blocks = prefix_cache_.hit_blocks();
}

}  // namespace chatflow::engine
