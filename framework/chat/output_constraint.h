// What a request's answer must be, as a grammar the sampler enforces: a value of
// response_format's JSON Schema (or any JSON object), or the tool calls tool_choice demands,
// written the way the model writes calls. With tool_choice "auto" the grammar starts only where a
// call opens (its trigger), so the model may answer in text or call.
#pragma once

#include <memory>
#include <string>

#include <boost/json/value.hpp>

#include "framework/api/request.h"
#include "framework/grammar/grammar.h"

namespace chatflow::chat {

struct OutputConstraint {
  // Identifies the grammar (equal keys, equal grammars; empty: the answer is free), so a
  // compiled grammar and its token masks are found again without compiling.
  std::string key;
  // Where the grammar starts: from the first token when empty, else where this text appears
  // (only at the start of the answer, after spaces, when trigger_at_start); either way after the
  // thinking block of an answer that splits reasoning.
  std::string trigger;
  bool trigger_at_start = false;
};

// What the answer must follow, without compiling it. `reasoning`: the answer may first think
// (its grammar then allows the line breaks after it).
OutputConstraint output_constraint(const GenerationParams& params, ToolCallFormat format,
                                   bool reasoning);

// The grammar of output_constraint's key. Throws RequestFailure (400) naming a schema keyword
// the tool parameters or response_format use that cannot be enforced, or (code
// "schema_too_complex") a grammar over its GrammarLimits: too large, or so ambiguous that a
// probe of a few hundred characters keeps more readings alive than a state may hold.
std::shared_ptr<const grammar::Grammar> output_grammar(const GenerationParams& params,
                                                       ToolCallFormat format, bool reasoning);

// Throws RequestFailure (400, param `param`, code "unsupported_schema") when the schema uses what
// cannot be enforced, naming the keyword and where it is.
void check_json_schema(const boost::json::value& schema, const std::string& param);

}  // namespace chatflow::chat
