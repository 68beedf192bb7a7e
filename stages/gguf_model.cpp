// gguf_model: loads a GGUF model and runs its scheduler; see gguf_model.h.
#include "stages/gguf_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "framework/engine/detokenizer.h"
#include "framework/text/utf8.h"

namespace chatflow {

GenerationStream::GenerationStream(std::shared_ptr<Request> request, Continuation continuation,
                                   PortId resume_port)
    : request_(request),
      want_logprobs_(request->generation.logprobs || request->generation.top_logprobs > 0),
      continuation_(std::move(continuation)),
      resume_port_(resume_port) {}

// Chunks are written under the mutex: the buffered ones must reach the stream before any chunk
// the engine produces meanwhile (writing only queues work in the graph; it never blocks).
void GenerationStream::attach(ChunkWriter writer) {
  std::lock_guard lock(mutex_);
  for (auto& chunk : buffered_)
    writer.write(std::move(chunk));
  buffered_.clear();
  if (error_) {
    writer.fail(*error_);
  } else if (!writer_done_) {
    writer_ = std::move(writer);
  }
}

void GenerationStream::deliver(Chunk chunk) {
  std::lock_guard lock(mutex_);
  bool final = chunk.is_final();
  if (!writer_) {
    buffered_.push_back(std::move(chunk));
  } else {
    writer_.write(std::move(chunk));
    if (final) writer_ = ChunkWriter();  // done with it: let the request go
  }
  writer_done_ = writer_done_ || final;
}

void GenerationStream::resume_once() {
  Continuation continuation;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
  }
  if (continuation) continuation.resume(resume_port_);
}

void GenerationStream::on_admitted() {
  if (auto request = request_.lock()) {
    int64_t expected = 0;
    request->generation_times.scheduled_ns.compare_exchange_strong(expected, now_ns());
  }
}

void GenerationStream::on_token(const engine::SampledToken& token, bool first,
                                const engine::SequenceUsage& usage) {
  if (first) {
    if (auto request = request_.lock()) request->generation_times.first_token_ns = now_ns();
    // Written before the first chunk travels, so every later stage sees it.
    if (auto request = request_.lock()) request->usage.cached_prompt_tokens = usage.cached_tokens;
  }
  started_ = true;
  Chunk chunk;
  chunk.token_ids.push_back(token.token);
  if (want_logprobs_) {
    TokenLogprob logprob{token.token, {}, token.logprob, {}};
    for (const auto& alternative : token.top)
      logprob.top.push_back({alternative.token, {}, alternative.logprob, {}});
    chunk.logprobs.push_back(std::move(logprob));
  }
  deliver(std::move(chunk));
  if (first) resume_once();
}

void GenerationStream::on_finish(engine::FinishCause cause, const engine::SequenceUsage& usage) {
  if (auto request = request_.lock()) request->generation_times.finished_ns = now_ns();
  // Ended before any token (the first one was end-of-generation): nothing downstream reads the
  // request yet, so the count can still be written here.
  if (!started_) {
    if (auto request = request_.lock()) request->usage.cached_prompt_tokens = usage.cached_tokens;
  }
  Chunk chunk;
  chunk.finish = cause == engine::FinishCause::length ? FinishReason::length : FinishReason::stop;
  chunk.usage = Usage{usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens};
  deliver(std::move(chunk));
  resume_once();  // a generation that ended before its first token still needs decode
}

void GenerationStream::on_error(const std::string& message) {
  RequestError error{500, "server_error", "generation failed: " + message, "engine_error", {}};
  Continuation continuation;
  ChunkWriter writer;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
    writer = std::move(writer_);
    if (!writer && !continuation) error_ = error;
    writer_done_ = true;
  }
  if (continuation) {
    continuation.fail(error);
  } else if (writer) {
    writer.fail(error);
  }
}

void GenerationStream::on_dropped() {
  Continuation continuation;
  ChunkWriter writer;
  {
    std::lock_guard lock(mutex_);
    continuation = std::move(continuation_);
    writer = std::move(writer_);
    writer_done_ = true;
    buffered_.clear();
  }
  // Both go out of scope here; the request is already over, so dropping them changes nothing.
}

