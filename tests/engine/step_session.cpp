#include "step_session.h"

#include <stdexcept>

namespace chatflow::testing {

using engine::StepChunk;

StepSession::StepSession(const std::string& backend, const std::string& model_path,
                         kernels::KvType kv_type, int64_t blocks, int threads)
    : model_(engine::Model::load(model_path)),
      backend_(engine::make_backend(backend, model_, engine::BackendOptions{threads})),
      allocator_(16, blocks) {
  backend_->allocate_kv_pool({blocks, 16, kv_type});
}

std::vector<PartResult> StepSession::step(const std::vector<StepPart>& parts) {
  std::vector<StepChunk> chunks;
  for (const StepPart& part : parts) {
    const int64_t end = part.sequence->length + static_cast<int64_t>(part.tokens.size());
    if (!engine::reserve(allocator_, *part.sequence, end))
      throw std::runtime_error("the test's KV pool is too small");
    StepChunk chunk;
    chunk.tokens = part.tokens;
    chunk.start = part.sequence->length;
    chunk.block_table = part.sequence->blocks;
    chunk.want = part.want;
    chunk.draw = part.draw;
    chunks.push_back(chunk);
  }
  backend_->forward(chunks, output_);
  const size_t vocabulary = static_cast<size_t>(this->vocabulary());
  std::vector<PartResult> results(parts.size());
  size_t row = 0, token = 0;
  auto take_row = [&](PartResult& result) {
    if ((row + 1) * vocabulary > output_.logits.size())
      throw std::runtime_error("the step returned fewer logits rows than were asked for");
    result.rows.emplace_back(
        output_.logits.begin() + static_cast<std::ptrdiff_t>(row * vocabulary),
        output_.logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * vocabulary));
    ++row;
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    const StepPart& part = parts[i];
    part.sequence->length += static_cast<int64_t>(part.tokens.size());
    switch (part.want) {
      case StepChunk::Want::nothing:
        break;
      case StepChunk::Want::logits:
        take_row(results[i]);
        break;
      case StepChunk::Want::every_logits:
        for (size_t t = 0; t < part.tokens.size(); ++t)
          take_row(results[i]);
        break;
      case StepChunk::Want::token:
        if (token >= output_.tokens.size())
          throw std::runtime_error("the step returned fewer tokens than were asked for");
        results[i].token = output_.tokens[token++];
        break;
    }
  }
  if (row * vocabulary != output_.logits.size() || token != output_.tokens.size())
    throw std::runtime_error("the step returned more than was asked for");
  return results;
}

std::vector<float> StepSession::last_row(engine::KvSequence& sequence,
                                         std::vector<engine::TokenId> tokens) {
  return step({{&sequence, std::move(tokens)}})[0].rows.at(0);
}

std::vector<engine::TokenId> spread_tokens(int64_t count, uint64_t seed, int64_t vocabulary) {
  std::vector<engine::TokenId> tokens;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 12345;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    tokens.push_back(
        static_cast<engine::TokenId>((state >> 33) % static_cast<uint64_t>(vocabulary)));
  }
  return tokens;
}

}  // namespace chatflow::testing
