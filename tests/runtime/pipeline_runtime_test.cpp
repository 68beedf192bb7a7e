// The flow-graph runtime: isolation of failures, admission, cancellation, deadlines, stream
// order, early answers, asynchronous hand-offs, and pipelines living side by side.
#include <thread>

#include <gtest/gtest.h>
#include <tbb/parallel_for.h>

#include "support/pipeline_helpers.h"
#include "support/test_stages.h"

namespace chatflow::testing {
namespace {

std::string expected_generated(int chunks, const std::string& suffix = "") {
  std::string text;
  for (int i = 0; i < chunks; ++i)
    text +=
        "t" + std::to_string(i) + " " + suffix + (suffix.empty() ? "" : std::to_string(i) + "|");
  return text;
}

TEST(PipelineRuntime, StageThatThrowsFailsOnlyItsOwnRequest) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: risky, type: pass, config: {fail_on: boom}}
  - {name: gen, type: generate, config: {chunks: 4}}
  - {name: tail, type: append, config: {suffix: "-"}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  constexpr int kRequests = 100;
  std::vector<std::shared_ptr<Request>> requests(kRequests);
  std::vector<std::shared_ptr<CollectingSink>> sinks(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    requests[i] = user_request(
        i % 10 == 3 ? "boom " + std::to_string(i) : "fine " + std::to_string(i), sinks[i]);
  }
  // Four submitting threads, so requests really are in the graph at the same time.
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += 4)
        EXPECT_EQ(pipeline->submit(requests[i]), Admission::accepted);
    });
  }
  for (auto& submitter : submitters)
    submitter.join();
  int failed = 0;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(sinks[i]->wait()) << "request " << i << " never finished";
    EXPECT_EQ(sinks[i]->finish_calls(), 1);
    if (i % 10 == 3) {
      ++failed;
      ASSERT_TRUE(requests[i]->error());
      EXPECT_EQ(requests[i]->error()->status, 500);
      EXPECT_EQ(requests[i]->error()->message, "stage 'risky' (pass) failed: found 'boom'");
      EXPECT_EQ(sinks[i]->text(), "");
    } else {
      EXPECT_FALSE(requests[i]->error()) << requests[i]->error()->message;
      EXPECT_EQ(requests[i]->finish_reason(), FinishReason::length);
      EXPECT_EQ(sinks[i]->text(), expected_generated(4, "-"));
    }
  }
  EXPECT_EQ(failed, 10);
  EXPECT_EQ(pipeline->active_requests(), 0u);
}

TEST(PipelineRuntime, AdmissionLimitRejectsInsteadOfBlocking) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
max_in_flight: 2
stages:
  - {name: wait, type: pass, config: {wait_at_gate: true}}
  - {name: gen, type: generate, config: {chunks: 1}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> first_sink, second_sink, third_sink, later_sink;
  auto first = user_request("one", first_sink);
  auto second = user_request("two", second_sink);
  auto third = user_request("three", third_sink);
  ASSERT_EQ(pipeline->submit(first), Admission::accepted);
  ASSERT_EQ(pipeline->submit(second), Admission::accepted);
  ASSERT_TRUE(probe->wait_for_waiting(1));
  // The gate is closed, so a blocking submit would never return here.
  EXPECT_EQ(pipeline->submit(third), Admission::full);
  EXPECT_EQ(third_sink->finish_calls(), 0) << "a rejected request's sink is not called";
  probe->open_gate();
  ASSERT_TRUE(first_sink->wait());
  ASSERT_TRUE(second_sink->wait());
  EXPECT_EQ(first_sink->text(), "t0 ");
  auto later = user_request("later", later_sink);
  EXPECT_EQ(pipeline->submit(later), Admission::accepted);
  ASSERT_TRUE(later_sink->wait());
  EXPECT_FALSE(later->error());
}

TEST(PipelineRuntime, CancelFlagStopsARequestBetweenStages) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: first, type: pass, config: {cancel_request: true}}
  - {name: second, type: pass}
  - {name: gen, type: generate}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hello", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(probe->calls("first"), 1);
  EXPECT_EQ(probe->calls("second"), 0);
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 499);
  EXPECT_EQ(request->error()->type, "request_cancelled");
  EXPECT_TRUE(request->cancelled());
}

