// The CUDA kernels on a GPU (ctest label `cuda`; skipped with the runtime's reason where no
// device is visible): every weight type decodes on the device to exactly the floats the CPU
// reads from the same bytes. Run by scripts/gpu-check.sh on a lent GPU machine.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/quantize.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {
namespace {

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_ = cuda::probe_devices();
    if (probe_.devices == 0) GTEST_SKIP() << "no CUDA device: " << probe_.why_none;
  }
  cuda::DeviceProbe probe_;
};

TEST_F(CudaDevice, EveryWeightTypeDecodesAsTheCpuReadsIt) {
  std::printf("device 0: %s (sm_%d), %zu of %zu MiB free\n", probe_.name.c_str(),
              probe_.compute_capability, probe_.free_bytes >> 20, probe_.total_bytes >> 20);
  const TensorType types[] = {
      TensorType::f16,  TensorType::bf16, TensorType::q4_0,   TensorType::q4_1,  TensorType::q5_0,
      TensorType::q5_1, TensorType::q8_0, TensorType::iq4_nl, TensorType::q2_k,  TensorType::q3_k,
      TensorType::q4_k, TensorType::q5_k, TensorType::q6_k,   TensorType::iq4_xs};
  std::mt19937 generator(35);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  for (TensorType type : types) {
    const int64_t columns = 64 * 256;  // more than one thread block of the kernel
    std::vector<float> values(static_cast<size_t>(columns));
    for (auto& value : values)
      value = weight(generator);
    std::vector<uint8_t> row(row_bytes(type, columns));
    quantize_row(type, values.data(), columns, row.data());
    std::vector<float> expected(values.size());
    dequantize_row(type, row.data(), columns, expected.data());
    std::string error;
    const std::vector<float> decoded = cuda::dequantize_on_device(type, row.data(), columns, error);
    ASSERT_EQ(decoded.size(), expected.size()) << to_string(type) << ": " << error;
    EXPECT_EQ(std::memcmp(decoded.data(), expected.data(), expected.size() * sizeof(float)), 0)
        << to_string(type) << " decodes differently on the device";
  }
}

// Checked before any device is asked, so it runs without a GPU too.
TEST(CudaKernels, AnUndecodableTypeIsAnErrorNotGarbage) {
  std::string error;
  const std::vector<uint8_t> row(36 * 4);
  EXPECT_TRUE(cuda::dequantize_on_device(TensorType::q8_1, row.data(), 128, error).empty());
  EXPECT_NE(error.find("cannot decode 128 values of type q8_1"), std::string::npos) << error;
}

}  // namespace
}  // namespace chatflow::kernels
