// The backend conformance suite (issue 33; llama.cpp's test-backend-ops idea at the level of
// whole steps). Every backend runs the same checks through the step interface of backend.h, so a
// second backend is one more instantiation and no code: chatflow_tests checks the CPU backend, and
// chatflow_cuda_tests (ctest label cuda) compiles this file again with CHATFLOW_CONFORMANCE_CUDA to
// check the CUDA backend, each test skipped with the reason where no device is visible:
// - whole steps (a prompt in pieces, prompts and decode tokens sharing a step, every-token rows)
//   for every model family make-model writes and every weight type the kernels compute with,
//   against the double-precision reference written from the families' definitions;
// - batch invariance, shared prefix blocks, sliding windows over long contexts, mixture of
//   experts with many tokens per step, every KV type the backend reports;
// - tokens drawn by the backend (greedy, seeded, constrained) against the host's sampling of the
//   logits it returns, and the contract's errors;
// - cancellation through the scheduler over the backend: a cancelled sequence leaves at the next
//   step and its blocks return.
//
// Tolerances, as a fraction of the largest |logit| of the reference's row (at least 1), measured
// on the CPU backend over every family and type and set with room for a backend that sums in
// another order:
// - f32, f16, bf16 weights, f32 KV pool: 1e-4. Measured at most 5.3e-7: the engine and the
//   reference differ only in float against double rounding; the same bound architecture_test
//   used.
// - the same weights, f16 KV pool: 1e-3. Measured at most 8.4e-5 (keys and values rounded to
//   half precision); transformer_test used 2e-3.
// - quantised weights, f32 KV pool: 3e-2. Their products take the input rounded to 8 bits per
//   block (the reference rounds it the same way). Engine and reference then agree to ~1e-7 until
//   a last-bit difference in an activation rounds it to the neighbouring level: one such flip
//   moves these small models' logits by up to 2.1e-2 of their scale (measured; iq4_xs phi3).
//   q4_1 and q5_1 sit near 1e-2 always (the engine's sums for their offsets are f16, as
//   llama.cpp's q8_1 sums are). A wrong format, a wrong scale or a missed step is off by far
//   more; the formats themselves are checked exactly by the kernels' own tests.
// - quantised weights with an f16 KV pool are not compared with the reference: both roundings
//   together flip a mixture-of-experts router's choice (measured: 0.33 of the scale), which says
//   nothing about the backend.
//
// Comparisons of a backend with itself (a sequence batched or alone, shared blocks or its own)
// are bit-exact for a backend whose expectations say so (the CPU's: every sum runs in the same
// order whatever the batch, the chunking or the threads), and within the reference tolerance of
// the weights otherwise.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "architecture_reference.h"
#include "framework/engine/backend.h"
#include "framework/engine/model_writer.h"
#include "framework/engine/scheduler.h"
#include "step_session.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

using kernels::KvType;
using kernels::TensorType;
using testing::ArchitectureReference;
using testing::spread_tokens;
using testing::StepPart;
using testing::StepSession;
using Want = StepChunk::Want;

// ---------------------------------------------------------------------------------------------
// What is expected of each backend

struct Expectations {
  // Results of the same sequence computed in different company (batch, chunking, threads,
  // shared blocks) are bit-identical, and drawn tokens equal the host's sampling of the returned
  // logits exactly. Otherwise they agree within the reference tolerance of the weights.
  bool bit_exact = false;
};

// A backend not named here is held to the tolerances, which every correct backend meets.
std::vector<std::string> conformance_backends() {
#ifdef CHATFLOW_CONFORMANCE_CUDA
  return {"cuda"};
#else
  return {"cpu"};
#endif
}

// Skips the test where its backend cannot run (a CUDA build on a machine without a device).
void skip_unavailable(const std::string& backend) {
  if (auto reason = backend_unavailable(backend)) GTEST_SKIP() << *reason;
}

Expectations expectations_of(const std::string& backend) {
  if (backend == "cpu") return {true};
  return {};
}

// ---------------------------------------------------------------------------------------------
// The models: every family make-model writes, every weight type the kernels compute with

struct Family {
  const char* name;
  const char* architecture;
  const char* rope_scaling;
  int64_t layers;
  int64_t sliding_window;
  float weight_scale;
  int64_t experts = 0;
  int64_t experts_used = 0;
};

// Windows of 12 positions against prompts of 30 and more: the window moves in every schedule.
// Gemma 3 has six layers so that one (the sixth) attends globally; Gemma's smaller weights keep
// its soft-capped logits away from the cap.
const std::vector<Family>& families() {
  static const std::vector<Family> list = {
      {"llama", "llama", "none", 2, 0, 0.08f},
      {"llama_llama3_rope", "llama", "llama3", 2, 0, 0.08f},
      {"llama_linear_rope", "llama", "linear", 2, 0, 0.08f},
      {"llama_yarn", "llama", "yarn", 2, 0, 0.08f},
      {"mistral_sliding_window", "llama", "none", 2, 12, 0.08f},
      {"qwen2", "qwen2", "none", 2, 0, 0.08f},
      {"qwen2_yarn", "qwen2", "yarn", 2, 0, 0.08f},
      {"qwen3", "qwen3", "none", 2, 0, 0.08f},
      {"gemma2", "gemma2", "none", 3, 12, 0.04f},
      {"gemma3", "gemma3", "linear", 6, 12, 0.04f},
      {"phi3", "phi3", "none", 2, 12, 0.08f},
      {"phi3_longrope", "phi3", "longrope", 2, 12, 0.08f},
      {"mixtral", "llama", "none", 2, 0, 0.08f, 4, 2},
      {"qwen2moe", "qwen2moe", "none", 2, 0, 0.08f, 4, 2},
      {"qwen3moe", "qwen3moe", "none", 2, 0, 0.08f, 8, 3},
  };
  return list;
}

const Family& family(const std::string& name) {
  for (const Family& f : families()) {
    if (f.name == name) return f;
  }
  throw std::invalid_argument("no family " + name);
}

// Every type the kernels compute with, from their own table: a new one joins the suite.
std::vector<TensorType> weight_types() {
  std::vector<TensorType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    auto type = kernels::tensor_type_from_id(id);
    if (type && kernels::computable(*type)) types.push_back(*type);
  }
  return types;
}

// In the default suite each type other than f32 runs with llama and with one other family
// (every family gets one; mixtures of experts get 32-value blocks, whose models are small).
// Every family runs with f32. The full cross product is labelled `long`.
const std::vector<std::pair<TensorType, const char*>>& default_pairs() {
  static const std::vector<std::pair<TensorType, const char*>> pairs = {
      {TensorType::f16, "qwen2"},
      {TensorType::bf16, "gemma2"},
      {TensorType::q8_0, "qwen2moe"},
      {TensorType::q4_0, "mixtral"},
      {TensorType::q4_1, "phi3"},
      {TensorType::q5_0, "qwen3moe"},
      {TensorType::q5_1, "gemma3"},
      {TensorType::iq4_nl, "mistral_sliding_window"},
      {TensorType::q2_k, "qwen3"},
      {TensorType::q3_k, "llama_yarn"},
      {TensorType::q4_k, "phi3_longrope"},
      {TensorType::q5_k, "qwen2_yarn"},
      {TensorType::q6_k, "llama_llama3_rope"},
      {TensorType::iq4_xs, "llama_linear_rope"},
  };
  return pairs;
}

