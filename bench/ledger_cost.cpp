// chatflow bench-ledger: what the quota's ledger costs a request, SQLite against PostgreSQL,
// side by side in the same run (the machines are shared and noisy: compare the two, not runs).
//
// Each client thread runs requests back to back: reserve (the request waits for it before
// generating) then settle (queued: the request does not wait). Reported per ledger and number of
// clients: reserve latency p50/p99, and requests per second until every settlement is written.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/storage/postgres_client.h"
#include "framework/usage/postgres_usage_ledger.h"
#include "framework/usage/sqlite_usage_ledger.h"

namespace chatflow::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchLedgerOptions {
  std::string postgres_url;
  std::string sqlite_path;  // empty: a temporary file
  int requests = 2000;
  std::vector<int> clients = {1, 8};
  int tenants = 4;
};

struct Measurement {
  double reserve_p50_us = 0;
  double reserve_p99_us = 0;
  double requests_per_second = 0;
};

Measurement measure(usage::UsageLedger& ledger, int requests, int clients, int tenants,
                    const std::string& run) {
  std::vector<std::vector<double>> latencies(clients);
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int client = 0; client < clients; ++client) {
    threads.emplace_back([&, client] {
      std::string tenant = run + "-" + std::to_string(client % tenants);
      for (int i = client; i < requests; i += clients) {
        std::string hold = usage::new_hold_id();
        auto before = Clock::now();
        if (!ledger.reserve(tenant, hold, 1000, int64_t{1} << 50))
          throw std::runtime_error("a reservation was refused under an allowance of 2^50");
        latencies[client].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - before).count());
        ledger.settle(tenant, hold, 1000, {0, tenant, "bench", hold, "bench", 600, 200, 200});
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  ledger.flush();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& each : latencies)
    all.insert(all.end(), each.begin(), each.end());
  std::sort(all.begin(), all.end());
  auto at = [&](double fraction) { return all[static_cast<size_t>(fraction * (all.size() - 1))]; };
  return {at(0.5), at(0.99), requests / seconds};
}

int bench_ledger_command(const BenchLedgerOptions& options) {
  std::string sqlite_path = options.sqlite_path;
  bool temporary = sqlite_path.empty();
  if (temporary) {
    sqlite_path = (std::filesystem::temp_directory_path() /
                   ("chatflow-bench-ledger-" + usage::new_hold_id() + ".db"))
                      .string();
  }
  std::shared_ptr<usage::UsageLedger> sqlite =
      usage::SqliteUsageLedger::open(sqlite_path, usage::Period::month);
  postgres::ClientOptions client;
  client.url = options.postgres_url;
  client.pool_size = static_cast<size_t>(*std::max_element(options.clients.begin(),
                                                           options.clients.end())) +
                     1;  // the writer's
  usage::PostgresLedgerOptions ledger_options;
  auto postgres = std::make_shared<usage::PostgresUsageLedger>(
      std::make_shared<postgres::Client>(client), ledger_options);
  // Tenants of this run alone: earlier runs' rows count nothing here.
  std::string run = "bench-" + usage::new_hold_id().substr(0, 8);
  std::printf("%7s | %-10s | %14s %14s | %12s\n", "clients", "ledger", "reserve p50 us",
              "reserve p99 us", "requests/s");
  for (int clients : options.clients) {
    for (auto& [name, ledger] :
         {std::pair<const char*, usage::UsageLedger*>{"sqlite", sqlite.get()},
          {"postgres", postgres.get()}}) {
      measure(*ledger, std::min(options.requests, 200), clients, options.tenants, run);  // warm-up
      Measurement result = measure(*ledger, options.requests, clients, options.tenants, run);
      std::printf("%7d | %-10s | %14.1f %14.1f | %12.0f\n", clients, name, result.reserve_p50_us,
                  result.reserve_p99_us, result.requests_per_second);
    }
  }
  sqlite.reset();
  if (temporary) {
    std::error_code error;
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(sqlite_path + suffix, error);
  }
  return 0;
}

}  // namespace

void add_bench_ledger_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchLedgerOptions>();
  auto* command = app.add_subcommand(
      "bench-ledger", "Measure the quota ledger's cost per request: SQLite against PostgreSQL");
  command->add_option("--postgres", options->postgres_url, "the PostgreSQL URL to measure")
      ->required();
  command->add_option("--sqlite", options->sqlite_path,
                      "the SQLite file (default: a temporary one)");
  command->add_option("--requests", options->requests, "requests per measurement")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  command->add_option("--clients", options->clients, "concurrent clients")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command->add_option("--tenants", options->tenants, "tenants the clients spread over")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return bench_ledger_command(*options); }; });
}

}  // namespace chatflow::cli
