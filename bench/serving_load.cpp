// chatflow bench: a load generator for any OpenAI-compatible server (ours, llama.cpp's, vLLM),
// in the manner of `vllm bench serve`. Keeps --concurrency streaming requests in flight (or
// sends them at a Poisson --rate with at most --concurrency open), and reports time to first
// token, time per output token, inter-token latency and end-to-end latency (mean, p50, p90,
// p99), request and token throughput, and goodput: requests per second that met the SLOs.
//
// Single-threaded Asio: the generator should take as little CPU from the server as possible.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"

namespace chatflow::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

struct BenchServeOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string endpoint = "chat";  // chat or completions
  std::string model;              // empty: the first model the server lists
  int concurrency = 8;
  double rate = 0;  // requests per second (Poisson); 0: closed loop at `concurrency`
  int requests = 200;
  double duration_s = 0;  // > 0: send for this long instead of a number of requests
  int max_tokens = 64;
  double temperature = 1.0;
  bool ignore_eos = true;  // every completion is max_tokens long, so runs compare
  uint64_t seed = 1;
  int64_t distinct = 0;         // > 0: request i repeats request i mod distinct (cache benchmarks)
  bool repeat_prompts = false;  // the eight story openings in turn, unchanged (cache studies)
  int64_t sessions = 0;  // > 0: request i carries session_id bench-(i mod sessions) (A/B splits)
  double slo_ttft_ms = 1000;
  double slo_tpot_ms = 100;
  std::string api_key;  // --api-key or $CHATFLOW_API_KEY; none: no Authorization header
  bool json = false;
  bool verbose = false;
};

double seconds_since(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Story openings. Each request gets one with a name of its own (name_of) unless
// --repeat-prompts: eight prompts in turn would be answered by a semantic cache after the first
// eight requests, and the run would measure the cache instead of the model.
const char* const kPrompts[] = {
    "Once upon a time, there was a little fox who",
    "Tom and his sister went to the park to",
    "The old tree in the garden could",
    "One sunny day, a small bird found a",
    "Lily wanted to bake a cake for her mom, so she",
    "In a big forest lived a bear named Ben who",
    "The boy looked at the sky and saw",
    "Sam had a red ball. He liked to",
};

const char* const kKeyAdvice =
    "the server wants an API key: pass --api-key KEY or set CHATFLOW_API_KEY (`chatflow keys "
    "add` makes one)";

// Retry-After in seconds (RFC 9110 also allows a date, which a server rarely sends): 1 s when
// absent or unreadable, at most 60 s.
double retry_after_seconds(std::string_view value) {
  double seconds = 1;
  if (!value.empty()) {
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (error != std::errc() || end != value.data() + value.size()) seconds = 1;
  }
  return std::clamp(seconds, 0.0, 60.0);
}

struct Sample {
  bool ok = false;
  bool rejected = false;      // 503: the server's admission limit
  bool rate_limited = false;  // 429: the caller's rate limit or quota
  bool cached = false;        // x-chatflow-cache: exact or semantic
  std::string error;
  double ttft = 0;
  double e2e = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  std::string arm;  // x-chatflow-arm of the response, when the pipeline runs an experiment
  std::vector<double> inter_token;
};

struct Target {
  std::string host;
  std::string port;
  std::string path_prefix;  // e.g. "" or "/proxy"
};

std::optional<Target> parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return std::nullopt;
  std::string rest = url.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Target target;
  target.path_prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!target.path_prefix.empty() && target.path_prefix.back() == '/')
    target.path_prefix.pop_back();
  if (target.path_prefix.size() >= 3 &&
      target.path_prefix.compare(target.path_prefix.size() - 3, 3, "/v1") == 0) {
    target.path_prefix.resize(target.path_prefix.size() - 3);
  }
  size_t colon = authority.rfind(':');
  if (colon == std::string::npos) {
    target.host = authority;
    target.port = "80";
  } else {
    target.host = authority.substr(0, colon);
    target.port = authority.substr(colon + 1);
  }
  if (target.host.empty()) return std::nullopt;
  return target;
}

class Bench;
struct Results;
struct ArmResults;

