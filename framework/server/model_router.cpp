#include "framework/server/model_router.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "framework/server/exported_metrics.h"
#include "framework/server/http_response.h"

namespace chatflow::server {

std::string_view to_string(ModelState state) {
  switch (state) {
    case ModelState::unloaded:
      return "unloaded";
    case ModelState::loading:
      return "loading";
    case ModelState::loaded:
      return "loaded";
    case ModelState::failed:
      return "failed";
  }
  return "unloaded";
}

namespace {

// Nothing but the router holds it, and no request runs in it.
bool idle(const std::shared_ptr<const ServedPipeline>& served) {
  return served.use_count() == 1 && (!served->pipeline || served->pipeline->active_requests() == 0);
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace

ModelRouter::ModelRouter(ModelsSettings settings, Loader loader)
    : settings_(std::move(settings)), loader_(std::move(loader)) {
  slots_.resize(settings_.entries.size());
  for (size_t i = 0; i < settings_.entries.size(); ++i) {
    const ModelEntry& entry = settings_.entries[i];
    slots_[i].entry = &entry;
    index_.emplace(entry.name, i);
    for (const auto& alias : entry.aliases)
      index_.emplace(alias, i);
    std::error_code error;
    if (!entry.model.empty()) {
      auto size = std::filesystem::file_size(entry.model, error);
      if (!error) slots_[i].estimated_bytes = static_cast<int64_t>(size);
    }
  }
  expiry_ = std::thread([this] { expire_waiters(); });
}

ModelRouter::~ModelRouter() {
  stop_waiting();
  std::vector<LoadThread> loads;
  {
    std::lock_guard lock(mutex_);
    loads.swap(loads_);
  }
  for (auto& load : loads)
    load.thread.join();
  expiry_.join();
}

void ModelRouter::stop_waiting() {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& slot : slots_) {
      fail_waiters(slot,
                   make_error(503, "server_error", "the server is shutting down; retry elsewhere",
                              "model_unavailable"),
                   answers);
    }
  }
  wake_.notify_all();
  answer(answers);
}

const ModelEntry* ModelRouter::find(const std::string& name) const {
  auto found = index_.find(name);
  return found == index_.end() ? nullptr : slots_[found->second].entry;
}

std::vector<std::string> ModelRouter::names() const {
  std::vector<std::string> all;
  for (const auto& entry : settings_.entries) {
    all.push_back(entry.name);
    all.insert(all.end(), entry.aliases.begin(), entry.aliases.end());
  }
  return all;
}

void ModelRouter::answer(Answers& answers) {
  for (auto& [ready, served, error] : answers)
    ready(std::move(served), std::move(error));
  answers.clear();
}

void ModelRouter::count(const MetricDefinition& metric, const LabelValues& labels, double value) {
  if (metrics_) metrics_->counter(metric, labels).add(value);
}

void ModelRouter::acquire(const std::string& name, Ready ready) {
  auto found = index_.find(name);
  if (found == index_.end()) {
    return ready(nullptr,
                 make_error(404, "invalid_request_error", "The model '" + name + "' does not exist",
                            "model_not_found", "model"));
  }
  size_t index = found->second;
  std::unique_lock lock(mutex_);
  Slot& slot = slots_[index];
  const std::string& model = slot.entry->name;
  if (stopping_) {
    lock.unlock();
    return ready(nullptr, make_error(503, "server_error", "the server is shutting down",
                                     "model_unavailable"));
  }
  if (slot.state == ModelState::loaded) {
    slot.last_used = Clock::now();
    auto served = slot.served;
    lock.unlock();
    return ready(std::move(served), std::nullopt);
  }
  if (static_cast<int64_t>(slot.waiters.size()) >= settings_.max_waiters) {
    lock.unlock();
    std::string message = std::to_string(settings_.max_waiters) +
                          " requests already wait for the model '" + model +
                          "' to load (models_max_waiters); retry shortly";
    return ready(nullptr, make_error(503, "server_error", message, "too_many_waiting", "model"));
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(settings_.load_timeout_s));
  slot.waiters.push_back({std::move(ready), deadline});
  wake_.notify_all();  // the expiry thread has a new deadline
  if (slot.state == ModelState::loading) return;
  slot.state = ModelState::loading;
  slot.failure.clear();
  // Finished loads' threads are joined here, so they do not pile up.
  std::erase_if(loads_, [](LoadThread& load) {
    if (!load.done->load()) return false;
    load.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  loads_.push_back({std::thread([this, index, done] {
                      load(index);
                      done->store(true);
                    }),
                    done});
}

bool ModelRouter::fits(size_t index) const {
  int64_t occupied = 0;
  int64_t memory = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (i == index) continue;
    const Slot& slot = slots_[i];
    if (slot.state == ModelState::loaded) {
      ++occupied;
      memory += slot.memory_bytes;
    } else if (slot.state == ModelState::loading && slot.room_reserved) {
      ++occupied;
      memory += slot.estimated_bytes;
    }
  }
  // One model alone always loads, whatever its size: refusing it would serve nothing.
  if (occupied == 0) return true;
  if (settings_.max_loaded > 0 && occupied + 1 > settings_.max_loaded) return false;
  int64_t budget = settings_.memory_budget_mib << 20;
  return budget <= 0 || memory + slots_[index].estimated_bytes <= budget;
}

bool ModelRouter::make_room(size_t index,
                            std::vector<std::shared_ptr<const ServedPipeline>>& dropped) {
  while (!fits(index)) {
    Slot* oldest = nullptr;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (i == index || slot.state != ModelState::loaded || !idle(slot.served)) continue;
      if (!oldest || slot.last_used < oldest->last_used) oldest = &slot;
    }
    if (!oldest) return false;
    unload(*oldest, dropped,
           "least recently used, to make room for '" + slots_[index].entry->name + "'");
  }
  slots_[index].room_reserved = true;
  return true;
}

void ModelRouter::trim(size_t keep, std::vector<std::shared_ptr<const ServedPipeline>>& dropped) {
  int64_t budget = settings_.memory_budget_mib << 20;
  while (true) {
    int64_t loaded = 0;
    int64_t memory = 0;
    Slot* oldest = nullptr;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.state != ModelState::loaded) continue;
      ++loaded;
      memory += slot.memory_bytes;
      if (i == keep || !idle(slot.served)) continue;
      if (!oldest || slot.last_used < oldest->last_used) oldest = &slot;
    }
    bool over = (settings_.max_loaded > 0 && loaded > settings_.max_loaded) ||
                (budget > 0 && memory > budget);
    if (!over || !oldest) return;
    unload(*oldest, dropped, "least recently used, beyond the limits");
  }
}