struct ModelCase {
  Family family;
  TensorType type;
};

std::string case_name(const ModelCase& c) {
  return std::string(c.family.name) + "_" + std::string(kernels::to_string(c.type));
}

// How gtest and ctest print a case (instead of its bytes).
void PrintTo(const ModelCase& c, std::ostream* out) {
  *out << case_name(c);
}

ModelShape shape_of(const ModelCase& c) {
  ModelShape shape;
  shape.architecture = c.family.architecture;
  shape.rope_scaling = c.family.rope_scaling;
  shape.sliding_window = c.family.sliding_window;
  shape.weight_scale = c.family.weight_scale;
  shape.experts = c.family.experts;
  shape.experts_used = c.family.experts_used;
  shape.dim = 64;
  shape.layers = c.family.layers;
  shape.heads = 4;
  shape.kv_heads = 2;  // grouped-query attention
  shape.ffn = 96;
  shape.context = 256;
  shape.type = c.type;
  if (kernels::block_values(c.type) == kernels::kSuperBlock) {  // rows of whole super-blocks
    shape.dim = 256;
    shape.ffn = 256;
  }
  return shape;
}

std::string model_path(const ModelCase& c) {
  return testing::temp_model(shape_of(c));
}

std::vector<ModelCase> default_cases() {
  std::vector<ModelCase> cases;
  for (const Family& f : families())
    cases.push_back({f, TensorType::f32});
  for (const auto& [type, partner] : default_pairs()) {
    cases.push_back({family("llama"), type});
    cases.push_back({family(partner), type});
  }
  return cases;
}

// Everything, when CHATFLOW_CONFORMANCE_FULL is set (ctest's backend_conformance_full).
std::vector<ModelCase> full_cross_cases() {
  std::vector<ModelCase> cases;
  if (std::getenv("CHATFLOW_CONFORMANCE_FULL") == nullptr) return cases;
  std::vector<ModelCase> defaults = default_cases();
  for (const Family& f : families()) {
    for (TensorType type : weight_types()) {
      bool in_default = std::any_of(defaults.begin(), defaults.end(), [&](const ModelCase& c) {
        return std::string(c.family.name) == f.name && c.type == type;
      });
      if (!in_default) cases.push_back({f, type});
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Comparisons

double reference_tolerance(TensorType weights, KvType kv) {
  if (kernels::is_quantized(weights)) return 3e-2;  // f32 pool only (see the top of the file)
  return kv == KvType::f32 ? 1e-4 : 1e-3;
}

// The largest difference from the reference's row, as a fraction of that row's largest |logit|
// (at least 1), within `tolerance`; the largest such fraction so far kept in `largest_error`.
::testing::AssertionResult follows_reference(std::span<const float> actual,
                                             const std::vector<double>& expected, double tolerance,
                                             double* largest_error = nullptr) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "a row of " << actual.size() << " logits, the reference has " << expected.size();
  }
  double scale = 1;
  for (double value : expected)
    scale = std::max(scale, std::fabs(value));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double difference = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(difference <= worst)) {  // NaN included
      worst = difference;
      at = i;
    }
  }
  if (largest_error != nullptr) *largest_error = std::max(*largest_error, worst / scale);
  if (worst / scale <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "logit " << at << " is " << actual[at] << ", the reference's " << expected[at]
         << ": off by " << worst / scale << " of the row's scale " << scale << " (tolerance "
         << tolerance << ")";
}

// Two rows of the same backend for the same sequence: identical for a bit-exact backend, else
// within `tolerance` of the first row's scale.
::testing::AssertionResult same_row(std::span<const float> expected, std::span<const float> actual,
                                    const Expectations& expectations, double tolerance) {
  if (expected.size() != actual.size())
    return ::testing::AssertionFailure()
           << "rows of " << expected.size() << " and " << actual.size() << " logits";
  std::vector<double> wide(expected.begin(), expected.end());
  if (!expectations.bit_exact) return follows_reference(actual, wide, tolerance);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "logit " << i << " is " << actual[i] << " against "
                                           << expected[i] << " (expected bit-identical rows)";
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// The suites' parameters: a backend, and for some suites a model

std::string param_name(const std::string& backend, const ModelCase& c) {
  return backend + "_" + case_name(c);
}

class BackendCase : public ::testing::TestWithParam<std::tuple<std::string, ModelCase>> {
 protected:
  void SetUp() override { skip_unavailable(backend()); }
  const std::string& backend() const { return std::get<0>(GetParam()); }
  const ModelCase& model_case() const { return std::get<1>(GetParam()); }
  Expectations expectations() const { return expectations_of(backend()); }
};

auto backend_case_name = [](const auto& info) {
  return param_name(std::get<0>(info.param), std::get<1>(info.param));
};

class BackendOnly : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { skip_unavailable(backend()); }
  const std::string& backend() const { return GetParam(); }
  Expectations expectations() const { return expectations_of(backend()); }
};

// ---------------------------------------------------------------------------------------------
// Whole steps against the reference