// One keep-alive connection that runs one request at a time.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(net::io_context& io, Bench& bench) : socket_(io), timer_(io), bench_(bench) {}
  void run_next();

 private:
  void connect();
  void send();
  void on_header(beast::error_code error);
  void read_body();
  void on_event(std::string_view data, Clock::time_point now);
  void finish(Sample sample);
  void fail(const std::string& what);
  bool resend_on_fresh_connection();

  tcp::socket socket_;
  net::steady_timer timer_;
  Bench& bench_;
  std::chrono::duration<double> backoff_{0};
  bool connected_ = false;
  bool reused_ = false;  // the connection has carried an answer before this request
  bool resent_ = false;  // this request was sent again on a fresh connection
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::string events_;  // SSE bytes not yet split into events
  std::function<size_t(uint64_t, std::string_view, beast::error_code&)> chunk_body_;
  Clock::time_point sent_;
  Clock::time_point last_token_;
  Sample sample_;
  bool done_event_ = false;
  bool finish_reason_seen_ = false;
};

class Bench {
 public:
  Bench(const BenchServeOptions& options, Target target)
      : options_(options), target_(std::move(target)), generator_(options.seed) {}

  int run();

  // For connections.
  net::io_context& io() { return io_; }
  const Target& target() const { return target_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  // The next request body, or nullopt when no more requests are due yet (or at all).
  std::optional<std::string> next_body();
  void record(Sample sample);
  void idle(std::shared_ptr<Connection> connection);
  const BenchServeOptions& options() const { return options_; }
  bool stopping() const { return stopping_; }

 private:
  std::string body(size_t index) const;
  void schedule_arrival();
  void draw_progress(bool final);
  Results tally(double duration) const;
  std::map<std::string, ArmResults> tally_arms() const;
  void print_json(const Results& results, const std::map<std::string, ArmResults>& arms) const;
  void print_text(const Results& results, const std::map<std::string, ArmResults>& arms) const;
  void report();
  bool all_sent() const {
    return options_.duration_s > 0 ? Clock::now() >= end_of_sending_
                                   : sent_ >= static_cast<size_t>(options_.requests);
  }

  const BenchServeOptions& options_;
  Target target_;
  net::io_context io_;
  tcp::resolver::results_type endpoints_;
  std::mt19937_64 generator_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::deque<std::shared_ptr<Connection>> idle_;
  size_t due_ = 0;  // Poisson arrivals that came and were not sent yet
  size_t sent_ = 0;
  size_t finished_ = 0;
  bool stopping_ = false;
  std::vector<Sample> samples_;
  Clock::time_point start_;
  Clock::time_point end_of_sending_;
  Clock::time_point last_progress_;
  std::optional<net::steady_timer> arrivals_;
  std::optional<net::steady_timer> progress_timer_;
};

// A capitalised made-up name per number: distinct requests differ in a name, which the semantic
// cache's verifier checks, so N distinct requests make N cache entries.
std::string name_of(uint64_t number) {
  static const char* const kSyllables[] = {"ka", "lo", "mi", "ra", "te", "vu", "no", "si",
                                           "da", "pe", "zu", "ho", "bi", "fa", "gu", "ye"};
  std::string name;
  do {
    name += kSyllables[number % std::size(kSyllables)];
    number /= std::size(kSyllables);
  } while (number > 0);
  name[0] = static_cast<char>(name[0] - 'a' + 'A');
  return name;
}

std::string Bench::body(size_t index) const {
  if (options_.distinct > 0) index %= static_cast<size_t>(options_.distinct);
  std::string prompt = kPrompts[index % std::size(kPrompts)];
  if (!options_.repeat_prompts) prompt = "For " + name_of(index) + ": " + prompt;
  json::object request{{"model", options_.model},
                       {"max_tokens", options_.max_tokens},
                       {"temperature", options_.temperature},
                       {"seed", static_cast<int64_t>(options_.seed + index)},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
  if (options_.ignore_eos) request["ignore_eos"] = true;
  if (options_.sessions > 0)
    request["session_id"] =
        "bench-" + std::to_string(index % static_cast<size_t>(options_.sessions));
  if (options_.endpoint == "chat") {
    request["messages"] = json::array{json::object{{"role", "user"}, {"content", prompt}}};
  } else {
    request["prompt"] = prompt;
  }
  return json::serialize(request);
}

std::optional<std::string> Bench::next_body() {
  if (stopping_ || all_sent()) return std::nullopt;
  if (options_.rate > 0) {
    if (due_ == 0) return std::nullopt;
    --due_;
  }
  return body(sent_++);
}

void Bench::schedule_arrival() {
  std::exponential_distribution<double> gap(options_.rate);
  arrivals_->expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(generator_))));
  arrivals_->async_wait([this](beast::error_code error) {
    if (error || stopping_ || all_sent()) return;
    ++due_;
    if (!idle_.empty()) {
      auto connection = idle_.front();
      idle_.pop_front();
      connection->run_next();
    }
    schedule_arrival();
  });
}

