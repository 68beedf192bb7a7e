#include "framework/server/embedding_routes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <boost/json.hpp>

#include "framework/api/relevance_scorer.h"
#include "framework/api/served_model.h"
#include "framework/api/text_embedder.h"
#include "framework/api/token_embedder.h"
#include "framework/chat/request_body.h"
#include "framework/server/side_gates.h"

namespace chatflow::server {
namespace json = boost::json;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;
namespace {

// OpenAI's own limit on inputs per call.
constexpr size_t kMaxInputs = 2048;
// Far more than an embedder reads (model2vec pools at most 512 tokens), far less than what would
// keep a worker busy for long.
constexpr size_t kMaxInputBytes = 32 * 1024;

struct NamedEmbedder {
  std::string name;  // the resource's name, which a request's `model` gives
  const TextEmbedder* embedder = nullptr;
};

std::vector<NamedEmbedder> embedders_of(const ServedPipeline& served) {
  std::vector<NamedEmbedder> found;
  for (const auto& resource : served.pipeline->spec().resources) {
    auto object = served.pipeline->resource(resource.name);
    if (const auto* embedder = dynamic_cast<const TextEmbedder*>(object.get()))
      found.push_back({resource.name, embedder});
  }
  return found;
}

// The embedder the request's `model` names: 404 when there is none of that name, or none at all.
NamedEmbedder embedder_named(const ServedPipeline& served, const std::string& model) {
  std::vector<NamedEmbedder> embedders = embedders_of(served);
  if (embedders.empty()) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this pipeline has no embedder: declare a resource of type "
                                    "embedder or embedding_model under 'resources:' to serve "
                                    "embeddings",
                                    "model_not_found", "model"));
  }
  std::string names;
  for (const NamedEmbedder& candidate : embedders) {
    if (candidate.name == model) return candidate;
    names += (names.empty() ? "'" : ", '") + candidate.name + "'";
  }
  // A serve file's `models:` entry answers to its own names with its one embedder.
  const auto& entry_names = served.model_ids;
  if (served.model_entry && embedders.size() == 1 &&
      std::find(entry_names.begin(), entry_names.end(), model) != entry_names.end())
    return embedders.front();
  throw RequestFailure(
      make_error(404, "invalid_request_error",
                 "The model '" + model + "' does not exist; the embedders here are " + names,
                 "model_not_found", "model"));
}

std::string required_model(const Fields& fields) {
  std::string model = fields.string("model", "");
  if (model.empty()) invalid("'model' is required: the name of an embedder resource", "model");
  return model;
}

// One text to embed: a non-empty string of at most kMaxInputBytes.
std::string checked_text(const json::value& value, const std::string& path) {
  if (value.is_array() || value.is_number()) {
    invalid("'" + path + "' holds token ids, which are not supported here: send the text", path,
            "unsupported_input");
  }
  if (!value.is_string()) invalid("'" + path + "' must be a string, got " + kind_of(value), path);
  std::string text(value.as_string());
  if (text.empty()) invalid("'" + path + "' is empty: give some text", path);
  if (text.size() > kMaxInputBytes) {
    invalid("'" + path + "' is " + std::to_string(text.size()) + " bytes; at most " +
                std::to_string(kMaxInputBytes) + " are accepted per text",
            path, "input_too_large");
  }
  return text;
}

// The texts of an array member, each checked, at most kMaxInputs of them.
std::vector<std::string> checked_texts(const json::array& array, const std::string& name,
                                       bool documents) {
  if (array.empty()) invalid("'" + name + "' is empty: give at least one text", name);
  if (array.size() > kMaxInputs) {
    invalid("'" + name + "' has " + std::to_string(array.size()) + " entries; at most " +
                std::to_string(kMaxInputs) + " are accepted per call",
            name, "too_many_inputs");
  }
  std::vector<std::string> texts;
  for (size_t i = 0; i < array.size(); ++i) {
    std::string path = name + "[" + std::to_string(i) + "]";
    const json::value* value = &array[i];
    if (documents && value->is_object()) {
      Fields document(value->as_object(), path + ".");
      value = document.get("text");
      if (!value) invalid("'" + path + ".text' is required", path + ".text");
      texts.push_back(checked_text(*value, path + ".text"));
      document.refuse_unread({});
      continue;
    }
    texts.push_back(checked_text(*value, path));
  }
  return texts;
}