// Three sequences through every kind of step the scheduler makes: a prompt's first piece that
// wants nothing back beside another prompt that wants its row; a step mixing a prompt's last
// piece, a whole prompt that wants every row and a decode token; then decode steps in changing
// order. Every row is compared with each sequence's own reference.
// Returns the largest error against the reference it saw.
double check_every_kind_of_step(StepSession& session, const std::string& path, double tolerance) {
  double largest_error = 0;
  const int64_t vocabulary = session.vocabulary();
  const std::vector<TokenId> a = spread_tokens(30, 1, vocabulary);
  const std::vector<TokenId> b = spread_tokens(21, 2, vocabulary);
  const std::vector<TokenId> c = spread_tokens(5, 3, vocabulary);
  const std::vector<TokenId> decode = spread_tokens(20, 4, vocabulary);
  ArchitectureReference reference_a(path), reference_b(path), reference_c(path);
  KvSequence sequence_a, sequence_b, sequence_c;

  auto results = session.step(
      {{&sequence_a, {a.begin(), a.begin() + 12}, Want::nothing}, {&sequence_c, c, Want::logits}});
  EXPECT_TRUE(results[0].rows.empty());
  std::vector<double> expected;
  for (TokenId token : c)
    expected = reference_c.step(token);
  EXPECT_TRUE(follows_reference(results[1].rows.at(0), expected, tolerance, &largest_error))
      << "a 5-token prompt sharing a step with another prompt's first piece";

  results = session.step({{&sequence_b, b, Want::every_logits},
                          {&sequence_a, {a.begin() + 12, a.end()}, Want::logits},
                          {&sequence_c, {decode[0]}, Want::logits}});
  if (results[0].rows.size() != b.size()) {
    ADD_FAILURE() << "every_logits gave " << results[0].rows.size() << " rows for " << b.size()
                  << " tokens";
    return largest_error;
  }
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_TRUE(
        follows_reference(results[0].rows[i], reference_b.step(b[i]), tolerance, &largest_error))
        << "every row of a prompt, position " << i;
  }
  for (TokenId token : a)
    expected = reference_a.step(token);
  EXPECT_TRUE(follows_reference(results[1].rows.at(0), expected, tolerance, &largest_error))
      << "the last piece of a chunked prompt";
  EXPECT_TRUE(follows_reference(results[2].rows.at(0), reference_c.step(decode[0]), tolerance,
                                &largest_error))
      << "a decode token sharing a step with prompts";

  for (int step = 0; step < 6; ++step) {
    const TokenId next_a = decode[static_cast<size_t>(1 + 3 * step)];
    const TokenId next_b = decode[static_cast<size_t>(2 + 3 * step)];
    const TokenId next_c = decode[static_cast<size_t>(3 + 3 * step)];
    std::vector<StepPart> parts = {
        {&sequence_a, {next_a}}, {&sequence_b, {next_b}}, {&sequence_c, {next_c}}};
    std::rotate(parts.begin(), parts.begin() + step % 3, parts.end());
    results = session.step(parts);
    for (size_t i = 0; i < parts.size(); ++i) {
      KvSequence* sequence = parts[i].sequence;
      ArchitectureReference& reference = sequence == &sequence_a   ? reference_a
                                         : sequence == &sequence_b ? reference_b
                                                                   : reference_c;
      const char* name = sequence == &sequence_a ? "a" : sequence == &sequence_b ? "b" : "c";
      EXPECT_TRUE(follows_reference(results[i].rows.at(0), reference.step(parts[i].tokens[0]),
                                    tolerance, &largest_error))
          << "decode step " << step << " of sequence " << name << " at position "
          << sequence->length - 1;
    }
  }
  return largest_error;
}

class WholeSteps : public BackendCase {};

TEST_P(WholeSteps, EveryKindOfStepFollowsTheReference) {
  const std::string path = model_path(model_case());
  StepSession session(backend(), path, KvType::f32);
  const double largest_error =
      check_every_kind_of_step(session, path, reference_tolerance(model_case().type, KvType::f32));
  // In the XML report (--gtest_output=xml), for measuring a backend's tolerances.
  RecordProperty("largest_error", std::to_string(largest_error));
}

INSTANTIATE_TEST_SUITE_P(Default, WholeSteps,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(default_cases())),
                         backend_case_name);
// Only with CHATFLOW_CONFORMANCE_FULL set (ctest -L long): every family with every type.
INSTANTIATE_TEST_SUITE_P(FullCross, WholeSteps,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(full_cross_cases())),
                         backend_case_name);

// Each KV type the backend says it stores, within that type's tolerance, for a family without
// and one with sliding windows and soft-caps.
class KvTypes : public BackendCase {};

TEST_P(KvTypes, EveryKvTypeTheBackendReportsFollowsTheReference) {
  const std::string path = model_path(model_case());
  std::vector<KvType> types;
  {
    StepSession probe(backend(), path);
    types = probe.backend().info().kv_types;
  }
  ASSERT_FALSE(types.empty()) << "a backend stores keys and values somehow";
  for (KvType kv : types) {
    SCOPED_TRACE("KV pool of " + std::string(kernels::to_string(kv)));
    StepSession session(backend(), path, kv);
    const double largest_error =
        check_every_kind_of_step(session, path, reference_tolerance(model_case().type, kv));
    RecordProperty("largest_error_" + std::string(kernels::to_string(kv)),
                   std::to_string(largest_error));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Default, KvTypes,
    ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                       ::testing::Values(ModelCase{family("llama"), TensorType::f16},
                                         ModelCase{family("gemma2"), TensorType::f32})),
    backend_case_name);

// ---------------------------------------------------------------------------------------------
// Batch invariance

// One sequence's rows: its prompt's every row, then one per decode token.
struct SequenceRows {
  std::vector<std::vector<float>> rows;
};

class BatchInvariance : public BackendCase {};

// The sequence alone (one thread, the whole prompt in one chunk, every row) against the same
// sequence cut into pieces of 1, 7, 16 and 5 tokens (the 16 crossing a block boundary) that
// share their steps with another prompt's pieces, decode tokens and a drawn token, in changing
// places in the step, on two threads; then decoding beside others.
TEST_P(BatchInvariance, ASequencesRowsDoNotDependOnItsChunkingOrItsCompany) {
  const std::string path = model_path(model_case());
  const double tolerance = reference_tolerance(model_case().type, KvType::f16);
  StepSession alone(backend(), path, KvType::f16, 16, 1);
  const int64_t vocabulary = alone.vocabulary();
  const std::vector<TokenId> prompt = spread_tokens(29, 7, vocabulary);
  const std::vector<TokenId> decode = spread_tokens(4, 8, vocabulary);
  const std::vector<TokenId> other = spread_tokens(40, 9, vocabulary);
  const std::vector<TokenId> short_one = spread_tokens(6, 10, vocabulary);

  KvSequence solo;
  SequenceRows expected;
  expected.rows = alone.step({{&solo, prompt, Want::every_logits}})[0].rows;
  for (TokenId token : decode)
    expected.rows.push_back(alone.last_row(solo, {token}));

  StepSession together(backend(), path, KvType::f16, 32, 2);
  KvSequence sequence, first, second;
  SamplingParams greedy;
  greedy.temperature = 0;
  auto slice = [&](size_t begin, size_t end) {
    return std::vector<TokenId>(prompt.begin() + static_cast<std::ptrdiff_t>(begin),
                                prompt.begin() + static_cast<std::ptrdiff_t>(end));
  };
  std::vector<std::pair<size_t, std::vector<float>>> actual;  // (row index, row)
  auto keep = [&](size_t first_row, const testing::PartResult& result) {
    for (size_t i = 0; i < result.rows.size(); ++i)
      actual.emplace_back(first_row + i, result.rows[i]);
  };
  auto r = together.step({{&first, {other.begin(), other.begin() + 20}, Want::nothing},
                          {&sequence, slice(0, 1), Want::every_logits},
                          {&second, short_one, Want::logits}});
  keep(0, r[1]);
  r = together.step({{&sequence, slice(1, 8), Want::every_logits},
                     {&first, {other.begin() + 20, other.end()}, Want::every_logits},
                     {&second, {decode[0]}, Want::logits}});
  keep(1, r[0]);
  r = together.step(
      {{&second, {decode[1]}, Want::logits}, {&sequence, slice(8, 24), Want::every_logits}});
  keep(8, r[1]);
  TokenDraw draw;
  draw.params = &greedy;
  r = together.step(
      {{&sequence, slice(24, 29), Want::logits}, {&first, {decode[2]}, Want::token, draw}});
  keep(28, r[0]);
  for (size_t i = 0; i < decode.size(); ++i) {
    std::vector<StepPart> parts = {{&first, {decode[(i + 1) % decode.size()]}},
                                   {&sequence, {decode[i]}},
                                   {&second, {decode[(i + 2) % decode.size()]}}};
    std::rotate(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i % 3), parts.end());
    r = together.step(parts);
    for (size_t p = 0; p < parts.size(); ++p) {
      if (parts[p].sequence == &sequence) keep(prompt.size() + i, r[p]);
    }
  }
  ASSERT_EQ(actual.size(), 29u - 4u + 4u);  // rows 0..23, 28, and the four decode rows
  for (const auto& [index, row] : actual) {
    EXPECT_TRUE(same_row(expected.rows.at(index), row, expectations(), tolerance))
        << "row " << index << " (position " << index << ")";
  }
}