void Bench::idle(std::shared_ptr<Connection> connection) {
  idle_.push_back(std::move(connection));
  bool nothing_running = idle_.size() == connections_.size();
  if (nothing_running && (all_sent() || stopping_)) {
    stopping_ = true;
    if (arrivals_) arrivals_->cancel();
    if (progress_timer_) progress_timer_->cancel();
    for (auto& idle : idle_)
      idle.reset();
    idle_.clear();
    connections_.clear();
  }
}

void Bench::record(Sample sample) {
  ++finished_;
  if (!sample.ok && !sample.rejected && options_.verbose) {
    std::fprintf(stderr, "request failed: %s\n", sample.error.c_str());
  }
  samples_.push_back(std::move(sample));
}

void Bench::draw_progress(bool final) {
  if (!isatty(STDERR_FILENO) || options_.json) return;
  double elapsed = seconds_since(start_, Clock::now());
  double fraction =
      options_.duration_s > 0
          ? std::min(1.0, elapsed / options_.duration_s)
          : static_cast<double>(finished_) / static_cast<double>(std::max(1, options_.requests));
  const int width = 30;
  int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r[%s] %zu done  %.1f s  %.1f req/s%s", bar.c_str(), finished_, elapsed,
               elapsed > 0 ? static_cast<double>(finished_) / elapsed : 0.0, final ? "\n" : "");
}

void Connection::run_next() {
  auto body = bench_.next_body();
  if (!body) return bench_.idle(shared_from_this());
  const Target& target = bench_.target();
  request_ = {};
  request_.method(http::verb::post);
  request_.target(target.path_prefix + (bench_.options().endpoint == "chat" ? "/v1/chat/completions"
                                                                            : "/v1/completions"));
  request_.version(11);
  request_.set(http::field::host, target.host + ":" + target.port);
  request_.set(http::field::content_type, "application/json");
  if (!bench_.options().api_key.empty())
    request_.set(http::field::authorization, "Bearer " + bench_.options().api_key);
  request_.keep_alive(true);
  request_.body() = std::move(*body);
  request_.prepare_payload();
  sample_ = {};
  events_.clear();
  done_event_ = false;
  finish_reason_seen_ = false;
  resent_ = false;
  if (connected_) return send();
  connect();
}

// A server may close a kept-alive connection between answers (llama-server does after a few
// requests); a request that found its reused connection closed before any answer came back is
// sent once more on a new one, as HTTP clients do, instead of counting as failed.
bool Connection::resend_on_fresh_connection() {
  if (!reused_ || resent_) return false;
  resent_ = true;
  reused_ = false;
  beast::error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(bench_.io());
  connected_ = false;
  buffer_.clear();
  connect();
  return true;
}

void Connection::connect() {
  net::async_connect(socket_, bench_.endpoints(),
                     [self = shared_from_this()](beast::error_code error, const tcp::endpoint&) {
                       if (error) return self->fail("connect: " + error.message());
                       self->connected_ = true;
                       self->socket_.set_option(tcp::no_delay(true));
                       self->send();
                     });
}

