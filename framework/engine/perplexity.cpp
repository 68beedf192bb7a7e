#include "framework/engine/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "framework/engine/backend.h"
#include "framework/engine/kv_block_allocator.h"
#include "kernels/half.h"

namespace chatflow::engine {
namespace {

constexpr char kMagic[8] = {'c', 'f', 'l', 'o', 'g', 'p', 'r', '1'};
constexpr char kLlamaMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

// The saved log-probabilities: a header, the window tokens, then per scored position the
// vocabulary's log-probabilities as f16.
struct LogProbHeader {
  char magic[8];
  uint32_t context, vocabulary, chunks, scored_per_chunk;
};

void log_softmax(const float* logits, int64_t vocabulary, std::vector<double>& out) {
  float largest = logits[0];
  for (int64_t v = 1; v < vocabulary; ++v)
    largest = std::max(largest, logits[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocabulary; ++v)
    sum += std::exp(static_cast<double>(logits[v] - largest));
  const double log_sum = std::log(sum);
  out.resize(static_cast<size_t>(vocabulary));
  for (int64_t v = 0; v < vocabulary; ++v)
    out[static_cast<size_t>(v)] = static_cast<double>(logits[v] - largest) - log_sum;
}

int64_t most_likely(const std::vector<double>& log_probs) {
  return std::max_element(log_probs.begin(), log_probs.end()) - log_probs.begin();
}

// Running sums of a per-position quantity, for its mean and standard error.
struct Moments {
  double sum = 0, squares = 0;
  int64_t count = 0;
  void add(double value) {
    sum += value;
    squares += value * value;
    ++count;
  }
  double mean() const { return count ? sum / static_cast<double>(count) : 0; }
  double standard_error() const {
    if (count < 2) return 0;
    double variance = squares / static_cast<double>(count) - mean() * mean();
    return variance > 0 ? std::sqrt(variance / static_cast<double>(count - 1)) : 0;
  }
};

class LogProbFile {
 public:
  void create(const std::string& path, const LogProbHeader& header,
              const std::vector<TokenId>& tokens) {
    path_ = path;
    out_.open(path, std::ios::binary | std::ios::trunc);
    if (!out_) throw std::runtime_error(path + ": cannot write the log-probabilities");
    out_.write(reinterpret_cast<const char*>(&header), sizeof header);
    out_.write(reinterpret_cast<const char*>(tokens.data()),
               static_cast<std::streamsize>(tokens.size() * sizeof(TokenId)));
  }
  void open(const std::string& path, const LogProbHeader& expected,
            const std::vector<TokenId>& tokens) {
    path_ = path;
    in_.open(path, std::ios::binary);
    if (!in_) throw std::runtime_error(path + ": cannot read the saved log-probabilities");
    LogProbHeader header{};
    in_.read(header.magic, 8);
    if (in_ && std::memcmp(header.magic, kLlamaMagic, 8) == 0) {
      // llama-perplexity's --kl-divergence-base file: int32 context, vocabulary and windows,
      // the tokens, then per scored position two floats (step, minimum) and the vocabulary's
      // log-probabilities as 16-bit steps above the minimum, padded to an even count.
      int32_t fields[3] = {};
      in_.read(reinterpret_cast<char*>(fields), sizeof fields);
      header.context = static_cast<uint32_t>(fields[0]);
      header.vocabulary = static_cast<uint32_t>(fields[1]);
      header.chunks = static_cast<uint32_t>(fields[2]);
      llama_format_ = true;
    } else {
      in_.read(reinterpret_cast<char*>(&header) + 8, sizeof header - 8);
      if (!in_ || std::memcmp(header.magic, kMagic, 8) != 0) {
        throw std::runtime_error(path +
                                 ": not a file of log-probabilities saved by chatflow perplexity "
                                 "or llama-perplexity --kl-divergence-base");
      }
    }
    if (header.context != expected.context || header.vocabulary != expected.vocabulary ||
        header.chunks < expected.chunks) {
      throw std::runtime_error(
          path + ": saved with a context of " + std::to_string(header.context) + ", " +
          std::to_string(header.vocabulary) + " tokens of vocabulary and " +
          std::to_string(header.chunks) + " windows; this run has " +
          std::to_string(expected.context) + ", " + std::to_string(expected.vocabulary) + " and " +
          std::to_string(expected.chunks));
    }
    std::vector<TokenId> saved(static_cast<size_t>(header.chunks) * header.context);
    in_.read(reinterpret_cast<char*>(saved.data()),
             static_cast<std::streamsize>(saved.size() * sizeof(TokenId)));
    if (!in_ || !std::equal(tokens.begin(), tokens.end(), saved.begin()))
      throw std::runtime_error(path + ": saved for another text or tokenizer (the tokens differ)");
  }
  void write(const std::vector<double>& log_probs) {
    buffer_.resize(log_probs.size());
    for (size_t v = 0; v < log_probs.size(); ++v)
      buffer_[v] = kernels::f32_to_f16(static_cast<float>(log_probs[v]));
    out_.write(reinterpret_cast<const char*>(buffer_.data()),
               static_cast<std::streamsize>(buffer_.size() * 2));
    if (!out_) throw std::runtime_error(path_ + ": cannot write the log-probabilities");
  }
  // llama.cpp stores every log-probability below the largest minus 16 as that floor; its
  // divergence leaves those out, and so does ours against its files.
  bool floors_below_minus_16() const { return llama_format_; }

  void read(std::vector<double>& log_probs, size_t vocabulary) {
    if (llama_format_) {
      const size_t padded = 2 * ((vocabulary + 1) / 2) + 4;
      buffer_.resize(padded);
      in_.read(reinterpret_cast<char*>(buffer_.data()), static_cast<std::streamsize>(padded * 2));
      if (!in_) throw std::runtime_error(path_ + ": ends early (truncated?)");
      float step_and_minimum[2];
      std::memcpy(step_and_minimum, buffer_.data(), sizeof step_and_minimum);
      log_probs.resize(vocabulary);
      for (size_t v = 0; v < vocabulary; ++v)
        log_probs[v] = step_and_minimum[0] * buffer_[4 + v] + step_and_minimum[1];
      return;
    }
    buffer_.resize(vocabulary);
    in_.read(reinterpret_cast<char*>(buffer_.data()), static_cast<std::streamsize>(vocabulary * 2));
    if (!in_) throw std::runtime_error(path_ + ": ends early (truncated?)");
    log_probs.resize(vocabulary);
    for (size_t v = 0; v < vocabulary; ++v)
      log_probs[v] = kernels::f16_to_f32(buffer_[v]);
  }
  void finish() {
    if (out_.is_open()) {
      out_.close();
      if (!out_) throw std::runtime_error(path_ + ": cannot write the log-probabilities");
    }
  }

 private:
  std::string path_;
  std::ofstream out_;
  std::ifstream in_;
  std::vector<uint16_t> buffer_;
  bool llama_format_ = false;
};

// What the scored positions add up to: the negative log-likelihood of each next token, and,
// against a saved run, that run's and the divergence between the two.
class Scores {
 public:
  Scores(const PerplexityOptions& options, const LogProbHeader& header,
         const std::vector<TokenId>& tokens)
      : saving_(!options.save_log_probs.empty()), comparing_(!options.compare_log_probs.empty()) {
    if (saving_) saved_.create(options.save_log_probs, header, tokens);
    if (comparing_) base_.open(options.compare_log_probs, header, tokens);
  }

  void add(const float* logits, int64_t vocabulary, TokenId next) {
    log_softmax(logits, vocabulary, log_probs_);
    nll_.add(-log_probs_[static_cast<size_t>(next)]);
    if (saving_) saved_.write(log_probs_);
    if (!comparing_) return;
    base_.read(base_log_probs_, static_cast<size_t>(vocabulary));
    base_nll_.add(-base_log_probs_[static_cast<size_t>(next)]);
    double kl = 0;
    const bool skip_floor = base_.floors_below_minus_16();
    for (size_t v = 0; v < static_cast<size_t>(vocabulary); ++v) {
      if (skip_floor && base_log_probs_[v] <= -16) continue;
      kl += std::exp(base_log_probs_[v]) * (base_log_probs_[v] - log_probs_[v]);
    }
    divergence_.add(kl);
    agreements_ += most_likely(base_log_probs_) == most_likely(log_probs_) ? 1 : 0;
  }

  double perplexity() const { return std::exp(nll_.mean()); }

  void finish(PerplexityResult& result) {
    saved_.finish();
    result.scored = nll_.count;
    result.perplexity = perplexity();
    result.uncertainty = nll_.standard_error() * result.perplexity;
    if (!comparing_) return;
    result.compared = true;
    result.base_perplexity = std::exp(base_nll_.mean());
    result.kl_divergence = divergence_.mean();
    result.kl_uncertainty = divergence_.standard_error();
    result.top_token_agreement =
        static_cast<double>(agreements_) / static_cast<double>(std::max<int64_t>(1, nll_.count));
  }

 private:
  bool saving_, comparing_;
  LogProbFile saved_, base_;
  Moments nll_, base_nll_, divergence_;
  int64_t agreements_ = 0;
  std::vector<double> log_probs_, base_log_probs_;
};

}  // namespace

PerplexityResult measure_perplexity(std::shared_ptr<const Model> model, const std::string& text,
                                    const PerplexityOptions& options,
                                    const PerplexityProgress& progress) {
  const auto started = std::chrono::steady_clock::now();
  const ModelConfig& config = model->config();
  const int64_t context = options.context;
  if (context < 16 || context > config.context) {
    throw std::invalid_argument("a context of " + std::to_string(context) +
                                " tokens: it must be between 16 and the model's " +
                                std::to_string(config.context));
  }
  std::vector<TokenId> tokens = model->tokenizer().encode(text, true);
  PerplexityResult result;
  result.text_tokens = static_cast<int64_t>(tokens.size());
  int64_t chunks = result.text_tokens / context;
  if (options.chunks >= 0) chunks = std::min(chunks, options.chunks);
  if (result.text_tokens < 2 * context || chunks < 1) {
    throw std::invalid_argument("the text has " + std::to_string(result.text_tokens) +
                                " tokens; a context of " + std::to_string(context) +
                                " needs at least " + std::to_string(2 * context));
  }
  result.chunks = chunks;
  tokens.resize(static_cast<size_t>(chunks * context));

  const int64_t first = context / 2;
  const int64_t scored_per_chunk = context - first - 1;
  const int64_t vocabulary = config.vocabulary;
  LogProbHeader header{};
  std::memcpy(header.magic, kMagic, 8);
  header.context = static_cast<uint32_t>(context);
  header.vocabulary = static_cast<uint32_t>(vocabulary);
  header.chunks = static_cast<uint32_t>(chunks);
  header.scored_per_chunk = static_cast<uint32_t>(scored_per_chunk);
  Scores scores(options, header, tokens);

  std::unique_ptr<Backend> backend =
      make_backend(options.backend, model, {std::max(1, options.threads)});
  const int64_t block_tokens = 16;
  KvBlockAllocator cache(block_tokens, (context + block_tokens - 1) / block_tokens);
  backend->allocate_kv_pool({cache.total_blocks(), block_tokens, options.kv_type});
  const int64_t batch = std::max<int64_t>(1, std::min(options.batch, context));
  const TokenId bos = model->tokenizer().vocabulary().bos;
  const bool add_bos = model->tokenizer().vocabulary().add_bos && bos >= 0;

  StepOutput output;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    std::vector<TokenId> window(tokens.begin() + chunk * context,
                                tokens.begin() + (chunk + 1) * context);
    if (add_bos) window[0] = bos;
    KvSequence sequence;
    if (!reserve(cache, sequence, context)) throw std::logic_error("KV cache too small");
    // Pieces of at most `batch` tokens, split where scoring starts: only positions from
    // `first` on need logits.
    for (int64_t begin = 0; begin < context;) {
      const int64_t end = std::min(begin < first ? first : context, begin + batch);
      const bool scoring = begin >= first;
      StepChunk piece;
      piece.tokens =
          std::span<const TokenId>(window.data() + begin, static_cast<size_t>(end - begin));
      piece.start = sequence.length;
      piece.block_table = sequence.blocks;
      piece.want = scoring ? StepChunk::Want::every_logits : StepChunk::Want::nothing;
      backend->forward({&piece, 1}, output);
      sequence.length = end;
      for (int64_t p = begin; scoring && p < end && p < context - 1; ++p)
        scores.add(output.logits.data() + (p - begin) * vocabulary, vocabulary,
                   window[static_cast<size_t>(p + 1)]);
      begin = end;
    }
    for (BlockId block : sequence.blocks)
      cache.release(block);
    if (progress) progress(chunk + 1, chunks, scores.perplexity());
  }
  scores.finish(result);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace chatflow::engine
