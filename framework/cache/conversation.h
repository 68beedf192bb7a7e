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
// What the semantic cache embeds and verifies: the newest user message (a completion's prompt).
std::string newest_question(RequestKind kind, const std::vector<Message>& messages,
                            const std::string& prompt);
// The turns before the newest user message, system messages left out, as JSON (roles, contents,
// tool calls); empty when there are none (a completion, or a conversation's first question). User
// messages are case-folded, without sentence punctuation and extra spaces ("Tell me about pandas."
// and "tell me about pandas" lead to the same place); the others are exact.
std::string earlier_turns_json(RequestKind kind, const std::vector<Message>& messages);
// Passages as they reach the prompt (text, document, title, chunk), as JSON.
std::string passages_json(const std::vector<ContextPassage>& passages);
// Every parameter that changes what the model says, as JSON.
std::string output_parameters_json(const GenerationParams& generation);

// The parameters that bound an answer's shape whatever the sampling (max_tokens, stop,
// ignore_eos): a semantic hit must still respect them.
std::string answer_shape_json(const GenerationParams& generation);

}  // namespace chatflow::cache
