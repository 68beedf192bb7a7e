// MCP's stdio transport: the server is a child process; each message is one line of JSON on its
// stdin and stdout, and what it writes on stderr is kept (the last few KiB) to say why it died.
// The child gets its own process group, so that stopping it stops what it started (npx starts
// node); it also exits by itself when chatflow goes, as its stdin then ends.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "framework/tools/mcp_transport.h"

namespace chatflow::tools {
namespace {
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kStderrKeptBytes = 4096;
constexpr auto kPollSlice = std::chrono::milliseconds(20);
const char* const kPassedEnvironment[] = {"PATH", "HOME",    "LANG",  "LC_ALL", "TMPDIR",
                                          "USER", "LOGNAME", "SHELL", "TERM"};

// The child's environment: the few variables a program needs to run, then the configured ones.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> values;
  for (const char* name : kPassedEnvironment)
    if (const char* value = std::getenv(name)) values[name] = value;
  for (const auto& [name, value] : extra)
    values[name] = value;
  std::vector<std::string> entries;
  for (const auto& [name, value] : values)
    entries.push_back(name + "=" + value);
  return entries;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> list;
  for (auto& text : strings)
    list.push_back(text.data());
  list.push_back(nullptr);
  return list;
}

// Writes all of `bytes` before `deadline` (stdin is non-blocking: a server that stopped reading
// must not hold the caller), without the SIGPIPE a closed pipe would raise killing the server.
enum class Written { all, timed_out, broken };

Written write_all(int fd, std::string_view bytes, Clock::time_point deadline) {
  sigset_t pipe_signal;
  sigset_t previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  Written outcome = Written::all;
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EAGAIN) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd writable{fd, POLLOUT, 0};
      if (left.count() <= 0 || ::poll(&writable, 1, static_cast<int>(left.count())) <= 0) {
        outcome = Written::timed_out;
        break;
      }
      continue;
    }
    if (written < 0) {
      outcome = Written::broken;
      break;
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  if (outcome == Written::broken && errno == EPIPE) {
    // Take the pending SIGPIPE this thread raised before it is unblocked.
    timespec none{0, 0};
    sigtimedwait(&pipe_signal, nullptr, &none);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return outcome;
}

class StdioTransport final : public McpTransport {
 public:
  explicit StdioTransport(McpStdioOptions options) : options_(std::move(options)) {}

  ~StdioTransport() override {
    stop_process();
    stderr_stop_ = true;
    if (stderr_reader_.joinable()) stderr_reader_.join();
    for (int fd : {stdin_fd_, stdout_fd_, stderr_fd_})
      if (fd >= 0) ::close(fd);
  }

  std::optional<McpFailure> start() {
    int in[2], out[2], err[2], status[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
        pipe2(status, O_CLOEXEC) != 0) {
      return McpFailure{McpFailure::Kind::failed,
                        std::string("cannot make pipes: ") + std::strerror(errno)};
    }
    // Everything the child needs is made before fork: after it, only system calls.
    std::vector<std::string> argv_strings{options_.command};
    argv_strings.insert(argv_strings.end(), options_.args.begin(), options_.args.end());
    std::vector<std::string> env_strings = child_environment(options_.env);
    std::vector<char*> argv = pointers(argv_strings);
    std::vector<char*> envp = pointers(env_strings);
    std::string path = lookup_path(env_strings);
    const char* directory =
        options_.working_directory.empty() ? nullptr : options_.working_directory.c_str();
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      // The thread that forks may block signals (a server's signal thread takes them) and the
      // server may ignore SIGPIPE: the tool server starts with neither.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGPIPE, SIG_DFL);
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      // The status pipe stays open as fd 3 (closed by a successful exec) to report a failed one.
      dup2(status[1], 3);
      fcntl(3, F_SETFD, FD_CLOEXEC);
      syscall(SYS_close_range, 4u, ~0u, 0);
      if (directory == nullptr || chdir(directory) == 0)
        execve(path.c_str(), argv.data(), envp.data());
      int error = errno;
      (void)!::write(3, &error, sizeof error);
      _exit(127);
    }
    int fork_error = errno;
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    ::close(status[1]);
    stdin_fd_ = in[1];
    fcntl(stdin_fd_, F_SETFL, fcntl(stdin_fd_, F_GETFL) | O_NONBLOCK);
    stdout_fd_ = out[0];
    stderr_fd_ = err[0];
    if (pid < 0) {
      ::close(status[0]);
      return McpFailure{McpFailure::Kind::failed,
                        std::string("cannot start a process: ") + std::strerror(fork_error)};
    }
    pid_ = pid;
    int exec_error = 0;
    ssize_t got;
    do {
      got = ::read(status[0], &exec_error, sizeof exec_error);
    } while (got < 0 && errno == EINTR);
    ::close(status[0]);
    if (got == static_cast<ssize_t>(sizeof exec_error)) {
      reap(true);
      usable_ = false;
      return McpFailure{McpFailure::Kind::failed,
                        "cannot run '" + options_.command + "': " + std::strerror(exec_error)};
    }
    stderr_reader_ = std::thread([this] { read_stderr(); });
    return std::nullopt;
  }

  McpExchange send(const std::string& message, std::optional<int64_t> id,
                   const McpSendOptions& options) override {
    if (!usable_) return {std::nullopt, closed_failure()};
    Written written = write_all(stdin_fd_, message + "\n", options.deadline);
    if (written == Written::timed_out) {
      return {std::nullopt,
              McpFailure{McpFailure::Kind::timeout, "did not read its stdin before the deadline"}};
    }
    if (written == Written::broken) return {std::nullopt, closed_failure()};
    if (!id) return {};
    while (true) {
      std::string line;
      if (auto failure = read_line(line, options)) return {std::nullopt, std::move(failure)};
      if (line.empty()) continue;
      std::string error;
      auto messages = jsonrpc::read_messages(line, error);
      if (!messages) {
        // The stream can no longer be trusted to hold whole messages: the server is restarted.
        usable_ = false;
        return {std::nullopt,
                McpFailure{McpFailure::Kind::malformed, "wrote on stdout a line that is " + error}};
      }
      for (auto& received : *messages) {
        if (received.kind == jsonrpc::Message::Kind::response) {
          if (received.id.is_int64() && received.id.as_int64() == *id)
            return {std::move(received), std::nullopt};
          continue;  // the late answer to a request given up on
        }
        if (received.kind == jsonrpc::Message::Kind::request) {
          std::string answer =
              received.method == "ping"
                  ? jsonrpc::response(received.id, json::object{})
                  : jsonrpc::error_response(received.id, -32601,
                                            "method not found: " + received.method);
          write_all(stdin_fd_, answer + "\n", options.deadline);
          continue;
        }
        if (notification_handler_) notification_handler_(received);
      }
    }
  }

  // A child that exited while idle (killed, crashed) is found here, before a message is sent.
  bool usable() const override {
    if (usable_ && pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        usable_ = false;
      }
    }
    return usable_;
  }

 private:
  // A command with a '/' runs as given; otherwise it is looked for on the child's PATH here
  // (the server's own PATH is not the child's).
  std::string lookup_path(const std::vector<std::string>& environment) const {
    if (options_.command.find('/') != std::string::npos) return options_.command;
    std::string path_list = "/usr/local/bin:/usr/bin:/bin";
    for (const auto& entry : environment)
      if (entry.rfind("PATH=", 0) == 0) path_list = entry.substr(5);
    size_t at = 0;
    while (at <= path_list.size()) {
      size_t end = path_list.find(':', at);
      if (end == std::string::npos) end = path_list.size();
      std::string directory = path_list.substr(at, end - at);
      std::string candidate = (directory.empty() ? "." : directory) + "/" + options_.command;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      at = end + 1;
    }
    return options_.command;  // execve then fails with ENOENT, reported as such
  }

  // One line of stdout (without its newline), or why none came.
  std::optional<McpFailure> read_line(std::string& line, const McpSendOptions& options) {
    while (true) {
      size_t newline = stdout_buffer_.find('\n');
      if (newline != std::string::npos) {
        line = stdout_buffer_.substr(0, newline);
        stdout_buffer_.erase(0, newline + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return std::nullopt;
      }
      if (stdout_buffer_.size() > options_.max_message_bytes) {
        usable_ = false;
        return McpFailure{McpFailure::Kind::malformed,
                          "wrote a line longer than " + std::to_string(options_.max_message_bytes) +
                              " bytes on stdout"};
      }
      if (options.cancelled && options.cancelled())
        return McpFailure{McpFailure::Kind::cancelled, "the request was cancelled"};
      auto left = options.deadline - Clock::now();
      if (left <= Clock::duration::zero())
        return McpFailure{McpFailure::Kind::timeout, "gave no answer before the deadline"};
      auto wait = std::min<Clock::duration>(left, kPollSlice);
      pollfd readable{stdout_fd_, POLLIN, 0};
      int ready = ::poll(
          &readable, 1,
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) +
              1);
      if (ready <= 0) continue;
      char chunk[65536];
      ssize_t got = ::read(stdout_fd_, chunk, sizeof chunk);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        usable_ = false;
        return closed_failure();
      }
      stdout_buffer_.append(chunk, static_cast<size_t>(got));
    }
  }

  // The process ended (or closed its stdout): how, and the end of what it wrote on stderr.
  McpFailure closed_failure() {
    usable_ = false;
    std::string how = reap(false);
    // Give the stderr reader a moment to take the last words of a process that just died.
    for (int i = 0; i < 25 && !stderr_done_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
    std::string said;
    {
      std::lock_guard lock(stderr_mutex_);
      said = stderr_tail_;
    }
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r'))
      said.pop_back();
    return McpFailure{McpFailure::Kind::closed,
                      how + (said.empty() ? "" : "; its stderr ends: " + said)};
  }

  // Waits for the child when it has ended (or, with `block`, until it does); says how it ended.
  std::string reap(bool block) {
    if (pid_ <= 0) return exit_description_;
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 50 && done == 0; ++i) {
      done = waitpid(pid_, &status, block ? 0 : WNOHANG);
      if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(4));
    }
    if (done != pid_) return "closed its stdout";
    pid_ = -1;
    if (WIFEXITED(status)) {
      exit_description_ = "exited with status " + std::to_string(WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
      exit_description_ = "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                          strsignal(WTERMSIG(status)) + ")";
    }
    return exit_description_;
  }

  // MCP's shutdown for stdio: close its stdin, then SIGTERM, then SIGKILL, to its whole group.
  void stop_process() {
    if (stdin_fd_ >= 0) {
      ::close(stdin_fd_);
      stdin_fd_ = -1;
    }
    if (pid_ <= 0) return;
    auto waited = [this](std::chrono::milliseconds limit) {
      auto until = Clock::now() + limit;
      while (Clock::now() < until) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return false;
    };
    if (waited(std::chrono::milliseconds(200))) return;
    ::kill(-pid_, SIGTERM);
    if (waited(std::chrono::milliseconds(500))) return;
    ::kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Drains stderr for the life of the transport (a full pipe would stop the server), keeping
  // its end.
  void read_stderr() {
    char chunk[4096];
    while (!stderr_stop_) {
      pollfd readable{stderr_fd_, POLLIN, 0};
      if (::poll(&readable, 1, 50) <= 0) continue;
      ssize_t got = ::read(stderr_fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      std::lock_guard lock(stderr_mutex_);
      stderr_tail_.append(chunk, static_cast<size_t>(got));
      if (stderr_tail_.size() > kStderrKeptBytes)
        stderr_tail_.erase(0, stderr_tail_.size() - kStderrKeptBytes);
    }
    stderr_done_ = true;
  }

  McpStdioOptions options_;
  mutable pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  mutable bool usable_ = true;
  std::string stdout_buffer_;
  std::string exit_description_ = "ended";
  std::thread stderr_reader_;
  std::atomic<bool> stderr_stop_{false};
  std::atomic<bool> stderr_done_{false};
  std::mutex stderr_mutex_;
  std::string stderr_tail_;
};

}  // namespace

std::unique_ptr<McpTransport> start_stdio_transport(const McpStdioOptions& options,
                                                    std::optional<McpFailure>& failure) {
  auto transport = std::make_unique<StdioTransport>(options);
  failure = transport->start();
  if (failure) return nullptr;
  return transport;
}

}  // namespace chatflow::tools