TEST(PipelineRuntime, CancelFromOutsideFinishesAtOnceAndSkipsLaterStages) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: slow, type: pass, config: {wait_at_gate: true}}
  - {name: after, type: pass}
  - {name: gen, type: generate}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hello", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(probe->wait_for_waiting(1));
  request->cancel(
      RequestError{499, "request_cancelled", "client went away", "client_disconnected", {}});
  // The sink hears at once, while the stage is still parked.
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(request->error()->message, "client went away");
  EXPECT_EQ(pipeline->active_requests(), 0u);
  probe->open_gate();
  pipeline->drain();
  EXPECT_EQ(probe->calls("after"), 0);
  EXPECT_EQ(sink->finish_calls(), 1);
  EXPECT_TRUE(sink->chunks().empty());
}

TEST(PipelineRuntime, CancelBeforeSubmitRunsNoStage) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: a, type: pass}\n  - {name: gen, type: generate}\n",
      registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hello", sink);
  request->cancel();
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(probe->calls("a"), 0);
  EXPECT_EQ(request->error()->status, 499);
}

TEST(PipelineRuntime, PassedDeadlineFailsTheRequest) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: a, type: pass}\n  - {name: gen, type: generate}\n",
      registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("hello", sink);
  request->deadline = Clock::now() - std::chrono::milliseconds(1);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 504);
  EXPECT_EQ(request->error()->code, "deadline_exceeded");
  EXPECT_EQ(probe->calls("a"), 0);
}

TEST(PipelineRuntime, ChunksOfEachRequestArriveInOrder) {
  Registry registry = test_registry();
  // Chunks are written from a separate thread, and both stream stages run with unlimited
  // concurrency, so tasks for one request's chunks really do race.
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: gen, type: generate, config: {chunks: 400, from_thread: true}}
  - {name: first, type: append, config: {suffix: a}}
  - {name: second, type: append, config: {suffix: b}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  constexpr int kRequests = 16;
  std::vector<std::shared_ptr<CollectingSink>> sinks(kRequests);
  for (int i = 0; i < kRequests; ++i)
    ASSERT_EQ(pipeline->submit(user_request("go", sinks[i])), Admission::accepted);
  std::string expected;
  for (int i = 0; i < 400; ++i) {
    std::string index = std::to_string(i);
    expected += "t" + index + " a" + index + "|b" + index + "|";
  }
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->wait());
    EXPECT_EQ(sink->text(), expected);
    EXPECT_TRUE(sink->chunks().back().is_final());
  }
}

// 100,000 chunks racing through two stages of unlimited concurrency: every consumer reorders
// by sequence number (a map, so a long stream costs n log n, not n squared).
TEST(PipelineRuntime, AStreamOfAHundredThousandChunksKeepsItsOrder) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: gen, type: generate, config: {chunks: 100000, from_thread: true}}
  - {name: first, type: append, config: {suffix: a}}
  - {name: second, type: append, config: {suffix: b}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(pipeline->submit(user_request("go", sink)), Admission::accepted);
  ASSERT_TRUE(sink->wait(std::chrono::seconds(60)));
  std::vector<Chunk> chunks = sink->chunks();
  ASSERT_EQ(chunks.size(), 100001u);
  for (int i = 0; i < 100000; ++i) {
    std::string index = std::to_string(i);
    ASSERT_EQ(chunks[static_cast<size_t>(i)].text, "t" + index + " a" + index + "|b" + index + "|")
        << "chunk " << i;
  }
  EXPECT_TRUE(chunks.back().is_final());
}

TEST(PipelineRuntime, StreamStageFailureEndsTheRequestAfterTheChunksSoFar) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: gen, type: generate, config: {chunks: 5}}
  - {name: brittle, type: stream_fail, config: {at: 2}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("go", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  pipeline->drain();
  EXPECT_EQ(sink->text(), "t0 t1 ");
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->message, "stage 'brittle' (stream_fail) failed: stream stage broke");
  EXPECT_FALSE(sink->chunk_after_finish());
  EXPECT_EQ(sink->finish_calls(), 1);
}