void Connection::send() {
  if (!resent_) sent_ = Clock::now();  // a resent request's times count from its first sending
  http::async_write(socket_, request_,
                    [self = shared_from_this()](beast::error_code error, size_t) {
                      if (error && self->resend_on_fresh_connection()) return;
                      if (error) return self->fail("write: " + error.message());
                      self->parser_.emplace();
                      self->parser_->body_limit(64u << 20);
                      http::async_read_header(
                          self->socket_, self->buffer_, *self->parser_,
                          [self](beast::error_code error, size_t) { self->on_header(error); });
                    });
}

void Connection::on_header(beast::error_code error) {
  if (error && buffer_.size() == 0 && resend_on_fresh_connection()) return;
  if (error) return fail("read: " + error.message());
  unsigned status = parser_->get().result_int();
  if (auto arm = parser_->get().find("x-chatflow-arm"); arm != parser_->get().end())
    sample_.arm = std::string(arm->value());
  if (auto cache = parser_->get().find("x-chatflow-cache"); cache != parser_->get().end())
    sample_.cached = cache->value() == "exact" || cache->value() == "semantic";
  if (status == 200) {
    // The parser keeps a reference to the callback, so it lives in the connection.
    chunk_body_ = [this](uint64_t, std::string_view data, beast::error_code&) {
      events_.append(data);
      auto now = Clock::now();
      size_t end;
      while ((end = events_.find("\n\n")) != std::string::npos) {
        std::string event = events_.substr(0, end);
        events_.erase(0, end + 2);
        if (event.rfind("data: ", 0) == 0) on_event(std::string_view(event).substr(6), now);
      }
      return data.size();
    };
    parser_->on_chunk_body(chunk_body_);
  }
  read_body();
}

void Connection::read_body() {
  http::async_read_some(
      socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code error, size_t) {
        if (error) return self->fail("read: " + error.message());
        if (!self->parser_->is_done()) return self->read_body();
        auto now = Clock::now();
        Sample sample = std::move(self->sample_);
        unsigned status = self->parser_->get().result_int();
        sample.e2e = seconds_since(self->sent_, now);
        if (status == 503 || status == 429) {
          sample.rejected = status == 503;
          sample.rate_limited = status == 429;
          sample.error = std::to_string(status);
          // A polite client waits as told before it asks again (on this connection; the others
          // learn it from their own answers).
          self->backoff_ = std::chrono::duration<double>(
              retry_after_seconds(self->parser_->get()[http::field::retry_after]));
        } else if (status != 200) {
          sample.error = "HTTP " + std::to_string(status) + ": " + self->parser_->get().body();
        } else if (!sample.error.empty()) {
          // an error event inside the stream
        } else if (!self->done_event_ || !self->finish_reason_seen_) {
          sample.error = "the stream ended without a finish_reason and [DONE]";
        } else {
          sample.ok = true;
        }
        self->reused_ = true;
        if (!self->parser_->get().keep_alive()) {
          beast::error_code ignored;
          self->socket_.close(ignored);
          self->socket_ = tcp::socket(self->bench_.io());
          self->connected_ = false;
          self->reused_ = false;
        }
        self->finish(std::move(sample));
      });
}

void Connection::on_event(std::string_view data, Clock::time_point now) {
  if (data == "[DONE]") {
    done_event_ = true;
    return;
  }
  boost::system::error_code error;
  json::value event = json::parse(data, error);
  if (error || !event.is_object()) {
    sample_.error = "an event that is not JSON: " + std::string(data.substr(0, 200));
    return;
  }
  const json::object& object = event.get_object();
  if (auto* failure = object.if_contains("error")) {
    sample_.error = "error event: " + json::serialize(*failure);
    return;
  }
  if (auto* usage = object.if_contains("usage"); usage && usage->is_object()) {
    if (auto* tokens = usage->get_object().if_contains("completion_tokens"))
      sample_.output_tokens = tokens->to_number<int64_t>();
    if (auto* tokens = usage->get_object().if_contains("prompt_tokens"))
      sample_.prompt_tokens = tokens->to_number<int64_t>();
  }
  auto* choices = object.if_contains("choices");
  if (!choices || !choices->is_array() || choices->get_array().empty()) return;
  const json::object& choice = choices->get_array()[0].get_object();
  if (auto* reason = choice.if_contains("finish_reason"); reason && reason->is_string())
    finish_reason_seen_ = true;
  bool has_text = false;
  if (auto* delta = choice.if_contains("delta"); delta && delta->is_object()) {
    auto* content = delta->get_object().if_contains("content");
    has_text = content && content->is_string() && !content->get_string().empty();
  } else if (auto* text = choice.if_contains("text"); text && text->is_string()) {
    has_text = !text->get_string().empty();
  }
  if (!has_text) return;
  if (sample_.ttft == 0) {
    sample_.ttft = seconds_since(sent_, now);
  } else {
    sample_.inter_token.push_back(seconds_since(last_token_, now));
  }
  last_token_ = now;
}

