// Continuous batching on one engine thread. Every step gathers the next token of each running
// sequence plus chunks of waiting prompts, within a token budget (max_batched_tokens) and a
// sequence cap (max_seqs); hands them to the backend (backend.h) as one step, each sequence's
// draw (its parameters, its random number, its constraint's mask) with it; and reports each new
// token to the sequence's observer. Decoding sequences are served first, so long prompts never
// starve generation. The scheduler is the host side of the seam: block tables, the block
// allocator and the prefix cache, sampling state and masks; it never branches on the device.
//
// When KV blocks run out, the newest running sequence is preempted: its blocks are released and
// it is recomputed later from its tokens (which the prefix cache usually still holds).
// A cancelled sequence leaves at the next step and its blocks return to the pool in that step.
//
// A constraint's slow work (a grammar's token mask for a state not seen before) runs on a
// ConstraintWorker, started as soon as the token before it is accepted so that it overlaps the
// next forward pass. A sequence whose mask is not ready when its step is planned asks for its
// logits instead of a token, keeps them, and sits out the steps until the mask is ready (then
// its token is drawn here, on the host); the other sequences keep stepping meanwhile.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/constraint_worker.h"
#include "framework/engine/draft_model.h"
#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/prefix_cache.h"
#include "framework/engine/prefix_cache_file.h"
#include "framework/engine/prompt_lookup.h"
#include "framework/engine/sampler.h"
#include "framework/engine/token_constraint.h"

namespace chatflow::engine {

struct SchedulerConfig {
  int threads = 1;  // the CPU backend's compute threads
  int64_t max_seqs = 64;
  int64_t max_batched_tokens = 2048;
  bool chunked_prefill = true;
  int64_t block_tokens = 16;
  int64_t kv_blocks =
      0;  // 0: enough for max_seqs sequences of up to 2048 tokens, within the context
  bool prefix_cache = true;
  kernels::KvType kv_type = kernels::KvType::f16;
  std::string backend = "cpu";  // what make_backend builds: cpu, cuda or auto
  // Speculative decoding by prompt lookup, for sequences without a constraint: the guessed tokens
  // ride in the sequence's decode step and are kept while the model's check accepts them
  // (sampler.h's verify_guess). A greedy answer is the one decoding without guesses gives, token
  // for token; a sampled one has exactly the same distribution (but a seed draws differently).
  PromptLookup prompt_lookup;
  // Speculative decoding by a draft model (draft_model.h), instead of prompt lookup: its guesses
  // are checked the same way. Its backend is config.backend's kind, with the same threads.
  DraftSettings draft;
  // The prefix cache kept across restarts (prefix_cache_file.h): read from this file at start,
  // written to it when the scheduler stops, at most persist_max_bytes; empty: not kept.
  std::string persist_path;
  uint64_t persist_max_bytes = uint64_t{1} << 30;
  // Told what became of the file, a line at a time (the engine has no log of its own).
  std::function<void(const std::string&)> persist_report;
};

struct SequenceSpec {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  std::string cache_salt;  // set by the server from the tenant, never by the client
  // What the sequence may generate (structured outputs, tool calls); null: anything. Its own.
  std::shared_ptr<TokenConstraint> constraint;
};

struct SequenceUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;    // prompt tokens whose KV came from the prefix cache
  int64_t drafted_tokens = 0;   // guessed by speculative decoding and checked by the model
  int64_t accepted_tokens = 0;  // of those, the ones the model chose too
};

enum class FinishCause { end_of_generation, length };

// Called on the engine thread; must be quick and must not call back into the scheduler.
class SequenceObserver {
 public:
  virtual ~SequenceObserver() = default;
  // `first` marks the token that ends prefill (time to first token); `usage` counts so far.
  virtual void on_token(const SampledToken& token, bool first, const SequenceUsage& usage) = 0;
  virtual void on_finish(FinishCause cause, const SequenceUsage& usage) = 0;
  virtual void on_error(const std::string& message) = 0;
  // Polled once per step: true means drop the sequence (client gone, stream closed, ...).
  virtual bool cancelled() const = 0;
  // The sequence was dropped because cancelled() said so; nothing more will be called.
  virtual void on_dropped() {}
  // The sequence left the queue and joined its first batch (the end of its queue time).
  virtual void on_admitted() {}
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;  // prompt (and recomputed) tokens run through the model
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_queried_blocks = 0;
  int64_t prefix_hit_blocks = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t cached_blocks = 0;     // held by the prefix cache
  int64_t evictable_blocks = 0;  // cached and used by no sequence
  int64_t sequence_blocks = 0;   // block references held by sequences
  int64_t drafted_tokens = 0;    // guessed by prompt lookup and checked by the model
  int64_t accepted_tokens = 0;   // of those, the ones the model chose too
};

class Scheduler {
 public:
  // On the backend config.backend names (make_backend: throws BackendUnavailable).
  Scheduler(std::shared_ptr<const Model> model, SchedulerConfig config);
  // On `backend`, made for `model`; it gets its KV pool here.
  Scheduler(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
            SchedulerConfig config);
  ~Scheduler();  // fails the sequences still in flight, then stops the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Why `spec` can never run (empty prompt, unknown token, more tokens than the context or the
  // whole KV cache holds), or nullopt when it can.
  std::optional<std::string> validate(const SequenceSpec& spec) const;
  // Queues a sequence; returns validate()'s answer (and queues nothing) when it cannot run.
  std::optional<std::string> submit(SequenceSpec spec, std::shared_ptr<SequenceObserver> observer);

  SchedulerStats stats() const;
  // What the backend says about itself (its memory as of the last step).
  BackendInfo backend_info() const;
  const Model& model() const { return *model_; }
  const SchedulerConfig& config() const { return config_; }
  int64_t capacity_tokens() const;

