// The CUDA backend on a GPU (ctest label cuda; skipped with the runtime's reason where no device
// is visible), beyond the conformance suite (backend_conformance_test.cpp, compiled again into
// this binary): greedy text identical to the CPU backend's, no device memory kept across many
// requests, and a KV pool that does not fit refused with the numbers.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/step_session.h"
#include "framework/engine/backend.h"
#include "framework/engine/generator.h"
#include "framework/engine/model.h"
#include "kernels/cuda/cuda_kernels.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = backend_unavailable("cuda")) GTEST_SKIP() << *reason;
  }
  static std::shared_ptr<const Model> model(kernels::TensorType type, int64_t dim = 128) {
    ModelShape shape;
    shape.dim = dim;
    shape.layers = 4;
    shape.heads = 4;
    shape.kv_heads = 2;
    shape.ffn = 2 * dim;
    shape.context = 512;
    shape.type = type;
    shape.weight_scale = 0.3f;  // peaked logits: greedy choices are not near-ties
    return Model::load(testing::temp_model(shape));
  }
  static std::vector<TokenId> generate(const std::shared_ptr<const Model>& model,
                                       std::string_view backend, int64_t tokens) {
    Generator generator(model, 2, backend);
    GenerationRequest request;
    request.prompt = {1, 17, 42, 99, 7, 23, 5};
    request.max_tokens = tokens;
    request.ignore_eos = true;
    request.sampling.temperature = 0;
    return generator.generate(request).tokens;
  }
};

TEST_F(CudaBackend, GreedyTextEqualsTheCpuBackendsOver64TokensOnF16) {
  auto f16 = model(kernels::TensorType::f16);
  const std::vector<TokenId> cpu = generate(f16, "cpu", 64);
  const std::vector<TokenId> cuda = generate(f16, "cuda", 64);
  ASSERT_EQ(cpu.size(), 64u);
  EXPECT_EQ(cuda, cpu);
}

// Greedy draws are made on the device (penalties, log-probabilities and alternatives included):
// the same tokens, and log-probabilities within float rounding of the host's.
TEST_F(CudaBackend, GreedyDrawsOnTheDeviceEqualTheHostsWithPenaltiesAndLogprobs) {
  auto f16 = model(kernels::TensorType::f16);
  auto run = [&](std::string_view backend) {
    Generator generator(f16, 2, backend);
    GenerationRequest request;
    request.prompt = {1, 17, 42, 99, 7, 23, 5};
    request.max_tokens = 32;
    request.ignore_eos = true;
    request.sampling.temperature = 0;
    request.sampling.repetition_penalty = 1.3f;
    request.sampling.frequency_penalty = 0.2f;
    request.sampling.logprobs = true;
    request.sampling.top_logprobs = 5;
    std::vector<SampledToken> drawn;
    generator.generate(request, [&](const GeneratedToken& token) {
      drawn.push_back(token.sampled);
      return true;
    });
    return drawn;
  };
  const std::vector<SampledToken> cpu = run("cpu"), cuda = run("cuda");
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(cuda[i].token, cpu[i].token) << "token " << i;
    EXPECT_NEAR(cuda[i].logprob, cpu[i].logprob, 1e-3) << "token " << i;
    ASSERT_EQ(cuda[i].top.size(), cpu[i].top.size()) << "token " << i;
    for (size_t k = 0; k < cpu[i].top.size(); ++k) {
      EXPECT_EQ(cuda[i].top[k].token, cpu[i].top[k].token) << "token " << i << " alternative " << k;
      EXPECT_NEAR(cuda[i].top[k].logprob, cpu[i].top[k].logprob, 1e-3);
    }
  }
}

