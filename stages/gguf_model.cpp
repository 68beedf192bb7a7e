// gguf_model: loads a GGUF model and runs its scheduler; see gguf_model.h.
#include "stages/gguf_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "framework/api/config_key_error.h"
#include "framework/bridge/engine_bridge.h"
#include "framework/chat/output_constraint.h"
#include "framework/chat/reasoning_split.h"
#include "framework/chat/tool_calls.h"
#include "framework/engine/compute_threads.h"
#include "framework/engine/default_model.h"
#include "framework/engine/grammar_constraint.h"
#include "framework/engine/model_config.h"

namespace chatflow {
namespace {

engine::SchedulerConfig scheduler_config(const GgufModelConfig& config,
                                         const engine::Model& model) {
  if (config.kv_cache.block_tokens % 16 != 0)
    throw ConfigError("kv_cache.block_tokens must be a multiple of 16");
  engine::SchedulerConfig scheduler;
  scheduler.threads = config.threads;
  if (scheduler.threads <= 0) {
    // Small models lose more to synchronisation than they gain from a second thread; others
    // take the CPUs this process may use (affinity, and a container's cgroup CPU quota).
    scheduler.threads = model.weight_bytes() < (32u << 20) ? 1 : engine::available_cpus();
  }
  scheduler.max_seqs = config.scheduler.max_seqs;
  scheduler.max_batched_tokens = config.scheduler.max_batched_tokens;
  scheduler.chunked_prefill = config.scheduler.chunked_prefill;
  scheduler.block_tokens = config.kv_cache.block_tokens;
  scheduler.kv_blocks = config.kv_cache.blocks;
  scheduler.prefix_cache = config.kv_cache.prefix_cache;
  scheduler.kv_type = config.kv_cache.type == "f32"    ? kernels::KvType::f32
                      : config.kv_cache.type == "q8_0" ? kernels::KvType::q8_0
                                                       : kernels::KvType::f16;
  const int64_t block_values = kernels::kv_block_values(scheduler.kv_type);
  if (model.config().head_dim % block_values != 0) {
    throw ConfigKeyError("kv_cache.type", config.kv_cache.type + " stores each head in blocks of " +
                                              std::to_string(block_values) +
                                              " values, and this model's heads have " +
                                              std::to_string(model.config().head_dim) +
                                              " (head_dim); use f16 or f32");
  }
  scheduler.backend = config.backend;
  scheduler.persist_path = config.kv_cache.persist.path;
  scheduler.persist_max_bytes = static_cast<uint64_t>(config.kv_cache.persist.max_bytes);
  scheduler.persist_report = [name = model.path()](const std::string& line) {
    spdlog::info("{}: {}", name, line);
  };
  if (config.speculative.kind == "ngram") {
    scheduler.prompt_lookup = {.max_draft = config.speculative.max_draft,
                               .longest_ngram = static_cast<int>(config.speculative.ngram_max),
                               .shortest_ngram = static_cast<int>(config.speculative.ngram_min)};
  } else if (config.speculative.kind == "draft") {
    const std::string& path = config.speculative.draft_model;
    if (path.empty()) {
      throw ConfigKeyError("speculative",
                           "kind draft needs draft_model: the path of a GGUF file "
                           "with this model's vocabulary");
    }
    std::shared_ptr<const engine::Model> draft;
    try {
      draft = engine::Model::load(path);
    } catch (const std::exception& error) {
      throw ConfigKeyError("speculative.draft_model", error.what());  // it names the file
    }
    if (std::string mismatch = engine::draft_mismatch(model, *draft); !mismatch.empty())
      throw ConfigKeyError("speculative.draft_model", "'" + path + "': " + mismatch);
    scheduler.draft.model = std::move(draft);
    scheduler.draft.max_draft = config.speculative.max_draft;
    scheduler.draft.report = [name = model.path()](const std::string& line) {
      spdlog::warn("{}: {}", name, line);
    };
  } else if (!config.speculative.draft_model.empty()) {
    throw ConfigKeyError(
        "speculative.draft_model",
        "a draft model is used by kind draft only (kind is " + config.speculative.kind + ")");
  }
  return scheduler;
}

std::string read_template_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw ConfigError("chat_template '" + path +
                      "' is neither auto, a built-in format nor a readable .jinja file");
  }
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// auto: the GGUF's own template (plain when it has none); a built-in name; or a Jinja file. A
// template the interpreter cannot run is a configuration error with its line and column.
engine::ChatFormat chat_format_named(const std::string& name, const std::string& gguf_template) {
  if (auto kind = engine::chat_template_from_name(name)) return engine::ChatFormat::built_in(*kind);
  bool from_model = name == "auto";
  std::string source = from_model ? gguf_template : read_template_file(name);
  if (from_model && source.empty())
    return engine::ChatFormat::built_in(engine::ChatTemplate::plain);
  try {
    return engine::ChatFormat::jinja(source);
  } catch (const jinja::SyntaxError& error) {
    std::string where = from_model ? "tokenizer.chat_template" : name;
    throw ConfigError(where + ":" + std::to_string(error.position().line) + ":" +
                      std::to_string(error.position().column) + ": " + error.message());
  }
}

// auto: when the template in use (the GGUF's, or the file's) writes the thinking markers.
bool splits_reasoning(const std::string& reasoning_format, const engine::ChatFormat& format) {
  if (reasoning_format == "deepseek") return true;
  if (reasoning_format == "none") return false;
  return format.source().find(chat::kThinkingOpens) != std::string::npos;
}

}  // namespace

