// The prefix cache across restarts: blocks saved when a scheduler stops are reused by the next one
// for the same model (the answer unchanged, the prefix not computed again, tenants still apart);
// a file from another model or KV type, a damaged or a cut file is refused with its reason and
// never used.
#include "framework/engine/prefix_cache_file.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "framework/engine/scheduler.h"
#include "support/engine_answers.h"
#include "support/slow_mask.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

using Answer = testing::RecordedAnswer;

std::shared_ptr<const Model> model_of(int ffn) {
  ModelShape shape;
  shape.ffn = ffn;
  shape.type = kernels::TensorType::q8_0;
  return Model::load(testing::temp_model(shape));
}

const char kPrompt[] =
    "a long system prompt that every request of this deployment starts with, so that its blocks "
    "are worth keeping when the server restarts, and a question at the end";

SequenceSpec spec_for(const Model& model, const std::string& tenant) {
  SequenceSpec spec;
  spec.prompt = model.tokenizer().encode(kPrompt, true);
  spec.sampling.temperature = 0;
  spec.max_tokens = 8;
  spec.ignore_eos = true;
  spec.cache_salt = tenant;
  return spec;
}

// Runs `spec` on `scheduler`; its answer.
std::shared_ptr<Answer> run(Scheduler& scheduler, const SequenceSpec& spec) {
  auto answer = std::make_shared<Answer>();
  EXPECT_EQ(scheduler.submit(spec, answer), std::nullopt);
  EXPECT_TRUE(answer->wait());
  EXPECT_EQ(answer->error(), "");
  return answer;
}

struct Persisted {
  SchedulerConfig config;
  std::vector<std::string> lines;
};

std::shared_ptr<Persisted> persisted(const std::string& name) {
  auto persisted = std::make_shared<Persisted>();
  persisted->config.persist_path = testing::fresh_path(name);
  // A plain pointer: the report lives in the object it writes to (a shared_ptr would be a cycle).
  persisted->config.persist_report = [lines = persisted.get()](const std::string& line) {
    lines->lines.push_back(line);
  };
  return persisted;
}