void Connection::finish(Sample sample) {
  bench_.record(std::move(sample));
  if (backoff_.count() > 0) {
    auto wait = std::chrono::duration_cast<Clock::duration>(backoff_);
    backoff_ = {};
    timer_.expires_after(wait);
    timer_.async_wait([self = shared_from_this()](beast::error_code) { self->run_next(); });
    return;
  }
  run_next();
}

void Connection::fail(const std::string& what) {
  Sample sample = std::move(sample_);
  sample.error = what;
  sample.e2e = seconds_since(sent_, Clock::now());
  beast::error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(bench_.io());
  connected_ = false;
  buffer_.clear();
  finish(std::move(sample));
}

struct Summary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

Summary summarize(std::vector<double> values) {
  Summary summary;
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    double position = q * static_cast<double>(values.size() - 1);
    size_t low = static_cast<size_t>(position);
    size_t high = std::min(low + 1, values.size() - 1);
    double weight = position - static_cast<double>(low);
    return values[low] * (1 - weight) + values[high] * weight;
  };
  double total = 0;
  for (double value : values)
    total += value;
  summary.mean = total / static_cast<double>(values.size());
  summary.p50 = at(0.5);
  summary.p90 = at(0.9);
  summary.p99 = at(0.99);
  return summary;
}

int Bench::run() {
  try {
    tcp::resolver resolver(io_);
    endpoints_ = resolver.resolve(target_.host, target_.port);
  } catch (const std::exception& error) {
    std::cerr << "chatflow bench: cannot resolve " << target_.host << ": " << error.what() << "\n";
    return 1;
  }
  start_ = Clock::now();
  end_of_sending_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options_.duration_s));
  for (int i = 0; i < options_.concurrency; ++i)
    connections_.push_back(std::make_shared<Connection>(io_, *this));
  if (options_.rate > 0) {
    arrivals_.emplace(io_);
    schedule_arrival();
    for (auto& connection : connections_)
      idle_.push_back(connection);
  } else {
    for (auto& connection : std::vector(connections_))
      connection->run_next();
  }
  progress_timer_.emplace(io_);
  std::function<void()> tick = [this, &tick] {
    progress_timer_->expires_after(std::chrono::milliseconds(250));
    progress_timer_->async_wait([this, &tick](beast::error_code error) {
      if (error) return;
      draw_progress(false);
      // A timed run with nothing in flight ends when its time is up.
      if (options_.duration_s > 0 && all_sent() && idle_.size() == connections_.size()) {
        stopping_ = true;
        if (arrivals_) arrivals_->cancel();
        connections_.clear();
        idle_.clear();
        return;
      }
      tick();
    });
  };
  tick();
  io_.run();
  draw_progress(true);
  report();
  size_t failed = 0;
  for (const auto& sample : samples_)
    failed += !sample.ok && !sample.rejected && !sample.rate_limited;
  return failed == 0 ? 0 : 3;
}

// What a run measured, summed over its samples.
struct Results {
  double duration = 0;
  size_t ok = 0, rejected = 0, rate_limited = 0, failed = 0, good = 0;
  size_t cached = 0;          // successful answers a cache gave
  bool unauthorized = false;  // a request was answered 401
  int64_t output_tokens = 0, prompt_tokens = 0;
  std::string first_error;
  Summary ttft, tpot, itl, e2e;
  double request_rate = 0, token_rate = 0, goodput = 0;
};

// Per experiment arm, side by side (the same run, so the same machine load).
struct ArmResults {
  size_t ok = 0, failed = 0;
  int64_t output_tokens = 0;
  std::vector<double> ttft, e2e;
};