GgufModel::GgufModel(const GgufModelConfig& config)
    : model_(config.tokenizer_only ? nullptr : engine::Model::load(config.path)),
      name_(config.name.empty() ? std::filesystem::path(config.path).stem().string() : config.name),
      block_tokens_(config.kv_cache.block_tokens),
      max_tokens_default_(config.max_tokens_default) {
  std::string gguf_template;
  if (model_) {
    tokenizer_ = &model_->tokenizer();
    context_length_ = model_->config().context;
    gguf_template = model_->config().chat_template;
    scheduler_ = std::make_unique<engine::Scheduler>(model_, scheduler_config(config, *model_));
  } else {
    auto file = engine::GgufFile::open(config.path);
    engine::ModelConfig metadata = engine::ModelConfig::from_gguf(*file);
    own_tokenizer_ = std::make_unique<engine::Tokenizer>(engine::Vocabulary::from_gguf(*file));
    tokenizer_ = own_tokenizer_.get();
    context_length_ = metadata.context;
    gguf_template = metadata.chat_template;
  }
  chat_format_ = chat_format_named(config.chat_template, gguf_template);
  splits_reasoning_ = splits_reasoning(config.reasoning_format, chat_format_);
  template_tool_format_ = chat_format_.renders_tools()
                              ? chat::tool_call_format_for(chat_format_.source())
                              : ToolCallFormat::generic;
}

void GgufModel::require_engine() const {
  if (scheduler_) return;
  throw RequestFailure(RequestError{500,
                                    "server_error",
                                    "the gguf_model '" + name_ +
                                        "' is tokenizer_only: it counts tokens, it does not "
                                        "generate (use an upstream_generate stage, or drop "
                                        "tokenizer_only)",
                                    "tokenizer_only_model",
                                    {}});
}

