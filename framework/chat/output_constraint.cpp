#include "framework/chat/output_constraint.h"

#include <boost/json.hpp>

#include "framework/chat/tool_calls.h"

namespace chatflow::chat {
namespace json = boost::json;
namespace {

using Builder = grammar::GrammarBuilder;
using Expr = grammar::GrammarBuilder::Expr;

[[noreturn]] void unenforceable(const grammar::SchemaError& error, const std::string& param) {
  std::string where = error.pointer().empty() ? "" : " at '" + error.pointer() + "'";
  throw RequestFailure(RequestError{400, "invalid_request_error",
                                    "'" + param + "' uses '" + error.keyword() + "'" + where +
                                        ", which chatflow cannot enforce: " + error.what(),
                                    "unsupported_schema", param});
}

Expr schema_expr(Builder& builder, const std::string& text, const std::string& param) {
  try {
    return builder.json_schema(text.empty() ? json::value(json::object{{"type", "object"}})
                                            : json::parse(text));
  } catch (const grammar::SchemaError& error) {
    unenforceable(error, param);
  }
}

// {"name": "NAME", "arguments": ARGUMENTS} (Llama 3 says "parameters"); the name is a plain
// identifier (checked at parse), so it needs no escaping.
Expr call_object(Builder& builder, const ToolDefinition& tool, size_t index,
                 ToolCallFormat format) {
  std::string key = format == ToolCallFormat::llama3 ? "parameters" : "arguments";
  return builder.sequence({builder.literal("{\"name\": \"" + tool.name + "\", \"" + key + "\": "),
                           schema_expr(builder, tool.parameters,
                                       "tools[" + std::to_string(index) + "].function.parameters"),
                           builder.literal("}")});
}

// One call or (parallel_tool_calls) several, in the model's format.
Expr calls_expr(Builder& builder, const GenerationParams& params, ToolCallFormat format) {
  std::vector<Expr> offered;
  for (size_t i = 0; i < params.tools.size(); ++i) {
    if (params.tool_choice == ToolChoice::function &&
        params.tools[i].name != params.tool_choice_function) {
      continue;
    }
    offered.push_back(call_object(builder, params.tools[i], i, format));
  }
  Expr one = offered.size() == 1 ? offered.front() : builder.choice(std::move(offered));
  auto several = [&](Expr item, const std::string& separator) {
    if (!params.parallel_tool_calls) return item;
    return builder.sequence(
        {item, builder.repeat(builder.sequence({builder.literal(separator), item}), 0, -1)});
  };
  switch (format) {
    case ToolCallFormat::hermes: {
      // The line breaks a model writes after its last block.
      Expr trailing = builder.repeat(builder.literal("\n"), 0, 2);
      return builder.sequence({several(builder.sequence({builder.literal("<tool_call>\n"), one,
                                                         builder.literal("\n</tool_call>")}),
                                       "\n"),
                               trailing});
    }
    case ToolCallFormat::llama3:
      return several(one, "; ");
    case ToolCallFormat::mistral:
      return builder.sequence({builder.literal("["), several(one, ", "), builder.literal("]")});
    default:
      return builder.sequence(
          {builder.literal("{\"tool_calls\": ["), several(one, ", "), builder.literal("]}")});
  }
}

// Where an unforced call begins: anywhere for Hermes' block, at the start of the answer for the
// formats whose whole answer is the call.
std::string call_trigger(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return "<tool_call>";
    case ToolCallFormat::mistral:
      return "[";
    default:
      return "{";
  }
}

// The grammar built and tried: one that would be too large, or would keep too many readings of
// the text alive at once, is this request's 400 now rather than a failed stream part-way through
// the answer (GrammarLimits; probe_ambiguity).
std::shared_ptr<const grammar::Grammar> build_checked(Builder& builder, Expr root,
                                                      const std::string& param) {
  try {
    auto grammar = builder.build(root);
    grammar::probe_ambiguity(*grammar);
    return grammar;
  } catch (const grammar::GrammarLimitExceeded& error) {
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "'" + param + "' is too complex to enforce: " + error.what(),
                                      "schema_too_complex", param});
  } catch (const std::invalid_argument& error) {  // the grammar's own safety net
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "'" + param + "' cannot be enforced: " + error.what(),
                                      "unsupported_schema", param});
  }
}

