// The gguf_model resource: a GGUF model with its continuous-batching scheduler, shared by the
// model stages (tokenize, prefill, decode, detokenize) that name it. The hand-off of one request
// between the pipeline and the engine thread is in generation_stream.h; the model's side
// questions (a rewrite, a yes/no log-probability) in model_side_questions.cpp.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/api/capabilities.h"
#include "framework/api/prefix_cache_admin.h"
#include "framework/api/registry.h"
#include "framework/api/relevance_scorer.h"
#include "framework/api/served_model.h"
#include "framework/engine/chat_template.h"
#include "framework/engine/grammar_constraint.h"
#include "framework/engine/scheduler.h"
#include "stages/generation_stream.h"

namespace chatflow {

// The YAML keys of a gguf_model resource, which are also its settings.
// The prefix cache kept across restarts: saved to `path` when the model stops, read back at start.
struct KvPersistConfig {
  std::string path;  // empty: not kept
  int64_t max_bytes = int64_t{1} << 30;
};

struct KvCacheConfig {
  int64_t block_tokens = 16;
  int64_t blocks = 0;
  bool prefix_cache = true;
  std::string type = "f16";
  KvPersistConfig persist;
};

struct SchedulerSettings {
  int64_t max_seqs = 64;
  int64_t max_batched_tokens = 2048;
  bool chunked_prefill = true;
};

// Speculative decoding: `ngram` guesses the next tokens from earlier text (prompt lookup), `draft`
// has a smaller model with the same vocabulary guess them, and the model checks them in one step:
// greedy answers unchanged token for token, sampled ones with the same distribution.
struct SpeculativeSettings {
  std::string kind = "none";  // none, ngram or draft
  int64_t max_draft = 4;
  int64_t ngram_max = 3;
  int64_t ngram_min = 2;
  std::string draft_model;  // kind draft: the GGUF file
};

struct GgufModelConfig {
  std::string path = "auto";
  std::string backend = "auto";
  int threads = 0;
  std::string chat_template = "auto";
  // auto: split <think>...</think> into reasoning_content when the chat template knows the
  // markers; deepseek: always; none: leave the text as the model wrote it.
  std::string reasoning_format = "auto";
  std::string name;
  // Only the vocabulary, chat template and context length are read (the weights stay on disk
  // and no scheduler runs): a model that counts tokens for gates in front of an upstream engine.
  bool tokenizer_only = false;
  KvCacheConfig kv_cache;
  SchedulerSettings scheduler;
  // The answer's bound when a request gives no max_tokens; 0: up to the context.
  int64_t max_tokens_default = 0;
  SpeculativeSettings speculative;
};

// What a sequence run outside any request produced (generate_text and next_token_logprobs are
// built on it).
struct SideAnswer {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> first_alternatives;
  engine::SequenceUsage usage;
  engine::FinishCause finish = engine::FinishCause::end_of_generation;
};

// What rendering a request's prompt decided about reading its answer.
struct PromptFacts {
  Request::ReasoningSplit reasoning;
  ToolCallFormat tool_format = ToolCallFormat::none;
};

class GgufModel final : public Resource,
                        public ServedModel,
                        public AnswerTokenBound,
                        public RelevanceScorer,
                        public PrefixCacheAdmin {
 public:
  // `config.path` names the file (not "auto"). Throws ConfigError for a bad setting and the
  // loader's error for a bad file.
  explicit GgufModel(const GgufModelConfig& config);

  // Not for a tokenizer_only model, which has no weights.
  const engine::Model& model() const { return *model_; }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  bool tokenizer_only() const { return !scheduler_; }
  const engine::ChatFormat& chat_format() const { return chat_format_; }
  const std::string& name() const { return name_; }
  engine::SchedulerStats stats() const {
    return scheduler_ ? scheduler_->stats() : engine::SchedulerStats{};
  }

  const std::string& model_id() const override { return name_; }
  int64_t context_length() const override;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override;
  std::string detokenize(std::span<const int32_t> tokens) const override;
  EngineStats engine_stats() const override;
  bool generates() const override { return !tokenizer_only(); }

  // The most tokens the answer after a prompt of `prompt_tokens` may have: the request's
  // max_tokens when given (the engine refuses one that does not fit), else what the context and
  // the KV cache leave (at least 1), or max_tokens_default when that is less; held to the cap
  // a gate set (GenerationParams::answer_token_cap). What the gates reserve and the engine, an
  // agent's answer and side answers are held to.
  int64_t answer_token_limit(const GenerationParams& generation,
                             int64_t prompt_tokens) const override;
  // encode_prompt's token count.
  int64_t prompt_token_count(const Request& request) const override;
  int64_t context_token_limit() const override { return context_length_; }
  // The answer's bound without max_tokens as configured; 0: up to the context.
  int64_t max_tokens_default() const { return max_tokens_default_; }

  // The request's prompt as token ids: chat messages through the chat template (control tokens
  // only where the template wrote them), a completion prompt as it is. Throws RequestFailure
  // (400) for no messages, an unknown role, a template that raises (its message) or an empty
  // prompt. The offered tools reach a template that shows tools; for one that does not, the
  // system prompt describes them and asks for chatflow's generic call format, and tool calls and
  // results become text. `facts`, when given, receives how the answer to this prompt splits
  // (reasoning_format, and whether the rendered prompt ends inside an opened thinking block) and
  // how its tool calls are written.
  std::vector<int32_t> encode_prompt(const Request& request, bool add_generation_prompt,
                                     PromptFacts* facts = nullptr) const;

  // Starts generating `request.prompt_tokens` and defers the request: it continues through
  // `resume_port` of the deferring stage when the first token exists. A request that can never
  // fit throws RequestFailure (400, context_length_exceeded).
  std::shared_ptr<GenerationStream> start(Request& request, StageIo& io, PortId resume_port);

  // Greedy text after `prompt`, at most `max_tokens` tokens (stopping at end of sequence), for
  // stages that ask the model a side question (rewriting a query). Blocks the calling thread
  // until it is done; throws std::runtime_error when the engine refuses or fails it, or when
  // `cancelled` turns true first.
  std::string generate_text(std::vector<int32_t> prompt, int64_t max_tokens,
                            const std::string& cache_salt, const std::function<bool()>& cancelled);

  // A whole answer to `request` generated aside (an agent's step): its messages through the
  // chat template with the tools it offers, sampled with its parameters under its output
  // constraint (a call that opens follows the tool's schema). Blocks; throws like generate_text,
  // and RequestFailure (400) for a prompt that cannot fit or a schema that cannot be enforced.
  struct AsideAnswer {
    std::string text;
    ToolCallFormat tool_format = ToolCallFormat::none;  // how its calls are written
    Usage usage;
    bool cut_at_length = false;  // max_tokens (or the context) ended it
  };
  // `prompt` and `facts` are encode_prompt's for `request` (the caller has counted it already).
  AsideAnswer answer_aside(const Request& request, std::vector<int32_t> prompt,
                           const PromptFacts& facts, const std::function<bool()>& cancelled);

  // For each prompt, the `top` most likely next tokens with their log-probabilities; the
  // prompts share the engine's batches (scoring stages such as an LLM reranker). Blocks and
  // throws like generate_text.
  std::vector<std::vector<engine::TokenLogprob>> next_token_logprobs(
      std::vector<std::vector<int32_t>> prompts, int top, const std::string& cache_salt,
      const std::function<bool()>& cancelled);

  // POST /v1/rerank by the model (llm_reranker.cpp): the rerank stage's `kind: llm` scores.
  bool scores_relevance() const override { return generates(); }
  std::vector<int32_t> relevance_prompt(std::string_view query,
                                        std::string_view document) const override;
  int64_t relevance_context() const override;
  std::vector<double> relevance_scores(std::vector<std::vector<int32_t>> prompts,
                                       const std::string& cache_salt,
                                       const std::function<bool()>& cancelled) override;

  // POST /admin/prefix_cache/save and /clear.
  bool has_prefix_cache() const override { return scheduler_ && scheduler_->config().prefix_cache; }
  std::string prefix_cache_file() const override {
    return scheduler_ ? scheduler_->config().persist_path : std::string();
  }
  Saved save_prefix_cache() override;
  Cleared clear_prefix_cache() override;

 private:
  // A side sequence's tokens as text, its end-of-generation token left out.
  std::string answer_text(std::vector<int32_t> tokens) const;
  // Submits a sequence outside any request; the future holds its tokens and first alternatives.
  std::future<SideAnswer> ask_aside(engine::SequenceSpec spec,
                                    const std::function<bool()>& cancelled);

  // What the request's answer must follow (response_format, tool_choice), or null. Throws
  // RequestFailure (400) for a schema that cannot be enforced.
  std::shared_ptr<engine::TokenConstraint> constraint_for(
      const GenerationParams& generation, ToolCallFormat tool_format,
      const Request::ReasoningSplit& reasoning) const;

  // Refuses generation on a tokenizer_only model (RequestFailure 500, or runtime_error aside).
  void require_engine() const;

  std::shared_ptr<const engine::Model> model_;              // null when tokenizer_only
  std::unique_ptr<const engine::Tokenizer> own_tokenizer_;  // tokenizer_only
  const engine::Tokenizer* tokenizer_ = nullptr;
  int64_t context_length_ = 0;
  std::unique_ptr<engine::Scheduler> scheduler_;  // null when tokenizer_only
  // Compiled grammars with their token masks, most recently used first: a schema many requests
  // share keeps its masks warm.
  static constexpr size_t kCachedGrammars = 64;
  mutable std::mutex grammar_mutex_;
  mutable std::shared_ptr<const grammar::TokenTable> token_table_;
  mutable std::vector<std::pair<std::string, std::shared_ptr<const engine::GrammarMasks>>>
      grammars_;
  engine::ChatFormat chat_format_;
  bool splits_reasoning_ = false;
  // How the template's model writes calls: generic for a template that shows no tools, or whose
  // format chatflow does not read (it is then told the generic format instead).
  ToolCallFormat template_tool_format_ = ToolCallFormat::generic;
  std::string name_;
  int64_t block_tokens_;
  int64_t max_tokens_default_ = 0;
};

}  // namespace chatflow
