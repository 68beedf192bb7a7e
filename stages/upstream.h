// The upstream resource: an OpenAI-compatible engine (vLLM, TGI, llama.cpp's server, another
// chatflow, a hosted API) at one or more endpoints, which the upstream_generate stage generates
// through. The client (framework/upstream/upstream_client.h) owns the connections, health
// checks, circuit breakers and balancing; this resource adds what the pipeline and the server
// see: the model id clients ask for, the optional tokenizer that counts tokens the way the
// engine does, and the number of calls in flight as the engine gauge.
#pragma once

#include <memory>
#include <string>

#include "framework/api/registry.h"
#include "framework/api/served_model.h"
#include "framework/upstream/upstream_client.h"
#include "stages/gguf_model.h"

namespace chatflow {

class UpstreamModel final : public Resource, public ServedModel {
 public:
  // `tokenizer` may be null: token counts are then the engine's, or estimated (see count_*).
  UpstreamModel(upstream::UpstreamSettings settings, std::string upstream_model,
                std::string served_name, int64_t context_length,
                std::shared_ptr<GgufModel> tokenizer);

  upstream::UpstreamClient& client() { return client_; }
  // The name the engine knows the model by (the body's "model").
  const std::string& upstream_model() const { return upstream_model_; }
  const GgufModel* tokenizer() const { return tokenizer_.get(); }

  // Prompt tokens of `request`: exactly with the tokenizer (its chat template too), else an
  // estimate of a token per 4 bytes plus 4 per message for the template's markers.
  int64_t count_prompt_tokens(const Request& request) const;
  // Tokens of generated `text`: with the tokenizer, else a token per 4 bytes.
  int64_t count_text_tokens(const std::string& text) const;

  const std::string& model_id() const override { return served_name_; }
  int64_t context_length() const override;
  std::vector<int32_t> tokenize(std::string_view text, bool add_special,
                                bool parse_special) const override;
  std::string detokenize(std::span<const int32_t> tokens) const override;
  EngineStats engine_stats() const override;

 private:
  // The tokenizer, or the client's 400 no_tokenizer (for /tokenize and /detokenize).
  const GgufModel& required_tokenizer() const;

  upstream::UpstreamClient client_;
  std::string upstream_model_;
  std::string served_name_;
  int64_t context_length_;
  std::shared_ptr<GgufModel> tokenizer_;
};

}  // namespace chatflow