std::string base64(std::string_view bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) group |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<uint8_t>(bytes[i + 2]);
    out += kDigits[(group >> 18) & 63];
    out += kDigits[(group >> 12) & 63];
    out += i + 1 < bytes.size() ? kDigits[(group >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[group & 63] : '=';
  }
  return out;
}

// OpenAI's base64 encoding: the vector's float32 values, little-endian, one after another.
std::string base64_floats(const std::vector<float>& vector) {
  std::string bytes;
  bytes.reserve(vector.size() * 4);
  for (float value : vector) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int shift = 0; shift < 32; shift += 8)
      bytes += static_cast<char>((bits >> shift) & 0xFF);
  }
  return base64(bytes);
}

json::object usage_json(int64_t tokens) {
  return {{"prompt_tokens", tokens}, {"total_tokens", tokens}};
}

// One entry of `input`: text, or token ids (OpenAI accepts an array of integers for one input, or
// an array of such arrays).
struct EmbeddingInput {
  std::string path;  // input, input[3]
  std::string text;
  std::vector<int64_t> tokens;
  bool is_tokens = false;
};

// Token ids of `value` (already known to be an array): non-empty, every entry an integer >= 0.
EmbeddingInput token_input(const json::array& ids, const std::string& path) {
  if (ids.empty()) invalid("'" + path + "' is empty: give at least one token id", path);
  EmbeddingInput input{path, {}, {}, true};
  for (size_t j = 0; j < ids.size(); ++j) {
    const json::value& id = ids[j];
    const bool valid = (id.is_int64() && id.as_int64() >= 0 && id.as_int64() <= INT32_MAX) ||
                       (id.is_uint64() && id.as_uint64() <= uint64_t{INT32_MAX});
    if (!valid) {
      invalid("'" + path + "[" + std::to_string(j) + "]' must be a token id (an integer from 0), " +
                  "got " + json::serialize(id),
              path);
    }
    input.tokens.push_back(id.is_int64() ? id.as_int64() : static_cast<int64_t>(id.as_uint64()));
  }
  return input;
}

// `input` as OpenAI takes it: a string, an array of strings, an array of token ids (one input)
// or an array of arrays of token ids.
std::vector<EmbeddingInput> embedding_inputs(const json::value& input) {
  if (!input.is_array()) return {{"input", checked_text(input, "input"), {}, false}};
  const json::array& array = input.as_array();
  if (!array.empty() && array[0].is_number()) return {token_input(array, "input")};
  if (array.empty()) invalid("'input' is empty: give at least one text", "input");
  if (array.size() > kMaxInputs) {
    invalid("'input' has " + std::to_string(array.size()) + " entries; at most " +
                std::to_string(kMaxInputs) + " are accepted per call",
            "input", "too_many_inputs");
  }
  std::vector<EmbeddingInput> inputs;
  for (size_t i = 0; i < array.size(); ++i) {
    std::string path = "input[" + std::to_string(i) + "]";
    if (array[i].is_array()) {
      inputs.push_back(token_input(array[i].as_array(), path));
    } else {
      inputs.push_back({path, checked_text(array[i], path), {}, false});
    }
  }
  return inputs;
}