bool GenerationStream::cancelled() const {
  auto request = request_.lock();
  if (!request || request->cancelled() || request->finished()) return true;
  std::lock_guard lock(mutex_);
  return writer_ && writer_.stopped();
}

GgufModel::GgufModel(const Settings& settings) : model_(engine::Model::load(settings.path)) {
  if (settings.chat_template == "auto") {
    chat_template_ = engine::detect_chat_template(model_->config().chat_template);
  } else if (auto kind = engine::chat_template_from_name(settings.chat_template)) {
    chat_template_ = *kind;
  } else {
    throw ConfigError("unknown chat template '" + settings.chat_template + "'");
  }
  block_tokens_ = settings.scheduler.block_tokens;
  name_ =
      settings.name.empty() ? std::filesystem::path(settings.path).stem().string() : settings.name;
  engine::SchedulerConfig scheduler = settings.scheduler;
  scheduler.threads = settings.threads;
  if (scheduler.threads <= 0) {
    // Small models lose more to synchronisation than they gain from a second thread.
    scheduler.threads = model_->weight_bytes() < (32u << 20)
                            ? 1
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  scheduler_ = std::make_unique<engine::Scheduler>(model_, scheduler);
}

std::vector<int32_t> GgufModel::encode_prompt(const Request& request,
                                              bool add_generation_prompt) const {
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
    std::vector<engine::ChatMessage> messages;
    for (const auto& message : request.messages) {
      if (message.role != "system" && message.role != "user" && message.role != "assistant") {
        throw RequestFailure(
            RequestError{400,
                         "invalid_request_error",
                         "unknown message role '" + message.role + "' (system, user or assistant)",
                         {},
                         "messages"});
      }
      messages.push_back({message.role, message.content});
    }
    engine::RenderedPrompt prompt = engine::render_chat(
        chat_template_, messages, tokenizer.vocabulary(), add_generation_prompt);
    ids = tokenizer.encode_trusted(prompt.text, /*add_special=*/!prompt.includes_bos,
                                   prompt.template_ranges);
  }
  if (ids.empty()) {
    throw RequestFailure(
        RequestError{400, "invalid_request_error", "the prompt is empty", {}, "prompt"});
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

int64_t GgufModel::context_length() const {
  return model_->config().context;
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
  engine::SchedulerStats stats = scheduler_->stats();
  EngineStats out;
  out.running = stats.running;
  out.waiting = stats.waiting;
  out.kv_blocks_total = stats.total_blocks;
  // Cached blocks no sequence uses are reclaimed on demand: they count as free, as in vLLM.
  out.kv_blocks_used = stats.total_blocks - stats.free_blocks - stats.evictable_blocks;
  out.kv_blocks_sequence = stats.sequence_blocks;
  out.prefix_queried_tokens = stats.prefix_queried_blocks * block_tokens_;
  out.prefix_hit_tokens = stats.prefix_hit_blocks * block_tokens_;
  out.prompt_tokens_computed = stats.prompt_tokens_computed;
  out.generated_tokens = stats.generated_tokens;
  out.preemptions = stats.preemptions;
  out.steps = stats.steps;
  return out;
}

std::shared_ptr<GenerationStream> GgufModel::start(Request& request, StageIo& io,
                                                   PortId resume_port) {
  const GenerationParams& params = request.generation;
  engine::SequenceSpec spec;
  spec.prompt.assign(request.prompt_tokens.begin(), request.prompt_tokens.end());
  spec.max_tokens = params.max_tokens;
  spec.ignore_eos = params.ignore_eos;
  spec.cache_salt = request.identity.tenant;
  spec.sampling.temperature = params.temperature;
  spec.sampling.top_p = params.top_p;
  spec.sampling.top_k = params.top_k;
  spec.sampling.min_p = params.min_p;
  spec.sampling.presence_penalty = params.presence_penalty;
  spec.sampling.frequency_penalty = params.frequency_penalty;
  spec.sampling.repetition_penalty = params.repetition_penalty;
  spec.sampling.seed = params.seed;
  spec.sampling.logprobs = params.logprobs;
  spec.sampling.top_logprobs = params.top_logprobs;
  if (auto error = scheduler_->validate(spec)) {
    throw RequestFailure(
        RequestError{400, "invalid_request_error", *error, "context_length_exceeded", "messages"});
  }
  // The stream holds the continuation, so the request cannot move on before the engine says so.
  request.generation_times.queued_ns = now_ns();
  auto stream = std::make_shared<GenerationStream>(io.request_ptr(), io.defer(), resume_port);
  if (auto error = scheduler_->submit(std::move(spec), stream))
    stream->on_error(*error);  // shutting down
  return stream;
}

namespace {

// A side question to the engine (a rewrite, a relevance score): collects the sequence's tokens
// and the first token's alternatives, and hands them over once it ends.
class SideSequence final : public engine::SequenceObserver {
 public:
  explicit SideSequence(std::function<bool()> cancelled) : cancelled_(std::move(cancelled)) {}

  void on_token(const engine::SampledToken& token, bool first,
                const engine::SequenceUsage&) override {
    if (first) answer_.first_alternatives = token.top;
    answer_.tokens.push_back(token.token);
  }
  void on_finish(engine::FinishCause, const engine::SequenceUsage&) override {
    settle([&] { result_.set_value(std::move(answer_)); });
  }
  void on_error(const std::string& message) override {
    settle([&] { result_.set_exception(std::make_exception_ptr(std::runtime_error(message))); });
  }
  bool cancelled() const override { return cancelled_ && cancelled_(); }
  void on_dropped() override {
    settle(
        [&] { result_.set_exception(std::make_exception_ptr(std::runtime_error("cancelled"))); });
  }
  std::future<SideAnswer> future() { return result_.get_future(); }

 private:
  // The first outcome wins; a promise takes only one.
  template <class F>
  void settle(F&& action) {
    std::lock_guard lock(mutex_);
    if (settled_) return;
    settled_ = true;
    action();
  }

  std::function<bool()> cancelled_;
  SideAnswer answer_;  // engine thread only
  std::mutex mutex_;
  bool settled_ = false;
  std::promise<SideAnswer> result_;
};

}  // namespace

std::string GgufModel::generate_text(std::vector<int32_t> prompt, int64_t max_tokens,
                                     const std::string& cache_salt,
                                     const std::function<bool()>& cancelled) {
  engine::SequenceSpec spec;
  spec.prompt = std::move(prompt);
  spec.max_tokens = max_tokens;
  spec.sampling.temperature = 0;
  spec.cache_salt = cache_salt;
  std::vector<int32_t> tokens = ask_aside(std::move(spec), cancelled).get().tokens;
  // The end-of-sequence token, when it came, is not text.
  if (!tokens.empty() && model_->tokenizer().vocabulary().is_end_of_generation(tokens.back()))
    tokens.pop_back();
  return text::repair(detokenize(tokens));
}

std::vector<std::vector<engine::TokenLogprob>> GgufModel::next_token_logprobs(
    std::vector<std::vector<int32_t>> prompts, int top, const std::string& cache_salt,
    const std::function<bool()>& cancelled) {
  std::vector<std::future<SideAnswer>> pending;
  for (auto& prompt : prompts) {
    engine::SequenceSpec spec;
    spec.prompt = std::move(prompt);
    spec.max_tokens = 1;
    spec.sampling.temperature = 0;
    spec.sampling.top_logprobs = std::clamp(top, 1, 20);
    spec.sampling.logprobs = true;
    spec.cache_salt = cache_salt;
    pending.push_back(ask_aside(std::move(spec), cancelled));
  }
  std::vector<std::vector<engine::TokenLogprob>> results;
  for (auto& result : pending)
    results.push_back(result.get().first_alternatives);
  return results;
}

std::future<SideAnswer> GgufModel::ask_aside(engine::SequenceSpec spec,
                                             const std::function<bool()>& cancelled) {
  auto observer = std::make_shared<SideSequence>(cancelled);
  auto result = observer->future();
  if (auto error = scheduler_->submit(std::move(spec), observer)) observer->on_error(*error);
  return result;
}

std::optional<std::string> find_default_model() {
  namespace fs = std::filesystem;
  if (const char* configured = std::getenv("CHATFLOW_MODEL");
      configured != nullptr && *configured != '\0') {
    return std::string(configured);
  }
  std::error_code error;
  if (fs::exists("models/stories260K.gguf", error)) return std::string("models/stories260K.gguf");
  if (fs::is_directory("models", error)) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator("models", error)) {
      if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
    }
    if (!found.empty()) {
      std::sort(found.begin(), found.end());
      return found.front();
    }
  }
  if (fs::exists("../shared/models/stories260K/stories260K.gguf", error)) {
    return std::string("../shared/models/stories260K/stories260K.gguf");
  }
  return std::nullopt;
}

