// A request's conversation in the forms caches key on: canonical JSON for exact matching (every
// message, role and byte), and plain text for embedding.
#pragma once

#include <string>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::cache {

// [kind, [[role, content]...], prompt] as JSON: equal exactly when the conversations are.
std::string conversation_json(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt);
// The system messages, joined: part of a semantic cache's partition, never of its vector.
std::string system_prompt(const std::vector<Message>& messages);
// The other turns' contents, one per line (a completion's prompt as it is): what is embedded.
std::string conversation_text(RequestKind kind, const std::vector<Message>& messages,
                              const std::string& prompt);
// Every parameter that changes what the model says, as JSON.
std::string output_parameters_json(const GenerationParams& generation);

// The parameters that bound an answer's shape whatever the sampling (max_tokens, stop,
// ignore_eos): a semantic hit must still respect them.
std::string answer_shape_json(const GenerationParams& generation);

}  // namespace chatflow::cache