TEST(PipelineRuntime, StreamEndsEvenWhenAStageSwallowsTheFinalChunk) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: gen, type: generate, config: {chunks: 3}}
  - {name: drop, type: swallow_final}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("go", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), "t0 t1 t2 ");
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
}

TEST(PipelineRuntime, EarlyAnswerTakesTheStreamPortPastTheGenerator) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: check, type: branch}
  - {name: gen, type: generate, config: {chunks: 2}}
  - {name: tail, type: append, config: {suffix: "#"}}
edges:
  - check.hit -> tail
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> hit_sink, miss_sink;
  ASSERT_EQ(pipeline->submit(user_request("hit me", hit_sink)), Admission::accepted);
  ASSERT_EQ(pipeline->submit(user_request("miss me", miss_sink)), Admission::accepted);
  ASSERT_TRUE(hit_sink->wait());
  ASSERT_TRUE(miss_sink->wait());
  EXPECT_EQ(hit_sink->text(), "cached#0|");
  EXPECT_EQ(miss_sink->text(), "t0 #0|t1 #1|");
}

TEST(PipelineRuntime, PortsRouteRequestsToTheirStages) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: route, type: router}
  - {name: left, type: pass}
  - {name: middle, type: pass}
  - {name: right, type: pass}
  - {name: gen, type: generate, config: {chunks: 1}}
edges:
  - route.a -> left
  - route.b -> middle
  - route.c -> right
  - left -> gen
  - middle -> gen
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::vector<std::shared_ptr<CollectingSink>> sinks(6);
  const char* messages[] = {"apple", "banana", "cherry", "avocado", "blueberry", "apricot"};
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(pipeline->submit(user_request(messages[i], sinks[i])), Admission::accepted);
  for (auto& sink : sinks)
    ASSERT_TRUE(sink->wait());
  EXPECT_EQ(probe->calls("left"), 3);
  EXPECT_EQ(probe->calls("middle"), 2);
  EXPECT_EQ(probe->calls("right"), 1);
}

TEST(PipelineRuntime, DeferredRequestIsResumedFromAnotherThread) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: handoff, type: defer}
  - {name: after, type: pass}
  - {name: gen, type: generate, config: {chunks: 2, from_thread: true}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::vector<std::shared_ptr<CollectingSink>> sinks(20);
  for (auto& sink : sinks)
    ASSERT_EQ(pipeline->submit(user_request("x", sink)), Admission::accepted);
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->wait());
    EXPECT_EQ(sink->text(), "t0 t1 ");
  }
  EXPECT_EQ(probe->calls("after"), 20);
}

TEST(PipelineRuntime, TwoPipelinesFromDifferentYamlCoexist) {
  Registry registry = test_registry();
  auto plain = build_yaml(
      "version: 1\nstages:\n  - {name: gen, type: generate, config: {chunks: 2}}\n", registry);
  auto decorated = build_yaml(R"(version: 1
stages:
  - {name: gen, type: generate, config: {chunks: 3, from_thread: true}}
  - {name: tail, type: append, config: {suffix: "*"}}
)",
                              registry);
  ASSERT_TRUE(plain && decorated);
  std::vector<std::shared_ptr<CollectingSink>> plain_sinks(30), decorated_sinks(30);
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(plain->submit(user_request("a", plain_sinks[i])), Admission::accepted);
    ASSERT_EQ(decorated->submit(user_request("b", decorated_sinks[i])), Admission::accepted);
  }
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(plain_sinks[i]->wait());
    ASSERT_TRUE(decorated_sinks[i]->wait());
    EXPECT_EQ(plain_sinks[i]->text(), "t0 t1 ");
    EXPECT_EQ(decorated_sinks[i]->text(), "t0 *0|t1 *1|t2 *2|");
  }
  // Retiring one leaves the other serving.
  plain.reset();
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(decorated->submit(user_request("c", sink)), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), "t0 *0|t1 *1|t2 *2|");
}