Results Bench::tally(double duration) const {
  Results results;
  results.duration = duration;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& sample : samples_) {
    if (sample.rejected || sample.rate_limited) {
      ++(sample.rejected ? results.rejected : results.rate_limited);
      continue;
    }
    if (!sample.ok) {
      ++results.failed;
      if (results.first_error.empty()) results.first_error = sample.error;
      results.unauthorized = results.unauthorized || sample.error.rfind("HTTP 401", 0) == 0;
      continue;
    }
    ++results.ok;
    results.cached += sample.cached;
    results.output_tokens += sample.output_tokens;
    results.prompt_tokens += sample.prompt_tokens;
    ttft.push_back(sample.ttft);
    e2e.push_back(sample.e2e);
    double per_token = 0;
    if (sample.output_tokens > 1) {
      per_token = (sample.e2e - sample.ttft) / static_cast<double>(sample.output_tokens - 1);
      tpot.push_back(per_token);
    }
    itl.insert(itl.end(), sample.inter_token.begin(), sample.inter_token.end());
    if (sample.ttft * 1000 <= options_.slo_ttft_ms && per_token * 1000 <= options_.slo_tpot_ms)
      ++results.good;
  }
  results.ttft = summarize(ttft);
  results.tpot = summarize(tpot);
  results.itl = summarize(itl);
  results.e2e = summarize(e2e);
  results.request_rate = static_cast<double>(results.ok) / duration;
  results.token_rate = static_cast<double>(results.output_tokens) / duration;
  results.goodput = static_cast<double>(results.good) / duration;
  return results;
}

std::map<std::string, ArmResults> Bench::tally_arms() const {
  std::map<std::string, ArmResults> arms;
  for (const auto& sample : samples_) {
    if (sample.arm.empty() || sample.rejected || sample.rate_limited) continue;
    ArmResults& arm = arms[sample.arm];
    if (!sample.ok) {
      ++arm.failed;
      continue;
    }
    ++arm.ok;
    arm.output_tokens += sample.output_tokens;
    arm.ttft.push_back(sample.ttft);
    arm.e2e.push_back(sample.e2e);
  }
  return arms;
}

void Bench::print_json(const Results& results,
                       const std::map<std::string, ArmResults>& arms) const {
  auto summary_json = [](const Summary& s) {
    return json::object{{"mean_ms", s.mean * 1000},
                        {"p50_ms", s.p50 * 1000},
                        {"p90_ms", s.p90 * 1000},
                        {"p99_ms", s.p99 * 1000}};
  };
  json::object out{{"successful_requests", results.ok},
                   {"rejected_requests", results.rejected},
                   {"rate_limited_requests", results.rate_limited},
                   {"cached_answers", results.cached},
                   {"failed_requests", results.failed},
                   {"duration_s", results.duration},
                   {"concurrency", options_.concurrency},
                   {"request_rate", options_.rate},
                   {"max_tokens", options_.max_tokens},
                   {"total_input_tokens", results.prompt_tokens},
                   {"total_output_tokens", results.output_tokens},
                   {"request_throughput", results.request_rate},
                   {"output_throughput", results.token_rate},
                   {"goodput", results.goodput},
                   {"slo_ttft_ms", options_.slo_ttft_ms},
                   {"slo_tpot_ms", options_.slo_tpot_ms},
                   {"ttft", summary_json(results.ttft)},
                   {"tpot", summary_json(results.tpot)},
                   {"itl", summary_json(results.itl)},
                   {"e2e", summary_json(results.e2e)}};
  if (!results.first_error.empty()) out["first_error"] = results.first_error;
  if (!arms.empty()) {
    json::object by_arm;
    for (const auto& [name, arm] : arms) {
      by_arm[name] = json::object{{"successful_requests", arm.ok},
                                  {"failed_requests", arm.failed},
                                  {"output_tokens", arm.output_tokens},
                                  {"ttft", summary_json(summarize(arm.ttft))},
                                  {"e2e", summary_json(summarize(arm.e2e))}};
    }
    out["arms"] = std::move(by_arm);
  }
  std::cout << json::serialize(out) << "\n";
}