std::vector<int32_t> GgufModel::encode_prompt(const Request& request, bool add_generation_prompt,
                                              PromptFacts* facts) const {
  const engine::Tokenizer& tokenizer = this->tokenizer();
  std::vector<engine::TokenId> ids;
  if (request.kind == RequestKind::completion) {
    ids = tokenizer.encode(request.prompt, /*add_special=*/true);
  } else {
    if (request.messages.empty()) {
      throw RequestFailure(RequestError{400,
                                        "invalid_request_error",
                                        "'messages' must contain at least one message",
                                        {},
                                        "messages"});
    }
    const GenerationParams& generation = request.generation;
    bool offers_tools = !generation.tools.empty() && generation.tool_choice != ToolChoice::none;
    bool template_shows_tools = template_tool_format_ != ToolCallFormat::generic;
    std::vector<engine::ChatMessage> messages;
    std::string_view previous_role;
    for (const auto& message : request.messages) {
      bool follows_result = previous_role == "tool";
      previous_role = message.role;
      if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
          message.role != "tool") {
        throw RequestFailure(RequestError{
            400,
            "invalid_request_error",
            "unknown message role '" + message.role + "' (system, user, assistant or tool)",
            {},
            "messages"});
      }
      engine::ChatMessage entry{message.role, message.content, {}, message.tool_call_id};
      for (const auto& call : message.tool_calls)
        entry.tool_calls.push_back({call.id, call.name, call.arguments});
      if (!template_shows_tools) {
        // Calls and results as text the template can show, in the generic format it was told;
        // the results of one turn's calls together, so the roles still alternate.
        if (!message.tool_calls.empty()) {
          entry.content += (entry.content.empty() ? "" : "\n") +
                           chat::generic_tool_call_text(message.tool_calls);
          entry.tool_calls.clear();
        }
        if (message.role == "tool") {
          std::string result = "Result of call " + message.tool_call_id + ":\n" + message.content;
          if (follows_result) {
            messages.back().content += "\n\n" + result;
            continue;
          }
          entry = {"user", std::move(result), {}, {}};
        }
      }
      messages.push_back(std::move(entry));
    }
    boost::json::value tools = nullptr;
    std::string instructions;
    if (offers_tools && template_shows_tools) {
      boost::json::array list;
      for (const auto& tool : generation.tools) {
        boost::json::object function{{"name", tool.name}, {"description", tool.description}};
        function["parameters"] = tool.parameters.empty()
                                     ? boost::json::value(boost::json::object{{"type", "object"}})
                                     : boost::json::parse(tool.parameters);
        list.push_back(boost::json::object{{"type", "function"}, {"function", function}});
      }
      tools = std::move(list);
    } else if (offers_tools) {
      instructions = chat::generic_tool_instructions(generation.tools);
    }
    boost::json::object template_kwargs;
    if (!request.chat_template_kwargs.empty())
      template_kwargs = boost::json::parse(request.chat_template_kwargs).as_object();
    // The instructions go in the system turn; a template that refuses system turns (Gemma) gets
    // them at the head of the first user turn instead.
    auto render = [&](bool in_system_turn) {
      std::vector<engine::ChatMessage> turns = messages;
      if (!instructions.empty()) {
        auto target = std::find_if(turns.begin(), turns.end(), [&](const auto& turn) {
          return turn.role == (in_system_turn ? "system" : "user");
        });
        if (target != turns.end() && in_system_turn) {
          target->content += "\n\n" + instructions;
        } else if (target != turns.end()) {
          target->content = instructions + "\n\n" + target->content;
        } else {
          turns.insert(turns.begin(), engine::ChatMessage{"system", instructions, {}, {}});
        }
      }
      return chat_format_.render(turns, tokenizer.vocabulary(), add_generation_prompt,
                                 template_kwargs, tools);
    };
    bool has_system_turn = std::any_of(messages.begin(), messages.end(),
                                       [](const auto& turn) { return turn.role == "system"; });
    engine::RenderedPrompt prompt;
    try {
      try {
        prompt = render(/*in_system_turn=*/true);
      } catch (const jinja::RenderError&) {
        if (instructions.empty() || has_system_turn) throw;
        prompt = render(/*in_system_turn=*/false);
      }
    } catch (const jinja::RenderError& error) {
      throw RequestFailure(
          RequestError{400, "invalid_request_error", error.what(), {}, "messages"});
    }
    ids = tokenizer.encode_trusted(prompt.text, /*add_special=*/!prompt.includes_bos,
                                   prompt.template_ranges);
    if (facts) {
      facts->reasoning = {splits_reasoning_,
                          splits_reasoning_ && chat::ends_inside_thinking(prompt.text)};
      facts->tool_format = offers_tools ? template_tool_format_ : ToolCallFormat::none;
    }
  }
  if (ids.empty()) {
    throw RequestFailure(
        RequestError{400, "invalid_request_error", "the prompt is empty", {}, "prompt"});
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

int64_t GgufModel::context_length() const {
  return context_length_;
}

std::vector<int32_t> GgufModel::tokenize(std::string_view text, bool add_special,
                                         bool parse_special) const {
  return tokenizer().encode(text, add_special, parse_special);
}

std::string GgufModel::detokenize(std::span<const int32_t> tokens) const {
  const auto vocabulary = static_cast<int64_t>(tokenizer().vocabulary().size());
  for (int32_t token : tokens) {
    if (token < 0 || token >= vocabulary) {
      throw std::out_of_range("token id " + std::to_string(token) +
                              " is outside the vocabulary (0.." + std::to_string(vocabulary - 1) +
                              ")");
    }
  }
  return tokenizer().decode(tokens);
}

EngineStats GgufModel::engine_stats() const {
  EngineStats stats = to_engine_stats(this->stats(), block_tokens_);
  if (scheduler_) {
    engine::BackendInfo backend = scheduler_->backend_info();
    stats.backend = backend.name;
    stats.device = backend.device;
    stats.weight_bytes = static_cast<int64_t>(backend.memory.weight_bytes);
    stats.kv_pool_bytes = static_cast<int64_t>(backend.memory.kv_pool_bytes);
    stats.workspace_bytes = static_cast<int64_t>(backend.memory.workspace_bytes);
  }
  return stats;
}

PrefixCacheAdmin::Saved GgufModel::save_prefix_cache() {
  require_engine();
  engine::PrefixCacheSaved saved = scheduler_->save_prefix_cache_now();
  return {saved.blocks, saved.bytes, scheduler_->config().persist_path};
}

PrefixCacheAdmin::Cleared GgufModel::clear_prefix_cache() {
  require_engine();
  engine::Scheduler::PrefixCacheCleared cleared = scheduler_->clear_prefix_cache();
  return {cleared.blocks, cleared.file_removed};
}

int64_t GgufModel::answer_token_limit(const GenerationParams& generation,
                                      int64_t prompt_tokens) const {
  if (generation.max_tokens > 0) return capped_answer_tokens(generation, generation.max_tokens);
  int64_t room = context_length_;
  if (scheduler_) room = std::min(room, scheduler_->capacity_tokens());
  room = std::max<int64_t>(1, room - prompt_tokens);
  int64_t bound = max_tokens_default_ > 0 ? std::min(max_tokens_default_, room) : room;
  return capped_answer_tokens(generation, bound);
}

int64_t GgufModel::prompt_token_count(const Request& request) const {
  return static_cast<int64_t>(encode_prompt(request, true).size());
}

std::shared_ptr<GenerationStream> GgufModel::start(Request& request, StageIo& io,
                                                   PortId resume_port) {
  require_engine();
  engine::SequenceSpec spec = to_sequence_spec(request);
  spec.max_tokens =
      answer_token_limit(request.generation, static_cast<int64_t>(spec.prompt.size()));
  if (auto error = scheduler_->validate(spec)) {
    throw RequestFailure(
        RequestError{400, "invalid_request_error", *error, "context_length_exceeded", "messages"});
  }
  spec.constraint = constraint_for(request.generation, request.tool_format, request.reasoning);
  // The stream holds the continuation, so the request cannot move on before the engine says so.
  request.generation_times.queued_ns = now_ns();
  auto stream = std::make_shared<GenerationStream>(io.request_ptr(), io.defer(), resume_port);
  if (auto error = scheduler_->submit(std::move(spec), stream))
    stream->on_error(*error);  // shutting down
  return stream;
}

std::shared_ptr<engine::TokenConstraint> GgufModel::constraint_for(
    const GenerationParams& generation, ToolCallFormat tool_format,
    const Request::ReasoningSplit& reasoning) const {
  chat::OutputConstraint output =
      chat::output_constraint(generation, tool_format, reasoning.enabled);
  if (output.key.empty()) return nullptr;
  auto cached = [&]() -> std::shared_ptr<const engine::GrammarMasks> {
    auto found = std::find_if(grammars_.begin(), grammars_.end(),
                              [&](const auto& entry) { return entry.first == output.key; });
    if (found == grammars_.end()) return nullptr;
    std::rotate(grammars_.begin(), found, found + 1);  // most recently used first
    return grammars_.front().second;
  };
  std::shared_ptr<const engine::GrammarMasks> masks;
  {
    std::lock_guard lock(grammar_mutex_);
    masks = cached();
    if (!token_table_) token_table_ = engine::token_table_of(tokenizer());
  }
  if (!masks) {
    // Compiled outside the lock: a schema that cannot be enforced is this request's 400.
    auto grammar = chat::output_grammar(generation, tool_format, reasoning.enabled);
    std::lock_guard lock(grammar_mutex_);
    masks = cached();
    if (!masks) {
      const auto& ends = tokenizer().vocabulary().end_of_generation;
      masks = std::make_shared<engine::GrammarMasks>(
          std::move(grammar), token_table_, std::vector<engine::TokenId>(ends.begin(), ends.end()));
      grammars_.insert(grammars_.begin(), {output.key, masks});
      if (grammars_.size() > kCachedGrammars) grammars_.pop_back();
    }
  }
  using Reasoning = engine::GrammarMasks::Reasoning;
  Reasoning thinking = !reasoning.enabled        ? Reasoning::none
                       : reasoning.open_at_start ? Reasoning::open
                                                 : Reasoning::optional;
  return masks->start({output.trigger, output.trigger_at_start, thinking});
}

namespace {

// The model of `config`, its path resolved when auto.
std::shared_ptr<Resource> create_gguf_model(const GgufModelConfig& config) {
  if (config.path != "auto") return std::make_shared<GgufModel>(config);
  auto found = engine::find_default_model();
  if (!found) {
    throw ConfigError(
        "no model found: set CHATFLOW_MODEL=/path/to/model.gguf, put a .gguf file in models/, "
        "or run scripts/quickstart.sh run, which fetches stories260K");
  }
  GgufModelConfig resolved = config;
  resolved.path = *found;
  return std::make_shared<GgufModel>(resolved);
}

ResourceTypeInfo gguf_model_resource_type() {
  // The architectures from the engine's own list, so the description cannot fall behind it.
  ResourceTypeBuilder<GgufModelConfig> type(
      "gguf_model", std::string("A GGUF model (") + engine::supported_architectures() +
                        ") with continuous batching and a prefix cache, computed by a backend "
                        "(the CPU's in this version).");
  SchemaBuilder<KvCacheConfig> kv_cache;
  kv_cache
      .key("block_tokens", &KvCacheConfig::block_tokens,
           "positions per KV block (a multiple of 16)")
      .range(16, 4096);
  kv_cache
      .key("blocks", &KvCacheConfig::blocks,
           "KV blocks in the pool; 0 sizes it for max_seqs sequences")
      .at_least(0);
  kv_cache.key("prefix_cache", &KvCacheConfig::prefix_cache,
               "reuse the KV blocks of shared prompt prefixes");
  kv_cache
      .key("type", &KvCacheConfig::type,
           "how keys and values are stored: f16 (half the memory and memory traffic of f32), "
           "f32, or q8_0 (8-bit blocks of 32 values: about half of f16; needs a head_dim "
           "that is a multiple of 32)")
      .choices({"f16", "f32", "q8_0"});
  SchemaBuilder<KvPersistConfig> persist;
  persist.key("path", &KvPersistConfig::path,
              "file the prefix cache is saved to when the model stops and read from at start; "
              "empty: not kept. Another model's, KV type's or a damaged file is refused and left");
  persist
      .key("max_bytes", &KvPersistConfig::max_bytes,
           "the file's size at most: the most recently used blocks are kept")
      .at_least(0);
  kv_cache.object("persist", &KvCacheConfig::persist, persist, "the prefix cache across restarts");
  SchemaBuilder<SchedulerSettings> scheduler;
  scheduler.key("max_seqs", &SchedulerSettings::max_seqs, "sequences decoded together at most")
      .range(1, 4096);
  scheduler
      .key("max_batched_tokens", &SchedulerSettings::max_batched_tokens,
           "tokens per forward step at most")
      .range(16, 1 << 20);
  scheduler.key("chunked_prefill", &SchedulerSettings::chunked_prefill,
                "split long prompts across steps");
  type.config().key(
      "path", &GgufModelConfig::path,
      "GGUF file; auto: $CHATFLOW_MODEL, models/, then ../shared/models/stories260K/");
  type.config()
      .key("backend", &GgufModelConfig::backend,
           "where to compute: cpu; cuda (a build with CUDA, on a machine with an NVIDIA GPU; "
           "compiled, not yet verified on a GPU); auto: the GPU where one is visible, else the "
           "CPU")
      .choices({"auto", "cpu", "cuda"});
  type.config()
      .key("threads", &GgufModelConfig::threads,
           "compute threads; 0: one for tiny models, else the CPUs this process may use "
           "(affinity mask, cgroup CPU quota)")
      .range(0, 1024);
  type.config().key(
      "chat_template", &GgufModelConfig::chat_template,
      "auto (the GGUF's Jinja template), a built-in format (chatml, llama-2, llama-3, "
      "mistral, zephyr, phi-3, plain) or a .jinja file");
  type.config()
      .key("reasoning_format", &GgufModelConfig::reasoning_format,
           "auto: <think>...</think> becomes reasoning_content when the chat template uses the "
           "markers; deepseek: always; none: never")
      .choices({"auto", "none", "deepseek"});
  type.config().key("name", &GgufModelConfig::name,
                    "the model id the API reports; default: the file name");
  type.config().key("tokenizer_only", &GgufModelConfig::tokenizer_only,
                    "read only the vocabulary and chat template (no weights, no scheduler): "
                    "counts tokens for gates in front of an upstream engine");
  type.config()
      .key("max_tokens_default", &GgufModelConfig::max_tokens_default,
           "the answer's bound when a request gives no max_tokens; 0: up to the context (its "
           "length minus the prompt), as OpenAI and vLLM do")
      .at_least(0);
  SchemaBuilder<SpeculativeSettings> speculative;
  speculative
      .key("kind", &SpeculativeSettings::kind,
           "none; ngram: guess the next tokens from earlier text (prompt lookup); draft: have "
           "draft_model (a smaller GGUF with the same vocabulary) guess them. The model checks "
           "the guesses in one step; greedy answers unchanged token for token, sampled ones with "
           "the same distribution; not for answers under a grammar")
      .choices({"none", "ngram", "draft"});
  speculative.key("draft_model", &SpeculativeSettings::draft_model,
                  "kind draft: the draft model's GGUF file");
  speculative.key("max_draft", &SpeculativeSettings::max_draft, "tokens guessed per step at most")
      .range(1, 64);
  speculative
      .key("ngram_max", &SpeculativeSettings::ngram_max,
           "the longest run of last tokens looked up in the earlier text")
      .range(1, 16);
  speculative
      .key("ngram_min", &SpeculativeSettings::ngram_min,
           "the shortest run looked up when no longer one occurred")
      .range(1, 16);
  type.config().object("kv_cache", &GgufModelConfig::kv_cache, kv_cache, "the paged KV cache");
  type.config().object("speculative", &GgufModelConfig::speculative, speculative,
                       "speculative decoding");
  type.config().object("scheduler", &GgufModelConfig::scheduler, scheduler, "continuous batching");
  type.create([](const GgufModelConfig& config, ResourceContext&) -> std::shared_ptr<Resource> {
    // Refused before the model loads; a device found missing only when the backend starts is
    // reported at the same key.
    if (auto reason = engine::backend_unavailable(config.backend); reason && !config.tokenizer_only)
      throw ConfigKeyError("backend", *reason);
    if (config.speculative.ngram_min > config.speculative.ngram_max) {
      throw ConfigKeyError("speculative", "ngram_min (" +
                                              std::to_string(config.speculative.ngram_min) +
                                              ") must not be larger than ngram_max (" +
                                              std::to_string(config.speculative.ngram_max) + ")");
    }
    try {
      return create_gguf_model(config);
    } catch (const engine::BackendUnavailable& error) {
      throw ConfigKeyError("backend", error.what());
    }
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(gguf_model_resource_type);

}  // namespace
}  // namespace chatflow