namespace {

struct KvCacheConfig {
  int64_t block_tokens = 16;
  int64_t blocks = 0;
  bool prefix_cache = true;
  std::string type = "f16";
};

struct SchedulerSettings {
  int64_t max_seqs = 64;
  int64_t max_batched_tokens = 2048;
  bool chunked_prefill = true;
};

struct GgufModelConfig {
  std::string path = "auto";
  std::string backend = "auto";
  int threads = 0;
  std::string chat_template = "auto";
  std::string name;
  KvCacheConfig kv_cache;
  SchedulerSettings scheduler;
};

ResourceTypeInfo gguf_model_resource_type() {
  ResourceTypeBuilder<GgufModelConfig> type(
      "gguf_model",
      "A GGUF model (llama, qwen2) on the CPU with continuous batching and a prefix cache.");
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
           "how keys and values are stored: f16 (half the memory and memory traffic) or f32")
      .choices({"f16", "f32"});
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
      .key("backend", &GgufModelConfig::backend, "where to compute")
      .choices({"auto", "cpu", "cuda"});
  type.config()
      .key("threads", &GgufModelConfig::threads,
           "compute threads; 0: one for tiny models, else all cores")
      .range(0, 1024);
  type.config()
      .key("chat_template", &GgufModelConfig::chat_template,
           "auto (from the GGUF) or a named format")
      .choices({"auto", "chatml", "llama-2", "llama-3", "mistral", "zephyr", "phi-3", "plain"});
  type.config().key("name", &GgufModelConfig::name,
                    "the model id the API reports; default: the file name");
  type.config().object("kv_cache", &GgufModelConfig::kv_cache, kv_cache, "the paged KV cache");
  type.config().object("scheduler", &GgufModelConfig::scheduler, scheduler, "continuous batching");
  type.create([](const GgufModelConfig& config, ResourceContext&) -> std::shared_ptr<Resource> {
    if (config.backend == "cuda")
      throw ConfigError("this build has no CUDA backend; use backend: cpu or auto");
    if (config.kv_cache.block_tokens % 16 != 0)
      throw ConfigError("kv_cache.block_tokens must be a multiple of 16");
    GgufModel::Settings settings;
    if (config.path == "auto") {
      auto found = find_default_model();
      if (!found) {
        throw ConfigError(
            "no model found: set CHATFLOW_MODEL=/path/to/model.gguf, put a .gguf file in models/, "
            "or run scripts/quickstart.sh run, which fetches stories260K");
      }
      settings.path = *found;
    } else {
      settings.path = config.path;
    }
    settings.threads = config.threads;
    settings.name = config.name;
    settings.chat_template = config.chat_template;
    settings.scheduler.block_tokens = config.kv_cache.block_tokens;
    settings.scheduler.kv_blocks = config.kv_cache.blocks;
    settings.scheduler.prefix_cache = config.kv_cache.prefix_cache;
    settings.scheduler.kv_type =
        config.kv_cache.type == "f32" ? kernels::KvType::f32 : kernels::KvType::f16;
    settings.scheduler.max_seqs = config.scheduler.max_seqs;
    settings.scheduler.max_batched_tokens = config.scheduler.max_batched_tokens;
    settings.scheduler.chunked_prefill = config.scheduler.chunked_prefill;
    return std::make_shared<GgufModel>(settings);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(gguf_model_resource_type);

}  // namespace
}  // namespace chatflow
