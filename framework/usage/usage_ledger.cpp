#include "framework/usage/usage_ledger.h"

#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>

namespace chatflow::usage {

std::optional<Period> period_from_name(const std::string& name) {
  if (name == "day") return Period::day;
  if (name == "month") return Period::month;
  if (name == "total") return Period::total;
  return std::nullopt;
}

std::string_view to_string(Period period) {
  switch (period) {
    case Period::day:
      return "day";
    case Period::month:
      return "month";
    case Period::total:
      return "total";
  }
  return "total";
}

int64_t period_start(Period period, int64_t now) {
  if (period == Period::total) return 0;
  std::time_t time = static_cast<std::time_t>(now);
  std::tm parts{};
  gmtime_r(&time, &parts);
  parts.tm_hour = parts.tm_min = parts.tm_sec = 0;
  if (period == Period::month) parts.tm_mday = 1;
  return static_cast<int64_t>(timegm(&parts));
}

int64_t UsageLedger::period_start() const {
  return usage::period_start(period_, static_cast<int64_t>(std::time(nullptr)));
}

std::string new_hold_id() {
  // 128 random bits: two replicas (or two processes started in the same second) never draw the
  // same id.
  static std::mutex mutex;
  static std::mt19937_64 generator{[] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }()};
  std::lock_guard lock(mutex);
  char id[33];
  std::snprintf(id, sizeof id, "%016llx%016llx", static_cast<unsigned long long>(generator()),
                static_cast<unsigned long long>(generator()));
  return id;
}

}  // namespace chatflow::usage