void Bench::print_text(const Results& results,
                       const std::map<std::string, ArmResults>& arms) const {
  std::printf("============ Serving benchmark ============\n");
  std::printf("%-40s %zu\n", "Successful requests:", results.ok);
  std::printf("%-40s %zu\n", "Rejected (503, admission limit):", results.rejected);
  std::printf("%-40s %zu\n", "Rate limited (429, waited Retry-After):", results.rate_limited);
  std::printf("%-40s %zu\n", "Answered from a cache:", results.cached);
  std::printf("%-40s %zu\n", "Failed:", results.failed);
  if (!results.first_error.empty())
    std::printf("  first failure: %s\n", results.first_error.c_str());
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", results.duration);
  std::printf("%-40s %d%s\n", "Concurrency:", options_.concurrency,
              options_.rate > 0 ? " (at most)" : "");
  if (options_.rate > 0)
    std::printf("%-40s %.2f\n", "Request rate (Poisson, req/s):", options_.rate);
  std::printf("%-40s %lld\n", "Total input tokens:", static_cast<long long>(results.prompt_tokens));
  std::printf("%-40s %lld\n",
              "Total generated tokens:", static_cast<long long>(results.output_tokens));
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", results.request_rate);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", results.token_rate);
  char goodput_label[96];
  std::snprintf(goodput_label, sizeof goodput_label,
                "Goodput (req/s, TTFT<=%gms TPOT<=%gms):", options_.slo_ttft_ms,
                options_.slo_tpot_ms);
  std::printf("%-40s %.2f\n", goodput_label, results.goodput);
  auto section = [](const char* name, const Summary& s) {
    std::printf("---------- %s (ms) ----------\n", name);
    std::printf("  mean %9.3f   p50 %9.3f   p90 %9.3f   p99 %9.3f\n", s.mean * 1000, s.p50 * 1000,
                s.p90 * 1000, s.p99 * 1000);
  };
  section("Time to first token", results.ttft);
  section("Time per output token (excl. 1st)", results.tpot);
  section("Inter-token latency", results.itl);
  section("End-to-end latency", results.e2e);
  if (arms.empty()) return;
  std::printf("---------- Per arm (x-chatflow-arm) ----------\n");
  std::printf("  %-16s %8s %7s %12s %12s %12s %12s\n", "arm", "ok", "failed", "TTFT p50 ms",
              "TTFT p99 ms", "E2E p50 ms", "E2E p99 ms");
  for (const auto& [name, arm] : arms) {
    Summary first = summarize(arm.ttft), whole = summarize(arm.e2e);
    std::printf("  %-16s %8zu %7zu %12.3f %12.3f %12.3f %12.3f\n", name.c_str(), arm.ok, arm.failed,
                first.p50 * 1000, first.p99 * 1000, whole.p50 * 1000, whole.p99 * 1000);
  }
}

void Bench::report() {
  Results results = tally(seconds_since(start_, Clock::now()));
  std::map<std::string, ArmResults> arms = tally_arms();
  if (options_.json) {
    print_json(results, arms);
  } else {
    print_text(results, arms);
  }
  if (results.unauthorized) std::cerr << "chatflow bench: " << kKeyAdvice << "\n";
  if (results.ok > 0 && results.cached * 2 > results.ok) {
    std::cerr << "chatflow bench: warning: " << results.cached << " of " << results.ok
              << " answers came from a cache (x-chatflow-cache): these figures measure the cache, "
                 "not the model"
              << (options_.repeat_prompts || options_.distinct > 0
                      ? " (--repeat-prompts and --distinct repeat requests on purpose)"
                      : "")
              << "\n";
  }
}

