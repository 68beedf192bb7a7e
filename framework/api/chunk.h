// A chunk is one piece of a response stream: a text delta, the token ids it came from, and on
// the last chunk of a stream the reason the stream ended. A reasoning model's thinking and an
// engine's structured tool calls travel in fields of their own beside the text, never written
// into it as markup that a later stage would have to read back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow {

// OpenAI's finish reasons; a failed or cancelled request has an error instead (see Request).
enum class FinishReason { stop, length, content_filter };

std::string_view to_string(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache

  int64_t total() const { return prompt_tokens + completion_tokens; }
  Usage& operator+=(const Usage& other) {
    prompt_tokens += other.prompt_tokens;
    completion_tokens += other.completion_tokens;
    cached_prompt_tokens += other.cached_prompt_tokens;
    return *this;
  }
};

// A token's log-probability, with the most likely alternatives when they were asked for.
struct TokenLogprob {
  int32_t token = -1;
  std::string text;  // filled in by the detokenize stage
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

// A function call an assistant message makes (OpenAI's tool_calls[i]).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text, as the model wrote it
};

struct Chunk {
  std::string text;                    // text delta; may be empty (e.g. the final chunk)
  std::vector<int32_t> token_ids;      // tokens this delta came from
  std::optional<FinishReason> finish;  // set on the last chunk of the stream only
  std::vector<TokenLogprob> logprobs;  // one per token, when the request asked for them
  std::optional<Usage> usage;          // on the last chunk: the request's token counts
  std::string encoded;  // the chunk as the client receives it (SSE bytes), if an emitter stage ran
  // Tokens this delta came from when their ids are not known (an upstream engine's text).
  int64_t tokens_without_ids = 0;
  // Reasoning delta (the client's reasoning_content): thinking the model did before or beside
  // its answer, exactly as generated; `text` holds only the answer itself.
  std::string reasoning;
  // Tool calls made whole by whoever generated them (an upstream engine's structured calls),
  // each sent to the client as a call as it is. Calls a local model writes as text stay in
  // `text` until the response encoder reads them (framework/openai/tool_calls.h).
  std::vector<ToolCall> tool_calls;

  bool is_final() const { return finish.has_value(); }
  int64_t token_count() const {
    return token_ids.empty() ? tokens_without_ids : static_cast<int64_t>(token_ids.size());
  }

  // A text delta and the tokens it came from.
  static Chunk delta(std::string text, std::vector<int32_t> tokens = {}) {
    Chunk chunk;
    chunk.text = std::move(text);
    chunk.token_ids = std::move(tokens);
    return chunk;
  }
};

}  // namespace chatflow