std::vector<ModelCase> invariance_cases() {
  std::vector<ModelCase> cases;
  for (const Family& f : families())
    cases.push_back({f, TensorType::f32});
  for (TensorType type : weight_types()) {
    if (type != TensorType::f32) cases.push_back({family("llama"), type});
  }
  cases.push_back({family("qwen3moe"), TensorType::q8_0});
  cases.push_back({family("gemma2"), TensorType::q4_k});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Default, BatchInvariance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(invariance_cases())),
                         backend_case_name);

// ---------------------------------------------------------------------------------------------
// KV block sharing

class PrefixSharing : public BackendCase {};

// Two sequences start with the first two blocks of an owner's prompt in their block tables
// (reference-counted, as the prefix cache hands them out) and compute only their own suffixes,
// in the step where the owner decodes into its own third block; each gets the rows a sequence
// computing the whole prompt itself gets, and the reference's.
TEST_P(PrefixSharing, SequencesReadingSharedBlocksGetWhatTheyWouldComputeThemselves) {
  const std::string path = model_path(model_case());
  const double tolerance = reference_tolerance(model_case().type, KvType::f32);
  StepSession session(backend(), path, KvType::f32, 32);
  const int64_t vocabulary = session.vocabulary();
  const std::vector<TokenId> prefix = spread_tokens(32, 11, vocabulary);  // two whole blocks
  const std::vector<TokenId> owner_suffix = spread_tokens(9, 12, vocabulary);
  const std::vector<TokenId> suffix_one = spread_tokens(10, 13, vocabulary);
  const std::vector<TokenId> suffix_two = spread_tokens(3, 14, vocabulary);
  const std::vector<TokenId> decode = spread_tokens(3, 15, vocabulary);
  auto joined = [&](const std::vector<TokenId>& suffix) {
    std::vector<TokenId> all = prefix;
    all.insert(all.end(), suffix.begin(), suffix.end());
    return all;
  };

  KvSequence owner, one, two;
  session.step({{&owner, joined(owner_suffix), Want::logits}});
  for (KvSequence* sharer : {&one, &two}) {
    sharer->blocks = {owner.blocks[0], owner.blocks[1]};
    session.allocator().retain(owner.blocks[0]);
    session.allocator().retain(owner.blocks[1]);
    sharer->length = 32;
  }
  auto shared = session.step({{&owner, {decode[0]}, Want::logits},
                              {&one, suffix_one, Want::every_logits},
                              {&two, suffix_two, Want::logits}});
  auto shared_next =
      session.step({{&two, {decode[1]}}, {&one, {decode[2]}}, {&owner, {decode[1]}}});

  StepSession own(backend(), path, KvType::f32, 32);
  KvSequence own_one, own_two;
  auto computed = own.step(
      {{&own_one, joined(suffix_one), Want::every_logits}, {&own_two, joined(suffix_two)}});
  auto computed_next = own.step({{&own_one, {decode[2]}}, {&own_two, {decode[1]}}});

  for (size_t i = 0; i < suffix_one.size(); ++i) {
    EXPECT_TRUE(
        same_row(computed[0].rows.at(32 + i), shared[1].rows.at(i), expectations(), tolerance))
        << "first sharer, position " << 32 + i;
  }
  EXPECT_TRUE(same_row(computed[1].rows.at(0), shared[2].rows.at(0), expectations(), tolerance))
      << "second sharer, its prompt's last position";
  EXPECT_TRUE(
      same_row(computed_next[0].rows.at(0), shared_next[1].rows.at(0), expectations(), tolerance))
      << "first sharer decoding after the owner wrote its own block";
  EXPECT_TRUE(
      same_row(computed_next[1].rows.at(0), shared_next[0].rows.at(0), expectations(), tolerance))
      << "second sharer decoding";

  ArchitectureReference reference(path);
  std::vector<double> expected;
  for (TokenId token : joined(suffix_one))
    expected = reference.step(token);
  EXPECT_TRUE(follows_reference(shared[1].rows.back(), expected, tolerance));
  EXPECT_TRUE(follows_reference(shared_next[1].rows.at(0), reference.step(decode[2]), tolerance));
}

INSTANTIATE_TEST_SUITE_P(
    Default, PrefixSharing,
    ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                       ::testing::Values(ModelCase{family("llama"), TensorType::f16},
                                         ModelCase{family("gemma2"), TensorType::f32},
                                         ModelCase{family("qwen3moe"), TensorType::q8_0},
                                         ModelCase{family("phi3"), TensorType::q4_k})),
    backend_case_name);

// ---------------------------------------------------------------------------------------------
// Sliding windows

class SlidingWindow : public BackendCase {};

// Where every layer slides (Mistral, Phi-3), the last row sees only the last
// layers * (window - 1) + 1 positions: two sequences that differ only before those (stepped
// together) get the same rows there, and different rows where the difference is still in view.
TEST_P(SlidingWindow, PositionsOutsideTheWindowsReachDoNotChangeTheLogits) {
  const std::string path = model_path(model_case());
  StepSession session(backend(), path, KvType::f16);
  const ModelConfig& config = session.model().config();
  ASSERT_GT(config.sliding_window, 0);
  for (int64_t layer = 0; layer < config.layers; ++layer)
    ASSERT_TRUE(config.sliding_layer(layer)) << "this check needs every layer to slide";
  const int64_t reach = config.layers * (config.sliding_window - 1) + 1;
  const int64_t vocabulary = session.vocabulary();
  const int64_t differing = 34, prompt_length = 40, decode_steps = 24;
  std::vector<TokenId> x = spread_tokens(prompt_length, 21, vocabulary);
  std::vector<TokenId> y = x;
  const std::vector<TokenId> head = spread_tokens(differing, 22, vocabulary);
  std::copy(head.begin(), head.end(), y.begin());
  const std::vector<TokenId> decode = spread_tokens(decode_steps, 23, vocabulary);

  KvSequence sequence_x, sequence_y;
  session.step({{&sequence_x, x, Want::nothing}, {&sequence_y, y, Want::nothing}});
  int unchanged = 0, changed = 0;
  for (TokenId token : decode) {
    auto rows = session.step({{&sequence_x, {token}}, {&sequence_y, {token}}});
    const int64_t position = sequence_x.length - 1;
    if (position - config.sliding_window + 1 < differing) {  // in the last layer's own view
      double moved = 0;
      for (size_t i = 0; i < rows[0].rows[0].size(); ++i)
        moved = std::max(moved,
                         std::fabs(static_cast<double>(rows[0].rows[0][i]) - rows[1].rows[0][i]));
      EXPECT_GT(moved, 1e-3) << "position " << position << " still sees the difference";
      ++changed;
    } else if (position - reach + 1 >= differing) {
      EXPECT_TRUE(same_row(rows[0].rows[0], rows[1].rows[0], expectations(),
                           reference_tolerance(model_case().type, KvType::f16)))
          << "position " << position << " is out of reach of the first " << differing;
      ++unchanged;
    }
  }
  EXPECT_GT(changed, 0);
  EXPECT_GT(unchanged, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Default, SlidingWindow,
    ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                       ::testing::Values(ModelCase{family("mistral_sliding_window"),
                                                   TensorType::f32},
                                         ModelCase{family("phi3"), TensorType::q8_0})),
    backend_case_name);