// A server builds each new pipeline on whatever thread handles the reload, a thread that may
// have used oneTBB before and that ends once the pipeline is installed; the old pipeline is
// retired on yet another thread. Pipelines must keep serving through any number of such
// reloads (once seen: a server that stopped answering after a reload, with no worker thread
// left to run its graph's tasks).
TEST(PipelineRuntime, PipelinesBuiltAndRetiredOnPassingThreadsKeepServing) {
  Registry registry = test_registry();
  auto build_on_passing_thread = [&] {
    std::shared_ptr<Pipeline> built;
    std::thread([&] {
      tbb::parallel_for(0, 64, [](int) {});  // as building an index or an embedder does
      built = build_yaml(
          "version: 1\nstages:\n  - {name: gen, type: generate, config: {chunks: 2}}\n", registry);
    }).join();
    return built;
  };
  std::shared_ptr<Pipeline> serving = build_on_passing_thread();
  ASSERT_TRUE(serving);
  for (int reload = 0; reload < 6; ++reload) {
    std::vector<std::shared_ptr<CollectingSink>> sinks(8);
    for (auto& sink : sinks)
      ASSERT_EQ(serving->submit(user_request("a", sink)), Admission::accepted);
    for (auto& sink : sinks) {
      ASSERT_TRUE(sink->wait(std::chrono::seconds(10))) << "reload " << reload;
      EXPECT_EQ(sink->text(), "t0 t1 ");
    }
    std::shared_ptr<Pipeline> next = build_on_passing_thread();
    ASSERT_TRUE(next);
    std::thread([old = std::exchange(serving, next)]() mutable {
      old->drain();
      old.reset();
    }).join();
  }
}

TEST(PipelineRuntime, DrainWaitsForRequestsInFlightThenRefusesNewOnes) {
  auto probe = std::make_shared<TestProbe>();
  Registry registry = test_registry(probe);
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: slow, type: pass, config: {wait_at_gate: true}}
  - {name: gen, type: generate, config: {chunks: 1}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(pipeline->submit(user_request("x", sink)), Admission::accepted);
  ASSERT_TRUE(probe->wait_for_waiting(1));
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    pipeline->drain();
    drained = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(drained.load()) << "drain returned while a request was still in flight";
  probe->open_gate();
  drainer.join();
  // The pipeline lets go of a request before its sink hears the end (finish() releases, then
  // calls on_finish), so drain may return a moment before the sink has it.
  EXPECT_TRUE(sink->wait(std::chrono::seconds(10)));
  EXPECT_EQ(sink->text(), "t0 ");
  std::shared_ptr<CollectingSink> late_sink;
  EXPECT_EQ(pipeline->submit(user_request("late", late_sink)), Admission::closed);
}

TEST(PipelineRuntime, ResourcesReachTheStagesThatNameThem) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
resources:
  db: {type: store, path: /data/history}
stages:
  - {name: use, type: use_store, config: {store: db}}
  - {name: gen, type: generate, config: {chunks: 1}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("x", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(request->annotation("store_path"), "/data/history");
}

TEST(PipelineRuntime, StageTimingsAreRecorded) {
  Registry registry = test_registry();
  auto pipeline = build_yaml(R"(version: 1
stages:
  - {name: a, type: pass}
  - {name: gen, type: generate, config: {chunks: 5}}
  - {name: tail, type: append, config: {suffix: x}}
)",
                             registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("x", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  pipeline->drain();
  auto timings = request->stage_timings();
  ASSERT_EQ(timings.size(), 3u);
  EXPECT_EQ(timings[0].calls, 1u);
  EXPECT_EQ(timings[1].calls, 1u);
  EXPECT_EQ(timings[2].calls, 6u) << "five text chunks and the final one";
  EXPECT_LE(request->submitted_ns(), timings[0].first_start_ns);
  EXPECT_LE(timings[0].last_end_ns, timings[1].first_start_ns);
  EXPECT_LE(timings[2].last_end_ns, request->finished_ns());
}

TEST(PipelineRuntime, SubmittingARequestTwiceIsRefused) {
  Registry registry = test_registry();
  auto pipeline = build_yaml("version: 1\nstages:\n  - {name: gen, type: generate}\n", registry);
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("x", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  EXPECT_THROW(pipeline->submit(request), std::logic_error);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->finish_calls(), 1);
}

}  // namespace
}  // namespace chatflow::testing