// Decode steps replayed from captured CUDA graphs (padded to their bucket, the padding writing to
// the scratch block) give exactly what the same steps give launched kernel by kernel, through
// changing batch sizes (5 sequences: bucket 8; then 3: bucket 4).
TEST_F(CudaBackend, DecodeStepsReplayedAsGraphsEqualTheStepsLaunchedOneByOne) {
  const std::string path = testing::temp_model([] {
    ModelShape shape;
    shape.dim = 128;
    shape.layers = 3;
    shape.heads = 4;
    shape.kv_heads = 2;
    shape.ffn = 256;
    shape.type = kernels::TensorType::q8_0;
    shape.weight_scale = 0.3f;
    return shape;
  }());
  auto decode = [&](const char* graphs) {
    setenv("CHATFLOW_CUDA_GRAPHS", graphs, 1);
    testing::StepSession session("cuda", path, kernels::KvType::f16, 64);
    unsetenv("CHATFLOW_CUDA_GRAPHS");
    std::vector<KvSequence> sequences(5);
    std::vector<testing::StepPart> prompts;
    for (size_t i = 0; i < sequences.size(); ++i) {
      prompts.push_back(
          {&sequences[i],
           testing::spread_tokens(9 + static_cast<int64_t>(i), i + 1, session.vocabulary()),
           StepChunk::Want::logits});
    }
    session.step(prompts);
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.logprobs = true;
    std::vector<TokenId> last(sequences.size(), 1);
    std::vector<SampledToken> drawn;
    for (int step = 0; step < 16; ++step) {
      const size_t live = step < 8 ? 5 : 3;
      std::vector<testing::StepPart> parts;
      for (size_t i = 0; i < live; ++i) {
        TokenDraw draw;
        draw.params = &greedy;
        parts.push_back({&sequences[i], {last[i]}, StepChunk::Want::token, draw});
      }
      const auto results = session.step(parts);
      for (size_t i = 0; i < live; ++i) {
        last[i] = results[i].token.token;
        drawn.push_back(results[i].token);
      }
    }
    return drawn;
  };
  const std::vector<SampledToken> launched = decode("0"), replayed = decode("1");
  ASSERT_EQ(replayed.size(), launched.size());
  for (size_t i = 0; i < launched.size(); ++i) {
    EXPECT_EQ(replayed[i].token, launched[i].token) << "draw " << i;
    EXPECT_EQ(replayed[i].logprob, launched[i].logprob) << "draw " << i;
  }
}

TEST_F(CudaBackend, AThousandRequestsLeaveNoDeviceMemoryBehind) {
  auto q8 = model(kernels::TensorType::q8_0);
  Generator generator(q8, 2, "cuda");
  GenerationRequest request;
  request.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // > kMatVecTokens: the cuBLAS path
  request.max_tokens = 4;
  request.ignore_eos = true;
  generator.generate(request);  // the workspace grows to its size here
  const size_t before = kernels::cuda::probe_devices().free_bytes;
  for (int i = 0; i < 1000; ++i) {
    request.prompt[0] = static_cast<TokenId>(1 + i % 50);
    generator.generate(request);
  }
  const size_t after = kernels::cuda::probe_devices().free_bytes;
  std::printf("device free memory: %zu MiB before, %zu MiB after 1,000 requests\n", before >> 20,
              after >> 20);
  EXPECT_LE(before - std::min(before, after), size_t{4} << 20);
}

TEST_F(CudaBackend, APoolLargerThanTheDeviceIsRefusedWithTheNumbers) {
  auto q8 = model(kernels::TensorType::q8_0);
  auto backend = make_backend("cuda", q8);
  const size_t total = kernels::cuda::probe_devices().total_bytes;
  const uint64_t block = kv_block_bytes(q8->config(), 16, kernels::KvType::f32);
  const auto blocks = static_cast<int64_t>(total / block + 1);
  try {
    backend->allocate_kv_pool({blocks, 16, kernels::KvType::f32});
    FAIL() << "a pool of " << blocks << " blocks was allocated";
  } catch (const std::bad_alloc& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("does not fit on"), std::string::npos) << message;
    EXPECT_NE(message.find("KV pool"), std::string::npos) << message;
    EXPECT_NE(message.find("kv_cache.blocks"), std::string::npos) << message;
  }
  backend->allocate_kv_pool({64, 16, kernels::KvType::f16});  // a pool that fits still can
  EXPECT_GT(backend->info().memory.kv_pool_bytes, 0u);
}

}  // namespace
}  // namespace chatflow::engine