// Windows against contexts many times their size: a 256-token prompt in pieces of 100, 100 and
// 56, then 40 decode steps, against the reference (windows of 12 and 40: inside one block and
// across three).
struct LongContext {
  const char* name;
  const char* architecture;
  const char* rope_scaling;
  int64_t layers;
  int64_t window;
  float weight_scale;
};

void PrintTo(const LongContext& c, std::ostream* out) {
  *out << c.name;
}

class LongContexts : public ::testing::TestWithParam<std::tuple<std::string, LongContext>> {
 protected:
  void SetUp() override { skip_unavailable(std::get<0>(GetParam())); }
};

TEST_P(LongContexts, WindowsFollowTheReferenceFarBeyondTheirSize) {
  const auto& [backend, long_context] = GetParam();
  ModelShape shape;
  shape.architecture = long_context.architecture;
  shape.rope_scaling = long_context.rope_scaling;
  shape.layers = long_context.layers;
  shape.sliding_window = long_context.window;
  shape.weight_scale = long_context.weight_scale;
  shape.dim = 64;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.ffn = 96;
  shape.context = 512;
  const std::string path = testing::temp_model(shape);
  StepSession session(backend, path, KvType::f32);
  const int64_t vocabulary = session.vocabulary();
  const std::vector<TokenId> prompt = spread_tokens(256, 31, vocabulary);
  const std::vector<TokenId> decode = spread_tokens(40, 32, vocabulary);
  ArchitectureReference reference(path);
  std::vector<double> expected;
  for (TokenId token : prompt)
    expected = reference.step(token);
  KvSequence sequence;
  session.step({{&sequence, {prompt.begin(), prompt.begin() + 100}, Want::nothing}});
  session.step({{&sequence, {prompt.begin() + 100, prompt.begin() + 200}, Want::nothing}});
  EXPECT_TRUE(follows_reference(session.last_row(sequence, {prompt.begin() + 200, prompt.end()}),
                                expected, 1e-4))
      << "after the prompt";
  for (size_t i = 0; i < decode.size(); ++i) {
    EXPECT_TRUE(
        follows_reference(session.last_row(sequence, {decode[i]}), reference.step(decode[i]), 1e-4))
        << "position " << sequence.length - 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Default, LongContexts,
    ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                       ::testing::Values(LongContext{"mistral", "llama", "none", 2, 40, 0.08f},
                                         LongContext{"gemma2", "gemma2", "none", 2, 12, 0.04f},
                                         LongContext{"gemma3", "gemma3", "linear", 6, 40, 0.04f},
                                         LongContext{"phi3", "phi3", "longrope", 2, 12, 0.08f})),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// ---------------------------------------------------------------------------------------------
// Mixture of experts

class MixtureOfExperts : public BackendCase {};

// Eight prompts in one step (48 tokens routed at once, every expert busy with tokens of several
// sequences), then four decode steps of all eight together, every row against each sequence's
// reference.
TEST_P(MixtureOfExperts, ManySequencesRoutedInOneStepEachFollowTheReference) {
  const std::string path = model_path(model_case());
  const double tolerance = reference_tolerance(model_case().type, KvType::f32);
  StepSession session(backend(), path, KvType::f32);
  ASSERT_GT(session.model().config().experts, 0);
  const int64_t vocabulary = session.vocabulary();
  constexpr size_t kSequences = 8;
  std::vector<std::unique_ptr<ArchitectureReference>> references;
  std::vector<KvSequence> sequences(kSequences);
  std::vector<StepPart> parts;
  for (size_t s = 0; s < kSequences; ++s) {
    references.push_back(std::make_unique<ArchitectureReference>(path));
    parts.push_back({&sequences[s], spread_tokens(6, 40 + s, vocabulary)});
  }
  for (int step = 0; step < 5; ++step) {
    auto results = session.step(parts);
    for (size_t s = 0; s < kSequences; ++s) {
      std::vector<double> expected;
      for (TokenId token : parts[s].tokens)
        expected = references[s]->step(token);
      EXPECT_TRUE(follows_reference(results[s].rows.at(0), expected, tolerance))
          << "sequence " << s << " at position " << sequences[s].length - 1;
      parts[s].tokens = spread_tokens(1, 100 * static_cast<uint64_t>(step) + s, vocabulary);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Default, MixtureOfExperts,
    ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                       ::testing::Values(ModelCase{family("mixtral"), TensorType::f16},
                                         ModelCase{family("qwen2moe"), TensorType::q8_0},
                                         ModelCase{family("qwen3moe"), TensorType::iq4_nl})),
    backend_case_name);

// ---------------------------------------------------------------------------------------------
// Drawn tokens

// Twins decode the same tokens in the same steps: one asks for its logits row, the others for
// tokens drawn as the test says. The host's sampling (sample_token, sampler.h) of the row, with
// the same parameters, random number, history and mask, is what each draw must give.
class Sampling : public BackendOnly {
 protected:
  struct Draw {
    SamplingParams params;
    float uniform = 0;
    std::vector<TokenId> history;
    std::vector<uint64_t> allowed;
  };

  void SetUp() override {
    BackendOnly::SetUp();
    if (IsSkipped()) return;
    session_ = std::make_unique<StepSession>(
        backend(), model_path({family("llama"), TensorType::f16}), KvType::f16, 64);
  }

  // Steps `rounds` times with one row-twin and one twin per draw; calls check(row, draw, token)
  // for every draw of every round.
  template <class Check>
  void draw_beside_the_row(const std::vector<Draw>& draws, int rounds, Check check) {
    const int64_t vocabulary = session_->vocabulary();
    std::vector<KvSequence> twins(draws.size() + 1);
    std::vector<TokenId> tokens = spread_tokens(7, 50, vocabulary);
    for (int round = 0; round < rounds; ++round) {
      std::vector<StepPart> parts = {{&twins[0], tokens, Want::logits}};
      for (size_t d = 0; d < draws.size(); ++d) {
        TokenDraw draw;
        draw.params = &draws[d].params;
        draw.uniform = draws[d].uniform;
        draw.history = draws[d].history;
        draw.allowed = draws[d].allowed;
        parts.push_back({&twins[d + 1], tokens, Want::token, draw});
      }
      auto results = session_->step(parts);
      for (size_t d = 0; d < draws.size(); ++d)
        check(results[0].rows.at(0), draws[d], results[d + 1].token);
      tokens = spread_tokens(1, 60 + static_cast<uint64_t>(round), vocabulary);
    }
    for (KvSequence& twin : twins)
      release(session_->allocator(), twin);
  }

  // The host's draw from `row` as `draw` says.
  static SampledToken host_sample(std::vector<float> row, const Draw& draw) {
    apply_allowed_tokens(draw.allowed, row);
    SamplingScratch scratch;
    return sample_token(draw.params, row, draw.history, draw.uniform, scratch);
  }

  void expect_host_draw(const std::vector<float>& row, const Draw& draw,
                        const SampledToken& token) {
    SampledToken host = host_sample(row, draw);
    if (expectations().bit_exact) {
      EXPECT_EQ(token.token, host.token) << "uniform " << draw.uniform;
      EXPECT_EQ(token.logprob, host.logprob);
      ASSERT_EQ(token.top.size(), host.top.size());
      for (size_t i = 0; i < host.top.size(); ++i) {
        EXPECT_EQ(token.top[i].token, host.top[i].token) << "alternative " << i;
        EXPECT_EQ(token.top[i].logprob, host.top[i].logprob) << "alternative " << i;
      }
      return;
    }
    // Elsewhere the logits differ in their last bits, so a draw near a boundary between two
    // tokens may land on either: it must be what the host draws for a random number within
    // 1e-3 of its own, and inside the mask.
    std::set<TokenId> near;
    for (float nudge : {-1e-3f, 0.0f, 1e-3f}) {
      Draw nudged = draw;
      nudged.uniform = std::clamp(draw.uniform + nudge, 0.0f, 0.99999f);
      near.insert(host_sample(row, nudged).token);
    }
    EXPECT_TRUE(near.count(token.token)) << "token " << token.token << ", uniform " << draw.uniform;
    if (token.token == host.token && (draw.params.logprobs || draw.params.top_logprobs > 0)) {
      EXPECT_NEAR(token.logprob, host.logprob, 1e-3);
    }
  }

  std::unique_ptr<StepSession> session_;
};

TEST_P(Sampling, GreedyTokensAreTheArgmaxOfTheReturnedLogits) {
  Draw plain, with_logprobs;
  plain.params.temperature = 0;
  with_logprobs.params.temperature = 0;
  with_logprobs.params.logprobs = true;
  with_logprobs.params.top_logprobs = 5;
  int checked = 0;
  draw_beside_the_row(
      {plain, with_logprobs}, 6,
      [&](const std::vector<float>& row, const Draw& draw, const SampledToken& token) {
        const auto best = std::max_element(row.begin(), row.end());  // the first of ties
        if (expectations().bit_exact) {
          EXPECT_EQ(token.token, best - row.begin());
        } else {
          EXPECT_GE(row[static_cast<size_t>(token.token)], *best - 1e-3 * std::fabs(*best));
        }
        if (draw.params.logprobs) {
          double sum = 0;
          for (float logit : row)
            sum += std::exp(static_cast<double>(logit) - *best);
          const double logprob = row[static_cast<size_t>(token.token)] - *best - std::log(sum);
          EXPECT_NEAR(token.logprob, logprob, 1e-4);
          ASSERT_EQ(token.top.size(), 5u);
          EXPECT_EQ(token.top[0].token, token.token);
        }
        expect_host_draw(row, draw, token);
        ++checked;
      });
  EXPECT_EQ(checked, 12);
}

TEST_P(Sampling, SeededDrawsEqualTheHostsSamplingOfTheReturnedLogits) {
  std::vector<Draw> draws;
  for (float uniform : {0.0f, 0.013f, 0.31f, 0.5f, 0.77f, 0.9999f}) {
    Draw plain;
    plain.params.temperature = 1.0f;
    plain.uniform = uniform;
    draws.push_back(plain);
    Draw shaped;
    shaped.params.temperature = 0.7f;
    shaped.params.top_k = 40;
    shaped.params.top_p = 0.9f;
    shaped.params.min_p = 0.02f;
    shaped.params.repetition_penalty = 1.3f;
    shaped.params.presence_penalty = 0.4f;
    shaped.params.frequency_penalty = 0.2f;
    shaped.params.logprobs = true;
    shaped.params.top_logprobs = 3;
    shaped.uniform = uniform;
    shaped.history = spread_tokens(12, 70, session_->vocabulary());
    draws.push_back(shaped);
  }
  std::set<TokenId> distinct;
  draw_beside_the_row(
      draws, 3, [&](const std::vector<float>& row, const Draw& draw, const SampledToken& token) {
        expect_host_draw(row, draw, token);
        distinct.insert(token.token);
      });
  EXPECT_GT(distinct.size(), 3u) << "the draws follow their random numbers";
}

// A mask that forbids the unconstrained favourite: greedy takes the best allowed token, draws at
// a high temperature stay inside the mask, log-probabilities are those of the constrained
// distribution.
TEST_P(Sampling, AConstraintsMaskIsHonoured) {
  const int64_t vocabulary = session_->vocabulary();
  // The favourite of the first round, found unconstrained.
  TokenId favourite = kNoToken;
  {
    Draw greedy;
    greedy.params.temperature = 0;
    draw_beside_the_row({greedy}, 1,
                        [&](const std::vector<float>&, const Draw&, const SampledToken& token) {
                          favourite = token.token;
                        });
  }
  ASSERT_NE(favourite, kNoToken);
  std::vector<uint64_t> allowed(static_cast<size_t>((vocabulary + 63) / 64), 0);
  const std::vector<TokenId> permitted = spread_tokens(40, 80, vocabulary);
  for (TokenId token : permitted) {
    if (token != favourite) allowed[static_cast<size_t>(token) / 64] |= uint64_t{1} << (token % 64);
  }
  std::vector<Draw> draws;
  Draw greedy;
  greedy.params.temperature = 0;
  greedy.params.logprobs = true;
  greedy.params.top_logprobs = 4;
  greedy.allowed = allowed;
  draws.push_back(greedy);
  for (float uniform : {0.05f, 0.35f, 0.65f, 0.95f}) {
    Draw hot;
    hot.params.temperature = 3.0f;
    hot.uniform = uniform;
    hot.allowed = allowed;
    draws.push_back(hot);
  }
  auto is_allowed = [&](TokenId token) {
    return (allowed[static_cast<size_t>(token) / 64] >> (token % 64)) & 1u;
  };
  draw_beside_the_row(
      draws, 1, [&](const std::vector<float>& row, const Draw& draw, const SampledToken& token) {
        EXPECT_TRUE(is_allowed(token.token)) << "token " << token.token;
        for (const TokenLogprob& alternative : token.top)
          EXPECT_TRUE(is_allowed(alternative.token)) << alternative.token;
        expect_host_draw(row, draw, token);
      });
}

INSTANTIATE_TEST_SUITE_P(Backends, Sampling, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------------------------
// The contract's errors, and what a backend says about itself

class Contract : public BackendOnly {};

TEST_P(Contract, InfoNamesTheBackendItsKvTypesAndItsMemory) {
  const std::string path = model_path({family("llama"), TensorType::q8_0});
  auto model = Model::load(path);
  auto backend_object = make_backend(backend(), model);
  BackendInfo info = backend_object->info();
  EXPECT_EQ(info.name, backend());
  EXPECT_FALSE(info.device.empty());
  EXPECT_FALSE(info.kv_types.empty());
  EXPECT_GT(info.memory.weight_bytes, 0u);
  EXPECT_EQ(&backend_object->model(), model.get());
  const KvPoolShape pool{8, 16, info.kv_types.front()};
  backend_object->allocate_kv_pool(pool);
  EXPECT_EQ(backend_object->info().memory.kv_pool_bytes,
            8 * kv_block_bytes(model->config(), 16, pool.type));
}

// A KV block's bytes go out and come back unchanged (the prefix cache saved across restarts
// depends on it), and only a block of the pool, whole, is accepted.
TEST_P(Contract, AKvBlockReadsBackAsWritten) {
  auto model = Model::load(model_path({family("llama"), TensorType::q8_0}));
  auto backend_object = make_backend(backend(), model);
  EXPECT_THROW(backend_object->kv_block_bytes(), std::logic_error) << "before the pool";
  const KvType type = backend_object->info().kv_types.front();
  backend_object->allocate_kv_pool({4, 16, type});
  const size_t bytes = backend_object->kv_block_bytes();
  EXPECT_EQ(bytes, kv_block_bytes(model->config(), 16, type));
  std::vector<std::byte> written(bytes), read(bytes), other(bytes);
  for (size_t i = 0; i < bytes; ++i)
    written[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  backend_object->write_kv_block(2, written);
  backend_object->read_kv_block(2, read);
  EXPECT_EQ(read, written);
  backend_object->read_kv_block(1, other);
  EXPECT_NE(other, written) << "block 2's bytes must not land in block 1";
  EXPECT_THROW(backend_object->write_kv_block(4, written), std::out_of_range);
  EXPECT_THROW(backend_object->read_kv_block(-1, read), std::out_of_range);
  std::vector<std::byte> short_buffer(bytes - 1);
  EXPECT_THROW(backend_object->read_kv_block(0, short_buffer), std::out_of_range);
}

TEST_P(Contract, APoolItCannotHoldIsRefused) {
  auto model = Model::load(model_path({family("llama"), TensorType::f32}));
  EXPECT_THROW(make_backend(backend(), model)->allocate_kv_pool({4, 15, KvType::f16}),
               std::invalid_argument);
  EXPECT_THROW(make_backend(backend(), model)->allocate_kv_pool({0, 16, KvType::f16}),
               std::invalid_argument);
}

// Refused steps: a token outside the vocabulary, a chunk past the context, a block table that
// does not cover the chunk, a step before the pool; and the backend computes correctly after.
TEST_P(Contract, BadStepsAreRefusedAndTheBackendGoesOn) {
  const std::string path = model_path({family("llama"), TensorType::f32});
  auto model = Model::load(path);
  StepOutput out;
  {
    auto fresh = make_backend(backend(), model);
    const std::vector<TokenId> tokens = {5};
    const std::vector<BlockId> blocks = {0};
    StepChunk chunk{tokens, 0, blocks, Want::logits, {}};
    EXPECT_THROW(fresh->forward({&chunk, 1}, out), std::logic_error) << "before the pool";
  }
  StepSession session(backend(), path, KvType::f16, 32);
  const int64_t vocabulary = session.vocabulary();
  const int64_t context = session.model().config().context;
  KvSequence sequence;
  EXPECT_THROW(session.step({{&sequence, {3, static_cast<TokenId>(vocabulary)}}}),
               std::out_of_range);
  EXPECT_THROW(session.step({{&sequence, {3, -1}}}), std::out_of_range);

  const std::vector<TokenId> three = {3, 4, 5};
  std::vector<BlockId> table;
  for (int64_t b = 0; b < (context + 16) / 16; ++b)
    table.push_back(static_cast<BlockId>(b % 32));
  StepChunk past{three, context - 2, table, Want::logits, {}};
  EXPECT_THROW(session.backend().forward({&past, 1}, out), std::length_error);
  const std::vector<TokenId> twenty = spread_tokens(20, 90, vocabulary);
  const std::vector<BlockId> one_block = {0};
  StepChunk uncovered{twenty, 0, one_block, Want::logits, {}};
  EXPECT_THROW(session.backend().forward({&uncovered, 1}, out), std::logic_error);

  KvSequence after, control;
  const std::vector<TokenId> prompt = spread_tokens(20, 91, vocabulary);
  std::vector<float> row = session.last_row(after, prompt);
  StepSession clean(backend(), path, KvType::f16, 32);
  EXPECT_TRUE(same_row(clean.last_row(control, prompt), row, expectations(), 1e-3));
}

INSTANTIATE_TEST_SUITE_P(Backends, Contract, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------------------------
// Cancellation, through the scheduler over the backend

// Records what the scheduler tells one sequence; cancels it at its n-th token, when it is
// admitted, or when the test says.
class Recorder final : public SequenceObserver {
 public:
  explicit Recorder(int cancel_at_token = -1, bool cancel_on_admission = false)
      : cancel_at_token_(cancel_at_token), cancel_on_admission_(cancel_on_admission) {}

  void on_token(const SampledToken& token, bool, const SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    tokens_.push_back(token.token);
    if (static_cast<int>(tokens_.size()) == cancel_at_token_) cancelled_ = true;
  }
  void on_finish(FinishCause, const SequenceUsage&) override { end("finished"); }
  void on_error(const std::string& message) override { end("error: " + message); }
  void on_dropped() override { end("dropped"); }
  void on_admitted() override {
    std::lock_guard lock(mutex_);
    admitted_ = true;
    if (cancel_on_admission_) cancelled_ = true;
  }
  bool cancelled() const override { return cancelled_.load(); }

  // Cancels now; returns how many tokens had come by then.
  size_t cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    return tokens_.size();
  }
  // How it ended ("finished", "dropped", "error: ..."), once it has (or "" after a minute).
  std::string wait() {
    std::unique_lock lock(mutex_);
    ended_.wait_for(lock, std::chrono::seconds(60), [&] { return !outcome_.empty(); });
    return outcome_;
  }
  std::vector<TokenId> tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  bool admitted() const {
    std::lock_guard lock(mutex_);
    return admitted_;
  }

 private:
  void end(const std::string& outcome) {
    std::lock_guard lock(mutex_);
    outcome_ = outcome;
    ended_.notify_all();
  }
  const int cancel_at_token_;
  const bool cancel_on_admission_;
  mutable std::mutex mutex_;
  std::condition_variable ended_;
  std::vector<TokenId> tokens_;
  std::string outcome_;
  bool admitted_ = false;
  std::atomic<bool> cancelled_{false};
};

class Cancellation : public BackendOnly {
 protected:
  void SetUp() override {
    BackendOnly::SetUp();
    if (IsSkipped()) return;
    model_ = Model::load(model_path({family("llama"), TensorType::q8_0}));
  }
  SchedulerConfig config() const {
    SchedulerConfig config;
    config.backend = backend();
    config.threads = 2;
    config.prefix_cache = false;  // every block a sequence held comes back to the free list
    config.kv_blocks = 64;
    return config;
  }
  SequenceSpec greedy(uint64_t seed, int64_t prompt_tokens, int64_t max_tokens) const {
    SequenceSpec spec;
    spec.prompt = spread_tokens(prompt_tokens, seed, model_->config().vocabulary);
    spec.sampling.temperature = 0;
    spec.max_tokens = max_tokens;
    spec.ignore_eos = true;
    return spec;
  }
  // The tokens `spec` gets alone on a scheduler of its own.
  std::vector<TokenId> alone(const SequenceSpec& spec) const {
    Scheduler scheduler(model_, config());
    auto recorder = std::make_shared<Recorder>();
    EXPECT_FALSE(scheduler.submit(spec, recorder));
    EXPECT_EQ(recorder->wait(), "finished");
    return recorder->tokens();
  }
  static void wait_until_idle(const Scheduler& scheduler) {
    for (int i = 0; i < 5000; ++i) {
      SchedulerStats stats = scheduler.stats();
      if (stats.running == 0 && stats.waiting == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    FAIL() << "the scheduler did not go idle";
  }
  static void expect_every_block_free(const Scheduler& scheduler) {
    SchedulerStats stats = scheduler.stats();
    EXPECT_EQ(stats.free_blocks, stats.total_blocks);
    EXPECT_EQ(stats.sequence_blocks, 0);
  }

  std::shared_ptr<const Model> model_;
};

// Cancelled as their 1st, 2nd, 3rd and 5th tokens arrive: each leaves at the next step with
// exactly those tokens, and a neighbour that is not cancelled gets what it gets alone.
TEST_P(Cancellation, ASequenceCancelledAtATokenLeavesAtTheNextStepAndItsBlocksReturn) {
  Scheduler scheduler(model_, config());
  const std::vector<int> cancel_at = {1, 2, 3, 5};
  std::vector<std::shared_ptr<Recorder>> recorders;
  for (size_t i = 0; i < cancel_at.size(); ++i) {
    recorders.push_back(std::make_shared<Recorder>(cancel_at[i]));
    ASSERT_FALSE(
        scheduler.submit(greedy(200 + i, 20 + 7 * static_cast<int64_t>(i), 100), recorders.back()));
  }
  const SequenceSpec neighbour = greedy(300, 25, 12);
  auto kept = std::make_shared<Recorder>();
  ASSERT_FALSE(scheduler.submit(neighbour, kept));
  for (size_t i = 0; i < cancel_at.size(); ++i) {
    EXPECT_EQ(recorders[i]->wait(), "dropped");
    EXPECT_EQ(recorders[i]->tokens().size(), static_cast<size_t>(cancel_at[i]))
        << "sequence " << i << " got tokens after the step that saw it cancelled";
  }
  EXPECT_EQ(kept->wait(), "finished");
  wait_until_idle(scheduler);
  expect_every_block_free(scheduler);
  EXPECT_EQ(kept->tokens(), alone(neighbour));
}

// Cancelled while its first step is planned (mid-step): that step's piece of its prompt runs,
// and it leaves at the next one, long before its 200-token prompt is done.
TEST_P(Cancellation, CancelledDuringItsFirstStepItLeavesBeforeItsPromptIsDone) {
  SchedulerConfig chunked = config();
  chunked.max_batched_tokens = 16;
  Scheduler scheduler(model_, chunked);
  auto recorder = std::make_shared<Recorder>(-1, true);
  ASSERT_FALSE(scheduler.submit(greedy(400, 200, 4), recorder));
  EXPECT_EQ(recorder->wait(), "dropped");
  EXPECT_TRUE(recorder->tokens().empty());
  wait_until_idle(scheduler);
  EXPECT_LE(scheduler.stats().prompt_tokens_computed, 16) << "one step's piece at most";
  expect_every_block_free(scheduler);
}

// Cancelled from another thread while steps run: at most the token of the step under way comes
// after, and the sequence's blocks return.
TEST_P(Cancellation, CancelledFromAnotherThreadMidGenerationLeavesWithinOneStep) {
  Scheduler scheduler(model_, config());
  auto recorder = std::make_shared<Recorder>();
  ASSERT_FALSE(scheduler.submit(greedy(500, 30, 200), recorder));
  while (recorder->tokens().size() < 3)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  const size_t at_cancel = recorder->cancel();
  EXPECT_EQ(recorder->wait(), "dropped");
  EXPECT_LE(recorder->tokens().size(), at_cancel + 1);
  wait_until_idle(scheduler);
  expect_every_block_free(scheduler);
}

// Cancelled while it waits for a place (max_seqs 1, another sequence running): it never runs,
// and the running one is undisturbed.
TEST_P(Cancellation, CancelledWhileQueuedItNeverRuns) {
  SchedulerConfig one_at_a_time = config();
  one_at_a_time.max_seqs = 1;
  Scheduler scheduler(model_, one_at_a_time);
  const SequenceSpec first = greedy(600, 20, 24);
  auto running = std::make_shared<Recorder>();
  auto queued = std::make_shared<Recorder>();
  ASSERT_FALSE(scheduler.submit(first, running));
  ASSERT_FALSE(scheduler.submit(greedy(601, 20, 24), queued));
  queued->cancel();
  EXPECT_EQ(queued->wait(), "dropped");
  EXPECT_FALSE(queued->admitted());
  EXPECT_TRUE(queued->tokens().empty());
  EXPECT_EQ(running->wait(), "finished");
  wait_until_idle(scheduler);
  expect_every_block_free(scheduler);
  EXPECT_EQ(running->tokens(), alone(first));
}

INSTANTIATE_TEST_SUITE_P(Backends, Cancellation, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------------------------
// The suite's own coverage

// A family make-model writes or a type the kernels compute with that the default suite leaves
// out fails here, so neither can be added without its conformance cases.
TEST(BackendConformanceCoverage, EveryArchitectureAndWeightTypeIsInTheDefaultSuite) {
  std::vector<ModelCase> cases = default_cases();
  std::stringstream architectures(writable_architectures());
  std::string architecture;
  while (std::getline(architectures, architecture, ',')) {
    architecture.erase(0, architecture.find_first_not_of(' '));
    // Encoders never run on a generation backend: EmbeddingModel runs them, and
    // embedding_model_test and llama_cpp_embeddings check them against llama.cpp.
    if (architecture == "bert" || architecture == "nomic-bert") continue;
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [&](const ModelCase& c) {
      return c.family.architecture == architecture;
    })) << architecture;
  }
  for (TensorType type : weight_types()) {
    int families_with_it = 0;
    for (const ModelCase& c : cases)
      families_with_it += c.type == type;
    EXPECT_GE(families_with_it, 2) << kernels::to_string(type);
  }
  const std::vector<std::string> names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end())
      << "every build has the CPU backend";
}

}  // namespace
}  // namespace chatflow::engine