std::string constraint_key(const GenerationParams& params, ToolCallFormat format, bool reasoning) {
  json::array tools;
  for (const auto& tool : params.tools)
    tools.push_back(json::array{tool.name, tool.parameters});
  return json::serialize(json::array{
      std::string(to_string(format)), std::move(tools), static_cast<int>(params.tool_choice),
      params.tool_choice_function, params.parallel_tool_calls,
      static_cast<int>(params.response_format.kind), params.response_format.schema, reasoning});
}

}  // namespace

void check_json_schema(const json::value& schema, const std::string& param) {
  try {
    grammar::GrammarBuilder builder;
    builder.json_schema(schema);
  } catch (const grammar::SchemaError& error) {
    unenforceable(error, param);
  }
}

namespace {

// What the request demands of its answer, decided from its parameters alone.
struct Demand {
  bool calls = false;         // tools the model may call
  bool forced_calls = false;  // ... and must
  bool shaped = false;        // a response_format value
};

Demand demand_of(const GenerationParams& params) {
  Demand demand;
  demand.calls = !params.tools.empty() && params.tool_choice != ToolChoice::none;
  demand.forced_calls = demand.calls && (params.tool_choice == ToolChoice::required ||
                                         params.tool_choice == ToolChoice::function);
  demand.shaped = params.response_format.kind != ResponseFormat::Kind::text;
  return demand;
}

}  // namespace

OutputConstraint output_constraint(const GenerationParams& params, ToolCallFormat format,
                                   bool reasoning) {
  OutputConstraint constraint;
  Demand demand = demand_of(params);
  if (!demand.calls && !demand.shaped) return constraint;
  if (format == ToolCallFormat::none) format = ToolCallFormat::generic;
  constraint.key = constraint_key(params, format, reasoning);
  if (demand.calls && !demand.forced_calls && !demand.shaped) {
    constraint.trigger = call_trigger(format);
    constraint.trigger_at_start = format != ToolCallFormat::hermes;
  }
  return constraint;
}

std::shared_ptr<const grammar::Grammar> output_grammar(const GenerationParams& params,
                                                       ToolCallFormat format, bool reasoning) {
  Demand demand = demand_of(params);
  if (format == ToolCallFormat::none) format = ToolCallFormat::generic;
  Builder builder;
  std::optional<Expr> value;
  if (demand.shaped) {
    value = params.response_format.kind == ResponseFormat::Kind::json_object
                ? builder.any_json_object()
                : schema_expr(builder, params.response_format.schema,
                              "response_format.json_schema.schema");
  }
  const std::string param = demand.shaped ? "response_format.json_schema.schema" : "tools";
  // A call that waits for its trigger starts at the trigger itself.
  if (demand.calls && !demand.forced_calls && !demand.shaped)
    return build_checked(builder, calls_expr(builder, params, format), param);
  // After a thinking block come the line breaks that close it.
  Expr after_thinking =
      builder.repeat(builder.choice({builder.literal(" "), builder.literal("\n")}), 0, 3);
  if (!demand.calls) {
    // The answer is the value itself, as the client will parse it: no space before it.
    return build_checked(builder, reasoning ? builder.sequence({after_thinking, *value}) : *value,
                         param);
  }
  Expr body = demand.shaped && !demand.forced_calls
                  ? builder.choice({calls_expr(builder, params, format), *value})
                  : calls_expr(builder, params, format);
  // A model's first token often carries the space or line break before a call.
  Expr leading =
      reasoning
          ? after_thinking
          : builder.repeat(builder.choice({builder.literal(" "), builder.literal("\n")}), 0, 1);
  return build_checked(builder, builder.sequence({leading, body}), param);
}

}  // namespace chatflow::chat