  // The prefix cache saved to config.persist_path now, as a stop saves it, between two steps on
  // the engine thread (decoding waits while the file is written). Throws std::runtime_error when
  // no path is set, the engine is stopping, or the file cannot be written.
  PrefixCacheSaved save_prefix_cache_now();
  struct PrefixCacheCleared {
    int64_t blocks = 0;         // forgotten (those in use stay with their sequences)
    bool file_removed = false;  // config.persist_path was there and is gone
  };
  // Every cached block forgotten, between two steps, and the saved file removed, so that a
  // restart starts cold too. Throws std::runtime_error when the engine is stopping or the file
  // cannot be removed.
  PrefixCacheCleared clear_prefix_cache();

 private:
  struct Sequence;
  // A piece of one sequence in this step's batch.
  struct Planned {
    Sequence* sequence;
    int64_t count;
    bool logits;
    // What the step asks the backend for: a token, or (logits) the row to hold while the
    // constraint's mask is computed; nothing for a prompt's piece.
    StepChunk::Want want = StepChunk::Want::nothing;
    int64_t drafted = 0;  // guessed tokens at the end of the chunk (prompt lookup)
  };
  // A sequence whose constraint work finished (an error it threw, or "").
  struct Prepared {
    uint64_t id;
    std::string error;
  };
  void run();
  // False when nothing could run: every runnable sequence waits for its constraint's work.
  bool step(std::vector<std::unique_ptr<Sequence>>& running,
            std::deque<std::unique_ptr<Sequence>>& waiting, std::vector<Prepared>& prepared);
  int64_t resume_prepared(std::vector<Prepared>& prepared,
                          std::vector<std::unique_ptr<Sequence>>& running,
                          std::deque<std::unique_ptr<Sequence>>& waiting);
  void prepare_constraint(Sequence& sequence);
  bool failed_constraint(Sequence& sequence);
  // What a planned sequence that wants logits asks the step for, with its draw's data.
  StepChunk::Want wanted(Sequence& sequence, TokenDraw& draw);
  // One token of `sequence` from held logits, drawn here; returns the tokens generated (0 or 1).
  int64_t sample(Sequence& sequence, std::span<float> logits);
  // `sampled` becomes the sequence's next token (or ends it); returns the tokens generated.
  int64_t take(Sequence& sequence, const SampledToken& sampled);
  // The tokens of a step that checked `drafted` guesses: the model's choice after each row, kept
  // while it matches the guess. Returns the tokens generated.
  int64_t take_verified(Sequence& sequence, int64_t drafted, size_t first_row);
  // Guesses appended to a decoding sequence's tokens (and KV reserved for them), or 0.
  int64_t draft(Sequence& sequence, int64_t budget);
  // Whether `sequence` may have guesses: speculation on, decoding, no constraint.
  bool may_draft(const Sequence& sequence) const;
  // The draft model's guesses for every decoding sequence of `running` that drafts this step,
  // made in batched draft steps, into proposed_.
  void propose_drafts(const std::vector<std::unique_ptr<Sequence>>& running);
  void release_finished(std::vector<std::unique_ptr<Sequence>>& running);
  template <class List>
  void drop_cancelled(List& sequences);
  std::vector<Planned> plan(std::vector<std::unique_ptr<Sequence>>& running,
                            std::deque<std::unique_ptr<Sequence>>& waiting);
  bool run_batch(std::vector<Planned>& plan, int64_t& prompt_tokens);
  int64_t publish(const std::vector<Planned>& plan);
  bool reserve_for(Sequence& sequence, int64_t length,
                   std::vector<std::unique_ptr<Sequence>>& running,
                   std::deque<std::unique_ptr<Sequence>>& waiting);
  void admit(Sequence& sequence);
  void publish_full_blocks(Sequence& sequence);
  void release_sequence(Sequence& sequence);
  void restore_prefix_cache();
  void save_prefix_cache();
  PrefixCacheSaved write_prefix_cache();
  // Runs `chore` on the engine thread before its next step and waits for it; rethrows what it
  // throws.
  void between_steps(const std::function<void()>& chore);
  // The backend's memory, the draft model's added (what the model takes where it computes).
  BackendMemory memory_with_draft() const;
  void refresh_stats(const std::vector<std::unique_ptr<Sequence>>& running,
                     const std::deque<std::unique_ptr<Sequence>>& waiting);

  std::shared_ptr<const Model> model_;
  SchedulerConfig config_;
  std::unique_ptr<Backend> backend_;
  KvBlockAllocator cache_;
  PrefixCache prefix_cache_;
  std::vector<StepChunk> chunks_;
  StepOutput output_;
  std::vector<float> verify_row_;
  std::unique_ptr<DraftModel> draft_model_;                      // null without config.draft.model
  std::unordered_map<uint64_t, std::vector<TokenId>> proposed_;  // this step's, by sequence id
  std::string draft_failure_;  // the draft step's last failure, said once
  // How often the prefix cache was cleared: a sequence admitted before the last clear publishes
  // no more blocks.
  uint64_t cache_epoch_ = 0;
  // What the saved prefix cache depends on, worked out once at start (the model's fingerprint
  // reads every tensor's first bytes) and written with the file at stop.
  PrefixCacheIdentity persist_identity_;  // a logits row being checked against a guess

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  std::vector<std::function<void()>> chores_;  // between_steps'
  bool stopping_ = false;
  SchedulerStats stats_;
  uint64_t next_id_ = 0;
  std::vector<Prepared> prepared_;  // constraint work finished, not yet seen by the engine thread
  BackendInfo backend_info_;
  // After the members its work reports to, so it stops before they go.
  ConstraintWorker constraint_worker_;
  std::thread thread_;
};

}  // namespace chatflow::engine