void ModelRouter::unload(Slot& slot, std::vector<std::shared_ptr<const ServedPipeline>>& dropped,
                         const std::string& why) {
  spdlog::info("models: unloading '{}' ({})", slot.entry->name, why);
  slot.state = ModelState::unloaded;
  slot.memory_bytes = 0;
  dropped.push_back(std::move(slot.served));
  slot.served.reset();
  count(exported_metric("chatflow:model_unloads_total"), {slot.entry->name});
}

void ModelRouter::fail_waiters(Slot& slot, const RequestError& error, Answers& answers) {
  for (auto& waiter : slot.waiters)
    answers.push_back({std::move(waiter.ready), nullptr, error});
  slot.waiters.clear();
}

bool ModelRouter::wait_for_room(size_t index) {
  std::vector<std::shared_ptr<const ServedPipeline>> dropped;
  Answers answers;
  auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(settings_.load_timeout_s));
  std::unique_lock lock(mutex_);
  // Polled while every loaded model is busy: a request ending does not tell us.
  while (!stopping_ && !make_room(index, dropped) && Clock::now() < give_up) {
    wake_.wait_for(lock, std::chrono::milliseconds(50));
  }
  Slot& slot = slots_[index];
  if (!stopping_ && slot.room_reserved) return true;  // `dropped` goes unlocked, on return
  slot.state = ModelState::unloaded;
  fail_waiters(
      slot,
      stopping_
          ? make_error(503, "server_error", "the server is shutting down", "model_unavailable")
          : make_error(503, "server_error",
                       "no room to load the model '" + slot.entry->name +
                           "': the models loaded are all busy (models_max " +
                           std::to_string(settings_.max_loaded) + ", models_memory_mib " +
                           std::to_string(settings_.memory_budget_mib) + "); retry shortly",
                       "model_unavailable", "model"),
      answers);
  lock.unlock();
  answer(answers);
  return false;
}

