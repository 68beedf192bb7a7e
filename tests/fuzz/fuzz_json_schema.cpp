// libFuzzer target: any bytes as a JSON Schema. Compiling must either succeed or throw
// grammar::SchemaError, or GrammarLimitExceeded for a grammar over its limits (never another
// exception, a crash, a stack overflow or a hang: deep schemas and $ref cycles are refused); a
// compiled schema's masks, random-walked over a small vocabulary, must agree with
// Matcher::advance on every token chosen, unless a state outgrows the grammar's limits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "framework/grammar/grammar.h"
#include "framework/grammar/matcher.h"
#include "framework/grammar/token_masker.h"

namespace {

std::shared_ptr<const chatflow::grammar::TokenTable> vocabulary() {
  std::vector<std::string> tokens = {
      "",     "{",     "}",   "[",   "]",   "\"",    "\":",  ", ",   "\": ",         "true",
      "null", "-1",    "0.5", "e+1", "\\n", "\\u00", "\xC3", "\xA9", "\xE2\x82\xAC", "ab",
      "name", "\"a\"", " "};
  for (int byte = 0; byte < 256; ++byte)  // every byte, so a live state always has a token
    tokens.emplace_back(1, static_cast<char>(byte));
  return chatflow::grammar::make_token_table(std::move(tokens));
}

// Random walks through the grammar, each mask checked against the matcher.
void random_walks(const std::shared_ptr<const chatflow::grammar::Grammar>& grammar, size_t size) {
  using namespace chatflow::grammar;
  static const auto table = vocabulary();
  TokenMasker masker(grammar, table, 64);
  uint64_t choice = 0x9E3779B97F4A7C15ULL ^ size;
  for (int walk = 0; walk < 3; ++walk) {
    Matcher state(grammar);
    for (int step = 0; step < 48 && !(state.accepting() && !state.can_continue()); ++step) {
      auto mask = masker.allowed(state);
      std::vector<size_t> allowed;
      for (size_t id = 0; id < table->token_bytes.size(); ++id)
        if ((*mask)[id / 64] >> (id % 64) & 1) allowed.push_back(id);
      if (allowed.empty()) {
        if (state.can_continue()) __builtin_trap();  // some byte must be allowed
        break;
      }
      choice = choice * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t token = allowed[(choice >> 33) % allowed.size()];
      if (!state.advance(table->token_bytes[token])) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chatflow::grammar;
  if (size > 8192) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  boost::system::error_code error;
  boost::json::parse_options options;
  options.max_depth = 256;
  boost::json::value schema = boost::json::parse(text, error, {}, options);
  if (error) return 0;
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = compile_json_schema(schema);
  } catch (const SchemaError&) {
    return 0;
  } catch (const GrammarLimitExceeded&) {
    return 0;
  }
  try {
    random_walks(grammar, size);
  } catch (const GrammarLimitExceeded&) {
    // A state over the grammar's limits ends the walk, as it ends a request.
  }
  return 0;
}