// Each input as the model's tokens, checked against its context and vocabulary: a 400 naming
// the input that does not fit, never a cut vector.
std::vector<std::vector<int32_t>> model_tokens(const TokenEmbedder& model,
                                               const std::vector<EmbeddingInput>& inputs) {
  std::vector<std::vector<int32_t>> all;
  for (const EmbeddingInput& input : inputs) {
    std::vector<int32_t> tokens;
    if (input.is_tokens) {
      for (size_t j = 0; j < input.tokens.size(); ++j) {
        if (input.tokens[j] >= model.embedding_vocabulary()) {
          invalid("'" + input.path + "[" + std::to_string(j) + "]' is token id " +
                      std::to_string(input.tokens[j]) + ", outside the model's vocabulary of " +
                      std::to_string(model.embedding_vocabulary()) + " tokens",
                  input.path, "invalid_token_id");
        }
        tokens.push_back(static_cast<int32_t>(input.tokens[j]));
      }
    } else {
      tokens = model.embedding_tokens(input.text);
    }
    if (static_cast<int64_t>(tokens.size()) > model.embedding_context()) {
      invalid("'" + input.path + "' is " + std::to_string(tokens.size()) +
                  " tokens; the model's context is " + std::to_string(model.embedding_context()) +
                  " tokens per input",
              input.path, "context_length_exceeded");
    }
    if (tokens.empty()) invalid("'" + input.path + "' has no tokens to embed", input.path);
    all.push_back(std::move(tokens));
  }
  return all;
}

// What the gates see of a call: the texts they screen and the tokens they count.
using Admit = std::function<void(const std::vector<std::string>& texts, int64_t tokens)>;

// The vectors of `inputs`: from token ids through a model that takes them, else from the texts.
// `admit` gets every input's text (token ids turned back into the text they stand for, so that
// input moderation reads them too) and their token count first, and refuses (throws) before any
// vector is made.
std::vector<std::vector<float>> embed_inputs(const NamedEmbedder& named,
                                             const std::vector<EmbeddingInput>& inputs,
                                             int64_t& tokens, const Admit& admit) {
  std::vector<std::string> texts;
  if (const auto* model = dynamic_cast<const TokenEmbedder*>(named.embedder)) {
    std::vector<std::vector<int32_t>> ids = model_tokens(*model, inputs);
    for (size_t i = 0; i < ids.size(); ++i) {
      tokens += static_cast<int64_t>(ids[i].size());
      texts.push_back(inputs[i].is_tokens ? model->embedding_text(ids[i]) : inputs[i].text);
    }
    admit(texts, tokens);
    return model->embed_tokens(ids);
  }
  std::vector<std::vector<float>> vectors;
  for (const EmbeddingInput& input : inputs) {
    if (input.is_tokens) {
      invalid("'" + input.path + "' holds token ids, which the embedder '" + named.name +
                  "' does not take (it has no model vocabulary): send the text",
              input.path, "unsupported_input");
    }
  }
  for (const EmbeddingInput& input : inputs) {
    tokens += named.embedder->embedding_token_count(input.text);
    texts.push_back(input.text);
  }
  admit(texts, tokens);
  for (const EmbeddingInput& input : inputs)
    vectors.push_back(named.embedder->embed_text(input.text));
  return vectors;
}

// The length a request's `dimensions` gives vectors of `size`: only a Matryoshka model's
// vectors may be shortened (cut, then renormalised by the caller).
int64_t checked_dimensions(const NamedEmbedder& named, std::optional<int64_t> dimensions) {
  const int64_t size = static_cast<int64_t>(named.embedder->embedding_dimensions());
  if (!dimensions || *dimensions == size) return size;
  const auto* model = dynamic_cast<const TokenEmbedder*>(named.embedder);
  const int64_t shortest = model ? model->shortest_dimensions() : 0;
  if (shortest > 0) {
    if (*dimensions < shortest || *dimensions > size) {
      invalid("the model '" + named.name + "' makes vectors of " + std::to_string(size) +
                  " dimensions and can shorten them to " + std::to_string(shortest) +
                  " at least; 'dimensions' must be between " + std::to_string(shortest) + " and " +
                  std::to_string(size) + ", got " + std::to_string(*dimensions),
              "dimensions", "unsupported_dimensions");
    }
    return *dimensions;
  }
  // Neither model2vec nor hashed n-grams (nor a model not declared Matryoshka-trained) keeps its
  // meaning in a vector's first entries, so a shorter vector is refused rather than cut.
  invalid("the embedder '" + named.name + "' makes vectors of " + std::to_string(size) +
              " dimensions and cannot shorten them; 'dimensions' must be " + std::to_string(size) +
              " or absent, got " + std::to_string(*dimensions),
          "dimensions", "unsupported_dimensions");
}