void ModelRouter::load(size_t index) {
  const ModelEntry& entry = *slots_[index].entry;
  if (!wait_for_room(index)) return;
  std::vector<std::shared_ptr<const ServedPipeline>> dropped;
  Answers answers;
  spdlog::info("models: loading '{}' from {}", entry.name, entry.pipeline);
  auto started = Clock::now();
  Loaded loaded;
  std::string failure;
  try {
    loaded = loader_(entry);
    if (!loaded.served) failure = "its pipeline was not built";
  } catch (const std::exception& error) {
    failure = error.what();
  }
  while (!failure.empty() && (failure.back() == '\n' || failure.back() == ' '))
    failure.pop_back();
  double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  std::unique_lock lock(mutex_);
  Slot& slot = slots_[index];
  slot.room_reserved = false;
  if (!failure.empty()) {
    spdlog::error("models: '{}' failed to load: {}", entry.name, failure);
    slot.state = ModelState::failed;
    slot.failure = failure;
    count(exported_metric("chatflow:model_loads_total"), {entry.name, "failed"});
    fail_waiters(
        slot,
        make_error(503, "server_error", "the model '" + entry.name + "' failed to load: " + failure,
                   "model_load_failed", "model"),
        answers);
  } else {
    spdlog::info("models: '{}' loaded in {:.2f} s", entry.name, seconds);
    slot.state = ModelState::loaded;
    slot.served = std::move(loaded.served);  // the router's is the only reference kept
    slot.memory_bytes = loaded.memory_bytes;
    if (loaded.memory_bytes > 0) slot.estimated_bytes = loaded.memory_bytes;
    slot.loaded_at = unix_seconds();
    slot.last_used = Clock::now();
    count(exported_metric("chatflow:model_loads_total"), {entry.name, "loaded"});
    if (metrics_) {
      metrics_->histogram(exported_metric("chatflow:model_load_duration_seconds"), {entry.name})
          .observe(seconds);
    }
    for (auto& waiter : slot.waiters)
      answers.push_back({std::move(waiter.ready), slot.served, std::nullopt});
    slot.waiters.clear();
    // Its size is known only now (a first load is estimated from its file, or not at all).
    trim(index, dropped);
  }
  lock.unlock();
  dropped.clear();
  wake_.notify_all();
  answer(answers);
}

void ModelRouter::unload_idle(Clock::time_point now, Clock::time_point& next,
                              std::vector<std::shared_ptr<const ServedPipeline>>& dropped) {
  for (auto& slot : slots_) {
    if (slot.state != ModelState::loaded || slot.entry->ttl_s <= 0) continue;
    auto ttl = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(slot.entry->ttl_s));
    if (!idle(slot.served)) {
      // Busy: its idle time starts when the requests in it are done; looked at again soon.
      slot.last_used = now;
      next = std::min(next, now + std::min<Clock::duration>(ttl, std::chrono::seconds(1)));
    } else if (slot.last_used + ttl <= now) {
      unload(slot, dropped, "idle for its ttl_s of " + seconds_text(slot.entry->ttl_s) + " s");
    } else {
      next = std::min(next, slot.last_used + ttl);
    }
  }
}

void ModelRouter::expire_waiters() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    Answers answers;
    for (auto& slot : slots_) {
      auto& waiters = slot.waiters;
      for (auto waiter = waiters.begin(); waiter != waiters.end();) {
        if (waiter->deadline <= now) {
          answers.push_back(
              {std::move(waiter->ready), nullptr,
               make_error(503, "server_error",
                          "the model '" + slot.entry->name + "' did not load within " +
                              seconds_text(settings_.load_timeout_s) +
                              " s (models_load_timeout_s); retry shortly",
                          "model_load_timeout", "model")});
          waiter = waiters.erase(waiter);
        } else {
          next = std::min(next, waiter->deadline);
          ++waiter;
        }
      }
    }
    std::vector<std::shared_ptr<const ServedPipeline>> dropped;
    unload_idle(now, next, dropped);
    if (!answers.empty() || !dropped.empty()) {
      lock.unlock();
      answer(answers);
      dropped.clear();
      lock.lock();
      continue;
    }
    if (next == Clock::time_point::max()) {
      wake_.wait(lock);
    } else {
      wake_.wait_until(lock, next);
    }
  }
}

std::vector<ModelStatus> ModelRouter::statuses() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelStatus> all;
  for (const auto& slot : slots_) {
    ModelStatus status;
    status.name = slot.entry->name;
    status.aliases = slot.entry->aliases;
    status.state = slot.state;
    status.failure = slot.failure;
    status.memory_bytes = slot.memory_bytes;
    status.loaded_at = slot.state == ModelState::loaded ? slot.loaded_at : 0;
    status.served = slot.served;
    all.push_back(std::move(status));
  }
  return all;
}

