// Many models behind one server: the serve file's `models:` entries, each served by a pipeline of
// its own that is built when a request first names it (name or alias) and unloaded when it has
// been idle longest and room is needed (models_max, models_memory_mib). Requests for a model
// that is loading wait for it, a bounded number of them for a bounded time; a model that fails
// to load answers its requests with the reason and is tried again by the next one.
//
// Like llama.cpp's router mode and llama-swap, with pipelines instead of processes: an unloaded
// model's pipeline goes the way a replaced one goes after a reload (the requests in it finish,
// then the reaper destroys it), so a model is never unloaded under a running request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "framework/api/request.h"
#include "framework/server/metrics.h"
#include "framework/server/served_pipeline.h"
#include "framework/server/server_config.h"

namespace chatflow::server {

enum class ModelState { unloaded, loading, loaded, failed };
std::string_view to_string(ModelState state);

// One entry as /v1/models shows it.
struct ModelStatus {
  std::string name;
  std::vector<std::string> aliases;
  ModelState state = ModelState::unloaded;
  std::string failure;                           // failed: why the last load did not succeed
  int64_t memory_bytes = 0;                      // loaded: its engines' weights and KV pool
  int64_t loaded_at = 0;                         // loaded: Unix seconds of the load
  std::shared_ptr<const ServedPipeline> served;  // loaded: the pipeline serving it
};

class ModelRouter : public std::enable_shared_from_this<ModelRouter> {
 public:
  using Clock = std::chrono::steady_clock;

  struct Loaded {
    std::shared_ptr<const ServedPipeline> served;
    int64_t memory_bytes = 0;  // what it takes while loaded (for models_memory_mib)
  };
  // Builds an entry's pipeline (slow: it reads the model). Throws std::exception with the reason
  // when it cannot.
  using Loader = std::function<Loaded(const ModelEntry& entry)>;
  // Called exactly once per acquire, on the caller's thread (loaded already) or a thread of the
  // router's: the pipeline to submit to, or the error to answer with.
  using Ready = std::function<void(std::shared_ptr<const ServedPipeline> served,
                                   std::optional<RequestError> error)>;

  ModelRouter(ModelsSettings settings, Loader loader);
  // Answers every waiting request (503) and waits for the loads in progress.
  ~ModelRouter();
  ModelRouter(const ModelRouter&) = delete;
  ModelRouter& operator=(const ModelRouter&) = delete;

  // The entry `name` names (its name or an alias), or nullptr.
  const ModelEntry* find(const std::string& name) const;
  // Every name and alias, in the serve file's order (for the 404 of an unknown model).
  std::vector<std::string> names() const;
  // `name`'s pipeline to `ready`: at once when loaded, else once loaded (the first request
  // starts the load). 503 with code model_load_failed, model_load_timeout, too_many_waiting or
  // model_unavailable (the server is going away) otherwise.
  void acquire(const std::string& name, Ready ready);
  std::vector<ModelStatus> statuses() const;
  // Answers every request waiting for a load (503: the server is going away); later ones get
  // the same at once.
  void stop_waiting();
  // Lets go of every loaded model: requests in them finish, the next request loads it again
  // (its files read anew). For a reload.
  void unload_all();
  // The per-scrape gauge of each model's state (the counters live in `registry` already).
  void register_metrics(MetricsRegistry& registry);

  const ModelsSettings& settings() const { return settings_; }

 private:
  struct Waiter {
    Ready ready;
    Clock::time_point deadline;
  };
  struct Slot {
    const ModelEntry* entry = nullptr;
    ModelState state = ModelState::unloaded;
    bool room_reserved = false;  // loading, with room made for it
    std::string failure;
    std::shared_ptr<const ServedPipeline> served;
    int64_t memory_bytes = 0;
    int64_t estimated_bytes = 0;  // before a load: its last load's, else its model file's size
    int64_t loaded_at = 0;
    Clock::time_point last_used;
    std::deque<Waiter> waiters;
  };
  struct Answer {
    Ready ready;
    std::shared_ptr<const ServedPipeline> served;
    std::optional<RequestError> error;
  };
  using Answers = std::vector<Answer>;

  void load(size_t index);
  // Makes room for `index`, waiting while the loaded models are busy; false (its waiters
  // answered) when there is none within models_load_timeout_s or the router stops.
  bool wait_for_room(size_t index);
  // Unloads idle models, least recently used first, until `index` fits; false when it cannot
  // yet (the others are busy). Unloaded pipelines go to `dropped`, to be let go unlocked.
  bool make_room(size_t index, std::vector<std::shared_ptr<const ServedPipeline>>& dropped);
  bool fits(size_t index) const;
  // Unloads idle models other than `keep`, least recently used first, while more are loaded
  // than the limits allow (a first load's size is only known once it is loaded).
  void register_engine_samples(MetricsRegistry& registry);
  void trim(size_t keep, std::vector<std::shared_ptr<const ServedPipeline>>& dropped);
  void unload(Slot& slot, std::vector<std::shared_ptr<const ServedPipeline>>& dropped,
              const std::string& why);
  // Unloads the models idle past their ttl_s; `next` becomes the earliest time to look again.
  void unload_idle(Clock::time_point now, Clock::time_point& next,
                   std::vector<std::shared_ptr<const ServedPipeline>>& dropped);
  void fail_waiters(Slot& slot, const RequestError& error, Answers& answers);
  void expire_waiters();
  static void answer(Answers& answers);
  void count(const MetricDefinition& metric, const LabelValues& labels, double value = 1);

  ModelsSettings settings_;
  Loader loader_;
  std::map<std::string, size_t> index_;  // name or alias -> slot

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // a waiter added or gone, a load over, stopping
  std::vector<Slot> slots_;
  bool stopping_ = false;
  MetricsRegistry* metrics_ = nullptr;
  struct LoadThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<LoadThread> loads_;
  std::thread expiry_;  // answers waiters whose time is up, unloads models past their ttl_s
};

}  // namespace chatflow::server