// The model the gates (the auth stage's model access, the access log) see: a serve file's
// `models:` entry's name or alias as the request gave it, as for a chat request to that entry;
// otherwise the embedder resource's name, which the request gave.
const std::string& gated_model(const RouteCall& call, const std::string& requested,
                               const NamedEmbedder& named) {
  return call.served->model_entry ? requested : named.name;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, norm_a = 0, norm_b = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    dot += double(a[i]) * b[i];
    norm_a += double(a[i]) * a[i];
    norm_b += double(b[i]) * b[i];
  }
  return norm_a > 0 && norm_b > 0 ? dot / std::sqrt(norm_a * norm_b) : 0.0;
}

// What scores a /v1/rerank call: a model judging each document's relevance, or else an
// embedder's cosines.
struct Ranker {
  std::string name;  // what the answer's `model` says
  RelevanceScorer* scorer = nullptr;
  NamedEmbedder embedder;
};

struct NamedScorer {
  std::string name;  // the resource's name
  std::string id;    // the model id clients send for chat (a gguf_model's `name:`)
  RelevanceScorer* scorer = nullptr;
};

std::vector<NamedScorer> scorers_of(const ServedPipeline& served) {
  std::vector<NamedScorer> found;
  for (const auto& resource : served.pipeline->spec().resources) {
    auto object = served.pipeline->resource(resource.name);
    auto* scorer = dynamic_cast<RelevanceScorer*>(object.get());
    if (!scorer || !scorer->scores_relevance()) continue;
    const auto* served_model = dynamic_cast<const ServedModel*>(object.get());
    found.push_back(
        {resource.name, served_model ? served_model->model_id() : resource.name, scorer});
  }
  return found;
}

// The model a `rerank` stage of the pipeline judges relevance with (its `kind: llm`), or "".
std::string rerank_stage_model(const PipelineSpec& spec) {
  for (const StageSpec& stage : spec.stages) {
    if (stage.type->name != "rerank") continue;
    for (const ResourceReference& reference : stage.references) {
      if (reference.resource_type == "gguf_model") return reference.resource_name;
    }
  }
  return "";
}

// What the request's `model` names: a model that judges relevance (by its resource name or its
// model id), an embedder (by its resource name), or a serve file's `models:` entry, which ranks
// as its pipeline's rerank stage does, else with its one embedder, else its one model. 404 when
// none is.
Ranker ranker_named(const ServedPipeline& served, const std::string& model) {
  std::vector<NamedScorer> scorers = scorers_of(served);
  std::vector<NamedEmbedder> embedders = embedders_of(served);
  for (const NamedScorer& candidate : scorers) {
    if (candidate.name == model || candidate.id == model)
      return {candidate.id, candidate.scorer, {}};
  }
  for (const NamedEmbedder& candidate : embedders) {
    if (candidate.name == model) return {candidate.name, nullptr, candidate};
  }
  const auto& entry_names = served.model_ids;
  if (served.model_entry &&
      std::find(entry_names.begin(), entry_names.end(), model) != entry_names.end()) {
    std::string staged = rerank_stage_model(served.pipeline->spec());
    for (const NamedScorer& candidate : scorers) {
      if (candidate.name == staged) return {candidate.id, candidate.scorer, {}};
    }
    if (embedders.size() == 1) return {embedders.front().name, nullptr, embedders.front()};
    if (scorers.size() == 1) return {scorers.front().id, scorers.front().scorer, {}};
  }
  if (scorers.empty() && embedders.empty()) {
    throw RequestFailure(make_error(
        404, "invalid_request_error",
        "this pipeline has nothing to rerank with: declare a gguf_model resource (the model "
        "judges each document's relevance), or one of type embedder or embedding_model (the "
        "cosine of their vectors), under 'resources:'",
        "model_not_found", "model"));
  }
  std::string names;
  for (const NamedScorer& candidate : scorers)
    names += (names.empty() ? "'" : ", '") + candidate.id + "'";
  for (const NamedEmbedder& candidate : embedders)
    names += (names.empty() ? "'" : ", '") + candidate.name + "'";
  throw RequestFailure(make_error(
      404, "invalid_request_error",
      "The model '" + model + "' does not exist; the models that rerank here are " + names,
      "model_not_found", "model"));
}