void ModelRouter::unload_all() {
  std::vector<std::shared_ptr<const ServedPipeline>> dropped;
  {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_) {
      if (slot.state == ModelState::loaded) unload(slot, dropped, "reload");
    }
  }
}

void ModelRouter::register_metrics(MetricsRegistry& registry) {
  {
    std::lock_guard lock(mutex_);
    metrics_ = &registry;
  }
  std::weak_ptr<ModelRouter> weak = weak_from_this();
  registry.sampled(exported_metric("chatflow:model_state"), [weak]() {
    std::vector<std::pair<LabelValues, double>> samples;
    auto self = weak.lock();
    if (!self) return samples;
    for (const auto& status : self->statuses()) {
      for (ModelState state :
           {ModelState::unloaded, ModelState::loading, ModelState::loaded, ModelState::failed}) {
        samples.push_back(
            {{status.name, std::string(to_string(state))}, status.state == state ? 1.0 : 0.0});
      }
    }
    return samples;
  });
  register_engine_samples(registry);
  registry.sampled(exported_metric("chatflow:model_waiting_requests"), [weak]() {
    std::vector<std::pair<LabelValues, double>> samples;
    auto self = weak.lock();
    if (!self) return samples;
    std::lock_guard lock(self->mutex_);
    for (const auto& slot : self->slots_)
      samples.push_back({{slot.entry->name}, double(slot.waiters.size())});
    return samples;
  });
}

// The engine series of each loaded entry, beside those of the serve file's pipeline, labelled
// with the entry's name (two entries may load files whose models share an id). Read at scrape
// time, so an unloaded model's series go with it and nothing here keeps it loaded.
void ModelRouter::register_engine_samples(MetricsRegistry& registry) {
  std::weak_ptr<ModelRouter> weak = weak_from_this();
  auto loaded = [weak]() {
    std::vector<std::pair<std::string, std::shared_ptr<const ServedPipeline>>> all;
    if (auto self = weak.lock()) {
      for (auto& status : self->statuses())
        if (status.state == ModelState::loaded) all.emplace_back(status.name, status.served);
    }
    return all;
  };
  auto per_engine = [&registry, loaded](const MetricDefinition& metric, auto value) {
    registry.sampled(metric, [loaded, value]() {
      std::vector<std::pair<LabelValues, double>> samples;
      for (const auto& [name, served] : loaded()) {
        for (const auto& model : served->models) {
          EngineStats stats = model->engine_stats();
          if (!stats.backend.empty()) samples.push_back({{name}, value(stats)});
        }
      }
      return samples;
    });
  };
  per_engine(exported_metric("chatflow:num_requests_running"),
             [](const EngineStats& s) { return double(s.running); });
  per_engine(exported_metric("chatflow:num_requests_waiting"),
             [](const EngineStats& s) { return double(s.waiting); });
  per_engine(exported_metric("chatflow:kv_cache_usage_perc"), [](const EngineStats& s) {
    return s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0;
  });
  per_engine(exported_metric("chatflow:engine_prompt_tokens_computed_total"),
             [](const EngineStats& s) { return double(s.prompt_tokens_computed); });
  per_engine(exported_metric("chatflow:engine_generated_tokens_total"),
             [](const EngineStats& s) { return double(s.generated_tokens); });
  registry.sampled(exported_metric("chatflow:engine_backend_memory_bytes"), [loaded]() {
    std::vector<std::pair<LabelValues, double>> samples;
    for (const auto& [name, served] : loaded()) {
      for (const auto& model : served->models) {
        EngineStats stats = model->engine_stats();
        if (stats.backend.empty()) continue;
        samples.push_back({{name, "weights"}, double(stats.weight_bytes)});
        samples.push_back({{name, "kv_pool"}, double(stats.kv_pool_bytes)});
        samples.push_back({{name, "workspace"}, double(stats.workspace_bytes)});
      }
    }
    return samples;
  });
  registry.sampled(exported_metric("chatflow:requests_in_flight"), [loaded]() {
    std::vector<std::pair<LabelValues, double>> samples;
    for (const auto& [name, served] : loaded()) {
      if (served->pipeline)
        samples.push_back({{name}, double(served->pipeline->active_requests())});
    }
    return samples;
  });
}

}  // namespace chatflow::server
