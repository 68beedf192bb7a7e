// The upstream resource: an OpenAI-compatible engine (vLLM, TGI, llama.cpp's server, another
// chatflow, a hosted API) at one or more endpoints, which the upstream_generate stage generates
// through. The client (framework/upstream/upstream_client.h) owns the connections, health
// checks, circuit breakers and balancing; this resource adds what the pipeline and the server
// see: the model id clients ask for, the optional tokenizer that counts tokens the way the
// engine does, and the number of calls in flight as the engine gauge.
#pragma once

#include <memory>
#include <string>

#include "framework/api/capabilities.h"
#include "framework/api/registry.h"
#include "framework/api/served_model.h"
#include "framework/upstream/upstream_client.h"
#include "stages/gguf_model.h"

namespace chatflow {

class UpstreamModel final : public Resource, public ServedModel, public AnswerTokenBound {
 public:
  // `tokenizer` may be null: token counts are then the engine's, or estimated (see count_*).
  UpstreamModel(upstream::UpstreamSettings settings, std::string upstream_model,
                std::string served_name, int64_t context_length,
                std::shared_ptr<GgufModel> tokenizer, int64_t max_tokens_default = 0);

  upstream::UpstreamClient& client() { return client_; }
  // The name the engine knows the model by (the body's "model").
  const std::string& upstream_model() const { return upstream_model_; }
  const GgufModel* tokenizer() const { return tokenizer_.get(); }

  // Prompt tokens of `request`: exactly with the tokenizer (its chat template too), else an
  // estimate of a token per 4 bytes plus 4 per message for the template's markers.
  int64_t count_prompt_tokens(const Request& request) const;
  // Tokens of generated `text`: with the tokenizer, else a token per 4 bytes.
  int64_t count_text_tokens(const std::string& text) const;
  // No prompt the engine reads for `request` has more tokens than this: its bytes (every token
  // stands for at least one) with the tools it offers, plus room for the template's markers.
  // The engine's own count is believed up to it.
  int64_t prompt_token_bound(const Request& request) const;

  // The most tokens the answer may have: the request's max_tokens, else max_tokens_default,
  // else what context_length leaves, else the tokenizer's bound, else kMaxTokensWithoutContext;
  // held to the cap a gate set (GenerationParams::answer_token_cap). `sent`: whether the engine
  // is told it (not when it comes from the context, which the engine counts exactly itself).
  struct AnswerLimit {
    int64_t tokens = 0;
    bool sent = true;
  };
  AnswerLimit answer_limit(const GenerationParams& generation, int64_t prompt_tokens) const;

  // For the gates that name this upstream as their model (AnswerTokenBound): the prompt's tokens
  // with the tokenizer, else prompt_token_bound; answer_limit's tokens; the context.
  int64_t prompt_token_count(const Request& request) const override;
  int64_t answer_token_limit(const GenerationParams& generation,
                             int64_t prompt_tokens) const override;
  int64_t context_token_limit() const override { return context_length(); }

  // Tokens the engine spent on output it sent as `engine_events` events holding `text`, counted
  // so as never to cut short an answer the engine kept within max_tokens: with the tokenizer
  // (as text that continues an answer: without the space a SentencePiece vocabulary puts before
  // a text's first word), else one token per event (as vLLM, llama.cpp's server and chatflow
  // stream them) and at least one per kBytesPerTokenAtMost bytes.
  int64_t count_output_tokens(std::string_view text, int64_t engine_events) const;
  // The start of `text` that holds `tokens` of the `counted` that count_output_tokens found.
  std::string cut_output(std::string_view text, int64_t tokens, int64_t counted) const;
  static constexpr int64_t kBytesPerTokenAtMost = 16;

  const std::string& model_id() const override { return served_name_; }
  int64_t context_length() const override;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override;
  std::string detokenize(std::span<const int32_t> tokens) const override;
  EngineStats engine_stats() const override;

 private:
  // The tokenizer, or the client's 400 no_tokenizer (for /tokenize and /detokenize).
  const GgufModel& required_tokenizer() const;

  // The answer's bound before any gate's cap.
  AnswerLimit uncapped_answer_limit(const GenerationParams& generation,
                                    int64_t prompt_tokens) const;

  upstream::UpstreamClient client_;
  std::string upstream_model_;
  std::string served_name_;
  int64_t context_length_;
  std::shared_ptr<GgufModel> tokenizer_;
  // The tokenizer's vocabulary without its space prefix (null when it has none): generated text
  // arrives in pieces, and only a whole text's first word gets the prefix (" word" is one token
  // as the engine wrote it, two when counted as a text of its own).
  std::unique_ptr<engine::Tokenizer> continuation_tokenizer_;
  int64_t max_tokens_default_;
};

}  // namespace chatflow