// The scores of `documents` for `query` by a model judging their relevance. Each prompt holds
// its document whole: one that does not fit the model's context is a 400 naming it, never a
// score of its cut beginning.
std::vector<double> judged_scores(const RouteCall& call, const std::string& model,
                                  const Ranker& ranker, const std::string& query,
                                  const std::vector<std::string>& documents, int64_t& tokens) {
  RelevanceScorer& scorer = *ranker.scorer;
  const int64_t context = scorer.relevance_context();
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < documents.size(); ++i) {
    std::vector<int32_t> prompt = scorer.relevance_prompt(query, documents[i]);
    if (static_cast<int64_t>(prompt.size()) > context) {
      const int64_t bare = static_cast<int64_t>(scorer.relevance_prompt(query, "").size());
      std::string path = bare > context ? "query" : "documents[" + std::to_string(i) + "]";
      invalid("'" + path + "' makes a relevance prompt of " + std::to_string(prompt.size()) +
                  " tokens; the model scores prompts of at most " + std::to_string(context) +
                  " tokens (its context, less the answer's token)",
              path, "context_length_exceeded");
    }
    tokens += static_cast<int64_t>(prompt.size());
    prompts.push_back(std::move(prompt));
  }
  std::vector<std::string> texts{query};
  texts.insert(texts.end(), documents.begin(), documents.end());
  admit_side_call(call, call.served->model_entry ? model : ranker.name, texts, tokens, "");
  std::shared_ptr<Request> gated = call.gated;
  return scorer.relevance_scores(std::move(prompts), call.caller.tenant,
                                 [gated] { return gated && gated->cancelled(); });
}

}  // namespace

// POST /v1/embeddings {model, input: string | [string] | [int] | [[int]], encoding_format?,
// dimensions?, user?}
Response embeddings(const RouteCall& call) {
  json::value body = chat::request_body::parse_object(call.body);
  Fields fields(body.as_object());
  std::string model = required_model(fields);
  const json::value* input = fields.get("input");
  if (!input) invalid("'input' is required: a string or an array of strings", "input");
  std::vector<EmbeddingInput> inputs = embedding_inputs(*input);
  std::string format = fields.string("encoding_format", "float");
  if (format != "float" && format != "base64") {
    invalid("'encoding_format' must be 'float' or 'base64', got '" + format + "'",
            "encoding_format");
  }
  std::optional<int64_t> dimensions = fields.optional_integer("dimensions", 1, 1 << 20);
  fields.refuse_unread({"user"});
  NamedEmbedder named = embedder_named(*call.served, model);
  const int64_t size = checked_dimensions(named, dimensions);
  int64_t tokens = 0;
  auto admit = [&](const std::vector<std::string>& texts, int64_t counted) {
    admit_side_call(call, gated_model(call, model, named), texts, counted, "input");
  };
  std::vector<std::vector<float>> vectors = embed_inputs(named, inputs, tokens, admit);
  json::array data;
  for (size_t i = 0; i < vectors.size(); ++i) {
    std::vector<float>& vector = vectors[i];
    if (static_cast<int64_t>(vector.size()) > size) {
      vector.resize(static_cast<size_t>(size));
      double norm = 0;
      for (float value : vector)
        norm += double(value) * value;
      norm = std::sqrt(norm);
      for (float& value : vector)
        value = norm > 0 ? static_cast<float>(value / norm) : 0.0f;
    }
    json::value embedding;
    if (format == "base64") {
      embedding = json::string(base64_floats(vector));
    } else {
      json::array values;
      values.reserve(vector.size());
      for (float value : vector)
        values.push_back(static_cast<double>(value));
      embedding = std::move(values);
    }
    data.push_back(json::object{{"object", "embedding"},
                                {"index", static_cast<int64_t>(i)},
                                {"embedding", std::move(embedding)}});
  }
  return Response(200, json::serialize(json::object{{"object", "list"},
                                                    {"data", std::move(data)},
                                                    {"model", named.name},
                                                    {"usage", usage_json(tokens)}}));
}

