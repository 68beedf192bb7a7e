// A backend driven one step at a time, as the scheduler drives it but with every choice in the
// test's hands: the host's block allocator and block tables, which sequences share a step, how
// prompts are cut into chunks, what each chunk asks for. Used by the backend conformance suite.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/engine/backend.h"

namespace chatflow::testing {

// One sequence's part of a step: its next `tokens`, at the positions after what it holds.
struct StepPart {
  engine::KvSequence* sequence;
  std::vector<engine::TokenId> tokens;
  engine::StepChunk::Want want = engine::StepChunk::Want::logits;
  engine::TokenDraw draw = {};  // for Want::token
};

// What one part got back: no row, one, or one per token (every_logits); its token when it asked.
struct PartResult {
  std::vector<std::vector<float>> rows;
  engine::SampledToken token;
};

class StepSession {
 public:
  // The model at `model_path` on backend `backend` with a pool of `blocks` blocks of 16
  // positions stored as `kv_type`.
  StepSession(const std::string& backend, const std::string& model_path,
              kernels::KvType kv_type = kernels::KvType::f32, int64_t blocks = 64, int threads = 2);

  engine::Backend& backend() { return *backend_; }
  const engine::Model& model() const { return backend_->model(); }
  int64_t vocabulary() const { return model().config().vocabulary; }
  engine::KvBlockAllocator& allocator() { return allocator_; }

  // Reserves the blocks every part needs, runs one forward step over all of them (in the order
  // given), advances each sequence's length, and returns each part's results in order.
  std::vector<PartResult> step(const std::vector<StepPart>& parts);

  // One sequence alone, `tokens` in one chunk: its last logits row.
  std::vector<float> last_row(engine::KvSequence& sequence, std::vector<engine::TokenId> tokens);

 private:
  std::shared_ptr<const engine::Model> model_;
  std::unique_ptr<engine::Backend> backend_;
  engine::KvBlockAllocator allocator_;
  engine::StepOutput output_;
};

// `count` token ids spread over the vocabulary, the same for the same `seed`.
std::vector<engine::TokenId> spread_tokens(int64_t count, uint64_t seed, int64_t vocabulary);

}  // namespace chatflow::testing