// Exit codes: 2 for a malformed --url, 1 when the server cannot be asked for its model, 3 when
// requests failed; these messages name the command (`chatflow bench: ...`).
int bench_command(const BenchServeOptions& options) {
  auto target = parse_url(options.url);
  if (!target) {
    std::cerr << "chatflow bench: --url must look like http://HOST:PORT[/v1], got '" << options.url
              << "'\n";
    return 2;
  }
  BenchServeOptions resolved = options;
  if (resolved.model.empty()) {
    // Ask the server which model it serves.
    try {
      net::io_context io;
      tcp::resolver resolver(io);
      beast::tcp_stream stream(io);
      stream.expires_after(std::chrono::seconds(10));
      stream.connect(resolver.resolve(target->host, target->port));
      http::request<http::empty_body> request(http::verb::get, target->path_prefix + "/v1/models",
                                              11);
      request.set(http::field::host, target->host);
      if (!options.api_key.empty())
        request.set(http::field::authorization, "Bearer " + options.api_key);
      http::write(stream, request);
      beast::flat_buffer buffer;
      http::response<http::string_body> response;
      http::read(stream, buffer, response);
      if (response.result_int() == 401) {
        std::cerr << "chatflow bench: GET " << options.url << "/v1/models answered 401"
                  << (options.api_key.empty() ? "" : " to the key given") << ": " << kKeyAdvice
                  << "\n";
        return 1;
      }
      if (response.result_int() != 200) {
        throw std::runtime_error("GET /v1/models answered HTTP " +
                                 std::to_string(response.result_int()) + ": " + response.body());
      }
      json::value models = json::parse(response.body());
      resolved.model = std::string(models.at("data").at(0).at("id").as_string());
    } catch (const std::exception& error) {
      std::cerr << "chatflow bench: cannot list the models at " << options.url << " ("
                << error.what() << "); pass --model\n";
      return 1;
    }
  }
  Bench bench(resolved, *target);
  return bench.run();
}

}  // namespace

void add_bench_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchServeOptions>();
  auto* command = app.add_subcommand(
      "bench", "Load-test an OpenAI-compatible server: TTFT, TPOT, ITL, throughput, goodput");
  command->add_option("--url", options->url, "the server's base URL (with or without /v1)")
      ->capture_default_str();
  command->add_option("--endpoint", options->endpoint, "chat or completions")
      ->check(CLI::IsMember({"chat", "completions"}))
      ->capture_default_str();
  command->add_option("--model", options->model,
                      "model id (default: the first one the server lists)");
  command
      ->add_option("--concurrency", options->concurrency,
                   "requests in flight (with --rate: at most)")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  command->add_option("--rate", options->rate, "Poisson arrivals per second; 0: closed loop")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  command->add_option("--requests", options->requests, "requests to send")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  command
      ->add_option("--duration", options->duration_s,
                   "send for this many seconds instead of --requests")
      ->check(CLI::Range(0.0, 1e6));
  command->add_option("--max-tokens", options->max_tokens, "each request's max_tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--temperature", options->temperature, "each request's temperature")
      ->check(CLI::Range(0.0, 2.0))
      ->capture_default_str();
  command->add_flag("--ignore-eos,!--no-ignore-eos", options->ignore_eos,
                    "generate exactly --max-tokens (default on)");
  command->add_option("--seed", options->seed, "request i is sent seed S + i")
      ->capture_default_str();
  command
      ->add_option("--distinct", options->distinct,
                   "N > 0: only N different requests, request i repeating request i mod N, each "
                   "with its own words (to fill and then hit a cache)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  command
      ->add_option("--sessions", options->sessions,
                   "N > 0: request i carries session_id bench-(i mod N), as N callers would (an "
                   "A/B split by session then reports each arm)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  command->add_option("--slo-ttft-ms", options->slo_ttft_ms, "goodput: TTFT at most")
      ->capture_default_str();
  command->add_option("--slo-tpot-ms", options->slo_tpot_ms, "goodput: TPOT at most")
      ->capture_default_str();
  command->add_flag("--repeat-prompts", options->repeat_prompts,
                    "send eight fixed prompts in turn instead of a distinct prompt per request "
                    "(to study caches)");
  command
      ->add_option("--api-key", options->api_key,
                   "sent as a Bearer token (default: $CHATFLOW_API_KEY)")
      ->envname("CHATFLOW_API_KEY");
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command->add_flag("--verbose", options->verbose, "print every failure");
  command->callback(
      [&selected, options] { selected = [options] { return bench_command(*options); }; });
}

}  // namespace chatflow::cli
