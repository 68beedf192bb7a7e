// The chatflow subcommands. main.cpp parses the command line (CLI11 stays in that one file);
// each command lives in its own file and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace chatflow::cli {

struct ValidateOptions {
  std::vector<std::string> files;
};
int validate_command(const ValidateOptions& options);

struct GraphOptions {
  std::string file;
  std::string format = "dot";
};
int graph_command(const GraphOptions& options);

struct StagesOptions {
  std::string type;  // empty: list every type
};
int stages_command(const StagesOptions& options);

struct RunOptions {
  std::string file;
  std::string prompt;
  std::string system;
};
int run_command(const RunOptions& options);

struct BenchGraphOptions {
  int stages = 12;
  int requests = 200000;
  std::vector<int> in_flight = {1, 64};
  bool json = false;
};
int bench_graph_command(const BenchGraphOptions& options);

}  // namespace chatflow::cli