bool said(const Persisted& persisted, const std::string& text) {
  for (const auto& line : persisted.lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

std::string all(const Persisted& persisted) {
  std::string text;
  for (const auto& line : persisted.lines)
    text += line + "\n";
  return text;
}

// Fills a scheduler's prefix cache with kPrompt's blocks for tenant "a" and stops it (saving).
std::vector<TokenId> save_one(const std::shared_ptr<const Model>& model, Persisted& persisted) {
  Scheduler scheduler(model, persisted.config);
  return run(scheduler, spec_for(*model, "a"))->tokens();
}

TEST(PrefixCacheFile, BlocksSavedAtStopAreReusedAfterARestart) {
  auto model = model_of(96);
  auto files = persisted("prefix-cache-reuse.kv");
  const std::vector<TokenId> first = save_one(model, *files);
  EXPECT_TRUE(said(*files, "no saved prefix cache at")) << all(*files);
  ASSERT_TRUE(said(*files, "saved ")) << all(*files);
  ASSERT_TRUE(std::filesystem::exists(files->config.persist_path));

  Scheduler restarted(model, files->config);
  ASSERT_TRUE(said(*files, "restored ")) << all(*files);
  const int64_t prompt = static_cast<int64_t>(spec_for(*model, "a").prompt.size());
  const int64_t full_blocks = (prompt - 1) / 16;
  ASSERT_GE(full_blocks, 2);
  EXPECT_GE(restarted.stats().cached_blocks, full_blocks);
  auto again = run(restarted, spec_for(*model, "a"));
  EXPECT_EQ(again->tokens(), first) << "the same answer from the restored keys and values";
  EXPECT_EQ(again->usage().cached_tokens, full_blocks * 16);
  auto other_tenant = run(restarted, spec_for(*model, "b"));
  EXPECT_EQ(other_tenant->usage().cached_tokens, 0) << "tenants share nothing, restored or not";
  EXPECT_EQ(other_tenant->tokens(), first);
}

TEST(PrefixCacheFile, AFileOfAnotherModelOrKvTypeIsRefusedAndNotUsed) {
  auto model = model_of(96);
  auto files = persisted("prefix-cache-other.kv");
  const std::vector<TokenId> first = save_one(model, *files);

  auto other_model = model_of(128);
  {
    Scheduler scheduler(other_model, files->config);
    EXPECT_TRUE(said(*files, "is not used: it was written for another model file")) << all(*files);
    EXPECT_EQ(scheduler.stats().cached_blocks, 0);
  }
  // That scheduler saved its own (empty) cache over the file on stopping; write ours again.
  save_one(model, *files);
  SchedulerConfig f32 = files->config;
  f32.kv_type = kernels::KvType::f32;
  {
    Scheduler scheduler(model, f32);
    EXPECT_TRUE(said(*files, "is not used: it holds another KV cache type")) << all(*files);
    EXPECT_EQ(scheduler.stats().cached_blocks, 0);
    EXPECT_EQ(run(scheduler, spec_for(*model, "a"))->usage().cached_tokens, 0);
  }
}

TEST(PrefixCacheFile, ADamagedOrCutFileIsRefusedAndNotUsed) {
  auto model = model_of(96);
  auto files = persisted("prefix-cache-damaged.kv");
  const std::vector<TokenId> first = save_one(model, *files);
  const std::string path = files->config.persist_path;
  const auto size = std::filesystem::file_size(path);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    file.put('\x5a');
  }
  {
    Scheduler scheduler(model, files->config);
    EXPECT_TRUE(said(*files, "its digest does not match: the file is damaged")) << all(*files);
    EXPECT_EQ(scheduler.stats().cached_blocks, 0);
    auto answer = run(scheduler, spec_for(*model, "a"));
    EXPECT_EQ(answer->usage().cached_tokens, 0);
    EXPECT_EQ(answer->tokens(), first);
  }
  save_one(model, *files);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  Scheduler scheduler(model, files->config);
  EXPECT_TRUE(said(*files, "cut short")) << all(*files);
  EXPECT_EQ(scheduler.stats().cached_blocks, 0);
}

TEST(PrefixCacheFile, MaxBytesKeepsTheMostRecentlyUsedBlocks) {
  auto model = model_of(96);
  auto files = persisted("prefix-cache-small.kv");
  const std::string path = files->config.persist_path;
  const int64_t full_blocks = (static_cast<int64_t>(spec_for(*model, "a").prompt.size()) - 1) / 16;
  auto save_both = [&](uint64_t max_bytes) {
    SchedulerConfig config = files->config;
    config.persist_max_bytes = max_bytes;
    std::filesystem::remove(path);
    Scheduler scheduler(model, config);
    run(scheduler, spec_for(*model, "a"));
    run(scheduler, spec_for(*model, "b"));  // used last: kept first
  };
  save_both(uint64_t{1} << 30);
  const auto both = std::filesystem::file_size(path);
  save_both(1);
  EXPECT_TRUE(said(*files, "saved 0 blocks")) << all(*files);
  const auto none = std::filesystem::file_size(path);
  const auto per_block = (both - none) / static_cast<uint64_t>(2 * full_blocks);
  // Room for tenant b's blocks alone (the writer reserves 128 bytes and the backend's name).
  save_both(128 + 3 + per_block * static_cast<uint64_t>(full_blocks));
  EXPECT_TRUE(said(*files, "saved " + std::to_string(full_blocks) + " blocks")) << all(*files);
  Scheduler scheduler(model, files->config);
  EXPECT_EQ(run(scheduler, spec_for(*model, "b"))->usage().cached_tokens, full_blocks * 16)
      << all(*files);
  EXPECT_EQ(run(scheduler, spec_for(*model, "a"))->usage().cached_tokens, 0);
}

// A q8_0 KV cache's blocks come back as they were saved (the same answer, the prefix not computed
// again), and a file of f16 blocks is refused by a q8_0 cache and the other way round: its blocks
// hold other bytes for the same positions (and another size).
TEST(PrefixCacheFile, AQ8_0CacheRestoresItsOwnFileAndRefusesAnF16One) {
  ModelShape shape;
  shape.dim = 128;  // four heads of 32 values: whole q8_0 blocks
  shape.ffn = 96;
  shape.type = kernels::TensorType::q8_0;
  auto model = Model::load(testing::temp_model(shape));
  auto files = persisted("prefix-cache-q8.kv");
  SchedulerConfig q8 = files->config;
  q8.kv_type = kernels::KvType::q8_0;
  SchedulerConfig f16 = files->config;
  f16.kv_type = kernels::KvType::f16;
  const int64_t full_blocks = (static_cast<int64_t>(spec_for(*model, "a").prompt.size()) - 1) / 16;
  std::vector<TokenId> first;
  {
    Scheduler scheduler(model, q8);
    first = run(scheduler, spec_for(*model, "a"))->tokens();
  }
  {
    Scheduler restarted(model, q8);
    ASSERT_TRUE(said(*files, "restored ")) << all(*files);
    auto again = run(restarted, spec_for(*model, "a"));
    EXPECT_EQ(again->usage().cached_tokens, full_blocks * 16);
    EXPECT_EQ(again->tokens(), first);
  }
  {
    Scheduler scheduler(model, f16);
    EXPECT_TRUE(said(*files, "is not used: it holds another KV cache type")) << all(*files);
    EXPECT_EQ(scheduler.stats().cached_blocks, 0);
    EXPECT_EQ(run(scheduler, spec_for(*model, "a"))->usage().cached_tokens, 0);
  }
  // That scheduler saved its f16 blocks on stopping: a q8_0 cache refuses them.
  files->lines.clear();
  Scheduler scheduler(model, q8);
  EXPECT_TRUE(said(*files, "is not used: it holds another KV cache type")) << all(*files);
  EXPECT_EQ(scheduler.stats().cached_blocks, 0);
}

// The prefix cache's blocks once no sequence runs (the stats are refreshed after each step).
int64_t idle_cached_blocks(const Scheduler& scheduler) {
  for (int i = 0; i < 5000 && scheduler.stats().running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return scheduler.stats().cached_blocks;
}

// The admin routes' calls, with another sequence in flight (held by its first mask, so it is
// certainly neither done nor gone): a save between two steps writes what a stop would; a clear
// forgets every block and removes the file, and the sequence in flight offers the cache nothing
// more (its prompt is what the clear was meant to forget); its answer is unchanged by either.
TEST(PrefixCacheFile, SavedAndClearedOnDemandWhileAnotherSequenceIsInFlight) {
  auto model = model_of(96);
  auto held_spec = [&](std::shared_ptr<testing::SlowMask::Gate> gate) {
    SequenceSpec spec = spec_for(*model, "c");
    spec.max_tokens = 40;  // past two more block boundaries
    spec.constraint = std::make_shared<testing::SlowMask>(std::move(gate));
    return spec;
  };
  std::vector<TokenId> alone;
  int64_t blocks_of_a = 0;
  {
    auto open = std::make_shared<testing::SlowMask::Gate>();
    open->set(&testing::SlowMask::Gate::open);
    Scheduler quiet(model, SchedulerConfig{});
    alone = run(quiet, held_spec(open))->tokens();
    Scheduler quiet_a(model, SchedulerConfig{});
    run(quiet_a, spec_for(*model, "a"));
    blocks_of_a = idle_cached_blocks(quiet_a);
  }
  auto files = persisted("prefix-cache-on-demand.kv");
  const std::string path = files->config.persist_path;
  Scheduler scheduler(model, files->config);
  auto gate = std::make_shared<testing::SlowMask::Gate>();
  auto held = std::make_shared<Answer>();
  ASSERT_EQ(scheduler.submit(held_spec(gate), held), std::nullopt);
  ASSERT_TRUE(gate->wait_for([&] { return gate->started; }));
  const std::vector<TokenId> first = run(scheduler, spec_for(*model, "a"))->tokens();
  const int64_t full_blocks = (static_cast<int64_t>(spec_for(*model, "a").prompt.size()) - 1) / 16;

  PrefixCacheSaved saved = scheduler.save_prefix_cache_now();
  EXPECT_FALSE(held->done());
  EXPECT_GE(saved.blocks, full_blocks);
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(saved.bytes, std::filesystem::file_size(path));
  {
    SchedulerConfig reading;
    reading.persist_path = path;
    Scheduler restarted(model, reading);
    auto again = run(restarted, spec_for(*model, "a"));
    EXPECT_EQ(again->usage().cached_tokens, full_blocks * 16) << all(*files);
    EXPECT_EQ(again->tokens(), first);
  }

  Scheduler::PrefixCacheCleared cleared = scheduler.clear_prefix_cache();
  EXPECT_FALSE(held->done());
  EXPECT_GE(cleared.blocks, full_blocks);
  EXPECT_TRUE(cleared.file_removed);
  EXPECT_FALSE(std::filesystem::exists(path));
  auto cold = run(scheduler, spec_for(*model, "a"));
  EXPECT_EQ(cold->usage().cached_tokens, 0) << "nothing cached survives a clear";
  EXPECT_EQ(cold->tokens(), first);

  gate->set(&testing::SlowMask::Gate::open);
  ASSERT_TRUE(held->wait());
  EXPECT_EQ(held->error(), "");
  EXPECT_EQ(held->tokens(), alone) << "the save and the clear left the held answer alone";
  EXPECT_EQ(idle_cached_blocks(scheduler), blocks_of_a)
      << "only the answer after the clear is cached, none of the held one's later blocks";
}

TEST(PrefixCacheFile, SavingOnDemandWithoutAFileSaysWhichSettingIsMissing) {
  auto model = model_of(96);
  Scheduler scheduler(model, SchedulerConfig{});
  try {
    scheduler.save_prefix_cache_now();
    FAIL() << "saved without a file";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("kv_cache.persist.path"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(scheduler.clear_prefix_cache().file_removed);
}

}  // namespace
}  // namespace chatflow::engine
