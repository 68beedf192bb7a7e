#include "test_stages.h"

#include <chrono>
#include <thread>

namespace chatflow::testing {

void TestProbe::count(const std::string& stage) {
  std::lock_guard lock(mutex_);
  ++calls_[stage];
}

int TestProbe::calls(const std::string& stage) const {
  std::lock_guard lock(mutex_);
  auto found = calls_.find(stage);
  return found == calls_.end() ? 0 : found->second;
}

void TestProbe::wait_at_gate() {
  std::unique_lock lock(mutex_);
  ++waiting_;
  gate_changed_.wait(lock, [this] { return gate_open_; });
  --waiting_;
}

void TestProbe::open_gate() {
  std::lock_guard lock(mutex_);
  gate_open_ = true;
  gate_changed_.notify_all();
}

bool TestProbe::wait_for_waiting(int count) const {
  for (int i = 0; i < 20'000; ++i) {
    if (waiting_.load() >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

namespace {

// pass: counts its calls and passes the request on; can fail, block or cancel on request.
struct PassConfig {
  std::string fail_on;        // throw when the user message contains this
  bool wait_at_gate = false;  // park until the test opens the probe's gate
  bool cancel_request = false;
};

class PassStage final : public RequestStage {
 public:
  PassStage(PassConfig config, std::string name, std::shared_ptr<TestProbe> probe)
      : config_(std::move(config)), name_(std::move(name)), probe_(std::move(probe)) {}
  Route process(Request& request, StageIo&) override {
    probe_->count(name_);
    if (!config_.fail_on.empty() &&
        request.last_user_message().find(config_.fail_on) != std::string::npos) {
      throw std::runtime_error("found '" + config_.fail_on + "'");
    }
    if (config_.wait_at_gate) probe_->wait_at_gate();
    if (config_.cancel_request) request.cancel();
    return Route::to(0);
  }

 private:
  PassConfig config_;
  std::string name_;
  std::shared_ptr<TestProbe> probe_;
};

// branch: "hit..." messages are answered at once on the stream port `hit`; others go on via `miss`.
class BranchStage final : public RequestStage {
 public:
  Route process(Request& request, StageIo& io) override {
    if (request.last_user_message().rfind("hit", 0) != 0) return Route::to(0);
    ChunkWriter writer = io.open_stream(1);
    writer.write(Chunk::delta("cached"));
    writer.finish(FinishReason::stop);
    return Route::streaming();
  }
};

// router: ports a, b, c; the first letter of the message picks the port.
class RouterStage final : public RequestStage {
 public:
  Route process(Request& request, StageIo&) override {
    std::string text = request.last_user_message();
    if (text.empty()) throw RequestFailure(400, "invalid_request_error", "empty message");
    return Route::to(text[0] == 'a' ? 0 : text[0] == 'b' ? 1 : 2);
  }
};

// generate: streams "t0 ", "t1 ", ... like an engine, optionally from its own thread after the
// stage returned; `defer: true` first hands the request to a thread that resumes it on port out.
struct GenerateConfig {
  int chunks = 3;
  bool from_thread = false;
};

class GenerateStage final : public RequestStage {
 public:
  explicit GenerateStage(GenerateConfig config) : config_(config) {}
  Route process(Request&, StageIo& io) override {
    ChunkWriter writer = io.open_stream(0);
    auto produce = [chunks = config_.chunks](ChunkWriter out) {
      for (int i = 0; i < chunks && !out.stopped(); ++i) {
        out.write(Chunk::delta("t" + std::to_string(i) + " ", {i}));
      }
      out.finish(FinishReason::length);
    };
    if (config_.from_thread) {
      std::thread(produce, std::move(writer)).detach();
    } else {
      produce(std::move(writer));
    }
    return Route::streaming();
  }

 private:
  GenerateConfig config_;
};

// defer: hands the request to another thread, which resumes it through port `out` later.
class DeferStage final : public RequestStage {
 public:
  Route process(Request&, StageIo& io) override {
    std::thread(
        [](Continuation continuation) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continuation.resume(0);
        },
        io.defer())
        .detach();
    return Route::deferred();
  }
};

// append: adds a suffix to every chunk and numbers chunks per request (checks stream order).
struct AppendConfig {
  std::string suffix;
};

class AppendStage final : public StreamStage {
  struct Seen : StreamState {
    int chunks = 0;
  };

 public:
  explicit AppendStage(AppendConfig config) : config_(std::move(config)) {}
  void process(StreamContext& context, Chunk chunk) override {
    int index = context.state<Seen>().chunks++;
    if (!chunk.text.empty()) chunk.text += config_.suffix + std::to_string(index) + "|";
    context.emit(std::move(chunk));
  }

 private:
  AppendConfig config_;
};

// swallow_final: drops the final chunk, so the runtime must end the stream by itself.
class SwallowFinalStage final : public StreamStage {
 public:
  void process(StreamContext& context, Chunk chunk) override {
    if (!chunk.is_final()) context.emit(std::move(chunk));
  }
};

// stream_fail: throws on its `at`-th chunk.
struct StreamFailConfig {
  int at = 1;
};

class StreamFailStage final : public StreamStage {
  struct Count : StreamState {
    int seen = 0;
  };

 public:
  explicit StreamFailStage(StreamFailConfig config) : config_(config) {}
  void process(StreamContext& context, Chunk chunk) override {
    if (context.state<Count>().seen++ == config_.at) throw std::runtime_error("stream stage broke");
    context.emit(std::move(chunk));
  }

 private:
  StreamFailConfig config_;
};

class StoreResource final : public Resource {
 public:
  explicit StoreResource(std::string path) : path(std::move(path)) {}
  std::string path;
};

class OtherResource final : public Resource {};

struct StoreConfig {
  std::string path;
};

struct UseStoreConfig {
  std::string store;
};

class UseStoreStage final : public RequestStage {
 public:
  explicit UseStoreStage(std::shared_ptr<StoreResource> store) : store_(std::move(store)) {}
  Route process(Request& request, StageIo&) override {
    request.annotate("store_path", store_->path);
    return Route::to(0);
  }

 private:
  std::shared_ptr<StoreResource> store_;
};

}  // namespace

Registry test_registry(std::shared_ptr<TestProbe> probe) {
  Registry registry;
  {
    StageTypeBuilder<PassConfig> type("pass", StageKind::request, "counts and passes on");
    type.port("out", PortKind::request, "the request");
    type.config().key("fail_on", &PassConfig::fail_on, "throw when the message contains this");
    type.config().key("wait_at_gate", &PassConfig::wait_at_gate, "park at the probe's gate");
    type.config().key("cancel_request", &PassConfig::cancel_request, "cancel the request");
    type.create([probe](const PassConfig& config, StageContext& context) {
      return std::make_unique<PassStage>(config, context.stage_name(), probe);
    });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<NoConfig> type("branch", StageKind::request, "answers 'hit' messages at once");
    type.port("miss", PortKind::request, "not answered here");
    type.port("hit", PortKind::stream, "the answer");
    type.create([](const NoConfig&, StageContext&) { return std::make_unique<BranchStage>(); });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<NoConfig> type("router", StageKind::request, "routes by first letter");
    type.port("a", PortKind::request, "messages starting with a");
    type.port("b", PortKind::request, "messages starting with b");
    type.port("c", PortKind::request, "everything else");
    type.no_default_port();
    type.create([](const NoConfig&, StageContext&) { return std::make_unique<RouterStage>(); });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<GenerateConfig> type("generate", StageKind::request,
                                          "streams numbered chunks");
    type.port("out", PortKind::stream, "the chunks");
    type.config().key("chunks", &GenerateConfig::chunks, "how many chunks").range(0, 100000);
    type.config().key("from_thread", &GenerateConfig::from_thread, "write from another thread");
    type.create([](const GenerateConfig& config, StageContext&) {
      return std::make_unique<GenerateStage>(config);
    });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<NoConfig> type("defer", StageKind::request,
                                    "resumes the request from a thread");
    type.port("out", PortKind::request, "the request, later");
    type.create([](const NoConfig&, StageContext&) { return std::make_unique<DeferStage>(); });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<AppendConfig> type("append", StageKind::stream, "appends a suffix and index");
    type.port("out", PortKind::stream, "the chunks");
    type.config().key("suffix", &AppendConfig::suffix, "text to append").required();
    type.create([](const AppendConfig& config, StageContext&) {
      return std::make_unique<AppendStage>(config);
    });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<NoConfig> type("swallow_final", StageKind::stream, "drops the final chunk");
    type.port("out", PortKind::stream, "the chunks");
    type.create(
        [](const NoConfig&, StageContext&) { return std::make_unique<SwallowFinalStage>(); });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<StreamFailConfig> type("stream_fail", StageKind::stream, "throws on a chunk");
    type.port("out", PortKind::stream, "the chunks");
    type.config().key("at", &StreamFailConfig::at, "chunk index that throws");
    type.create([](const StreamFailConfig& config, StageContext&) {
      return std::make_unique<StreamFailStage>(config);
    });
    registry.add(type.build());
  }
  {
    StageTypeBuilder<UseStoreConfig> type("use_store", StageKind::request,
                                          "annotates the store path");
    type.port("out", PortKind::request, "the request");
    type.config()
        .key("store", &UseStoreConfig::store, "a store resource")
        .required()
        .resource("store");
    type.create([](const UseStoreConfig& config, StageContext& context) {
      return std::make_unique<UseStoreStage>(context.resource<StoreResource>(config.store));
    });
    registry.add(type.build());
  }
  {
    ResourceTypeBuilder<StoreConfig> type("store", "a named path");
    type.config().key("path", &StoreConfig::path, "where it lives").required();
    type.create([](const StoreConfig& config, ResourceContext&) -> std::shared_ptr<Resource> {
      if (config.path == "missing")
        throw ConfigError("cannot open 'missing': No such file or directory");
      return std::make_shared<StoreResource>(config.path);
    });
    registry.add(type.build());
  }
  {
    ResourceTypeBuilder<NoConfig> type("other", "a resource of another kind");
    type.create([](const NoConfig&, ResourceContext&) -> std::shared_ptr<Resource> {
      return std::make_shared<OtherResource>();
    });
    registry.add(type.build());
  }
  return registry;
}

}  // namespace chatflow::testing
