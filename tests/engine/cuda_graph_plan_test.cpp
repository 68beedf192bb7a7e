// Which decode steps the CUDA backend replays as captured graphs, checked without a device.
#include "framework/engine/cuda/cuda_graph_plan.h"

#include <gtest/gtest.h>

namespace chatflow::engine {
namespace {

TEST(CudaGraphPlan, BucketsAreOneTwoFourThenMultiplesOfEightUpToTheLargestStep) {
  EXPECT_EQ(decode_graph_buckets(2048),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112,
                                  120, 128}));
  EXPECT_EQ(decode_graph_buckets(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_EQ(decode_graph_buckets(16), (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(decode_graph_buckets(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(decode_graph_buckets(1), (std::vector<int64_t>{1}));
}

TEST(CudaGraphPlan, AStepRunsInTheSmallestBucketThatHoldsIt) {
  const std::vector<int64_t> buckets = decode_graph_buckets(2048);
  EXPECT_EQ(decode_graph_bucket(buckets, 1), 1);
  EXPECT_EQ(decode_graph_bucket(buckets, 3), 4);
  EXPECT_EQ(decode_graph_bucket(buckets, 5), 8);
  EXPECT_EQ(decode_graph_bucket(buckets, 17), 24);
  EXPECT_EQ(decode_graph_bucket(buckets, 128), 128);
  EXPECT_EQ(decode_graph_bucket(buckets, 129), 0);
}

TEST(CudaGraphPlan, OnlyDecodeStepsOfModelsWithoutExpertsReplayAGraph) {
  ModelConfig dense;
  ModelConfig experts;
  experts.experts = 8;
  experts.experts_used = 2;
  const std::vector<TokenId> one{5}, three{5, 6, 7};
  StepChunk decode{one, 10, {}, StepChunk::Want::token, {}};
  StepChunk other_decode{one, 3, {}, StepChunk::Want::token, {}};
  StepChunk prompt{three, 0, {}, StepChunk::Want::token, {}};
  StepChunk logits_only{one, 10, {}, StepChunk::Want::logits, {}};
  const std::vector<StepChunk> decodes{decode, other_decode};
  EXPECT_TRUE(replays_decode_graph(dense, decodes));
  EXPECT_FALSE(replays_decode_graph(experts, decodes));
  EXPECT_FALSE(replays_decode_graph(dense, std::vector<StepChunk>{decode, prompt}));
  EXPECT_FALSE(replays_decode_graph(dense, std::vector<StepChunk>{decode, logits_only}));
  EXPECT_FALSE(replays_decode_graph(dense, std::vector<StepChunk>{}));
}

}  // namespace
}  // namespace chatflow::engine