// POST /v1/rerank {model, query, documents: [string | {text}], top_n?, return_documents?}: the
// documents by their relevance to the query, most relevant first. Scored by the model `model`
// names (a gguf_model: the rerank stage's `kind: llm`, which the pipeline's rerankers use), or
// by the cosine similarity of an embedder's vectors.
Response rerank(const RouteCall& call) {
  json::value body = chat::request_body::parse_object(call.body);
  Fields fields(body.as_object());
  std::string model = required_model(fields);
  const json::value* query_value = fields.get("query");
  if (!query_value) invalid("'query' is required: the text to rank the documents for", "query");
  std::string query = checked_text(*query_value, "query");
  const json::value* documents_value = fields.get("documents");
  if (!documents_value || !documents_value->is_array()) {
    invalid(std::string("'documents' must be an array of strings or {\"text\": ...} objects") +
                (documents_value ? std::string(", got ") + kind_of(*documents_value) : ""),
            "documents");
  }
  std::vector<std::string> documents =
      checked_texts(documents_value->as_array(), "documents", true);
  int64_t count = static_cast<int64_t>(documents.size());
  int64_t top_n = fields.integer("top_n", count, 1, static_cast<int64_t>(kMaxInputs));
  bool return_documents = fields.boolean("return_documents", true);
  fields.refuse_unread({});
  Ranker ranker = ranker_named(*call.served, model);
  int64_t tokens = 0;
  std::vector<double> scores;
  if (ranker.scorer) {
    scores = judged_scores(call, model, ranker, query, documents, tokens);
  } else {
    // A GGUF model embeds at most its context per text: a longer query or document is a 400
    // naming it, as for /v1/embeddings, never a score of its cut beginning.
    std::vector<EmbeddingInput> inputs{{"query", query, {}, false}};
    for (int64_t i = 0; i < count; ++i)
      inputs.push_back({"documents[" + std::to_string(i) + "]", documents[i], {}, false});
    auto admit = [&](const std::vector<std::string>& texts, int64_t counted) {
      admit_side_call(call, gated_model(call, model, ranker.embedder), texts, counted, "");
    };
    std::vector<std::vector<float>> vectors = embed_inputs(ranker.embedder, inputs, tokens, admit);
    for (int64_t i = 0; i < count; ++i)
      scores.push_back(cosine(vectors[0], vectors[static_cast<size_t>(i) + 1]));
  }
  std::vector<std::pair<double, int64_t>> scored;
  for (int64_t i = 0; i < count; ++i)
    scored.push_back({scores[static_cast<size_t>(i)], i});
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  json::array results;
  for (int64_t rank = 0; rank < std::min(top_n, count); ++rank) {
    auto [score, index] = scored[rank];
    json::object result{{"index", index}, {"relevance_score", score}};
    if (return_documents) result["document"] = json::object{{"text", documents[index]}};
    results.push_back(std::move(result));
  }
  return Response(200, json::serialize(json::object{{"model", ranker.name},
                                                    {"results", std::move(results)},
                                                    {"usage", usage_json(tokens)}}));
}

}  // namespace chatflow::server
