// chatflow bench-chat-template: the cost of rendering a chat template, which runs for every chat
// request. The template is compiled once (as the engine caches it); each iteration renders a
// 10-turn conversation (a system prompt, then users and assistants taking turns) from scratch,
// variables included. Without --template-file a ChatML-style template written for this
// benchmark is used; pass a real one (e.g. ../shared/models/templates/*.jinja) to measure that.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"
#include "framework/text/jinja/chat_inputs.h"

namespace chatflow::cli {
namespace {

constexpr const char* kBenchmarkTemplate =
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set turns = messages[1:] %}{%- else %}{%- set system = 'You are helpful.' %}"
    "{%- set turns = messages %}{%- endif %}\n"
    "{{- bos_token }}<|im_start|>system\n{{ system | trim }}<|im_end|>\n"
    "{%- for message in turns %}\n"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('roles must alternate user/assistant') }}{%- endif %}\n"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] | trim }}<|im_end|>\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{%- endif %}";

struct BenchChatTemplateOptions {
  std::string template_file;
  int iterations = 20000;
  int turns = 10;
};

int bench_chat_template_command(const BenchChatTemplateOptions& options) {
  std::string source = kBenchmarkTemplate;
  if (!options.template_file.empty()) {
    std::ifstream file(options.template_file, std::ios::binary);
    if (!file) {
      std::cerr << "chatflow: cannot read " << options.template_file << "\n";
      return 1;
    }
    source.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  auto compile_start = std::chrono::steady_clock::now();
  jinja::Template chat_template = jinja::Template::parse(source);
  double compile_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - compile_start)
          .count();
  jinja::ChatTemplateInputs inputs;
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.add_generation_prompt = true;
  inputs.messages.push_back(
      boost::json::object{{"role", "system"}, {"content", "You are a concise assistant."}});
  for (int turn = 0; turn < options.turns; ++turn) {
    bool user = turn % 2 == 0;
    inputs.messages.push_back(boost::json::object{
        {"role", user ? "user" : "assistant"},
        {"content", (user ? "Question number " : "An answer of a sentence or two, number ") +
                        std::to_string(turn) + ", with some words to copy."}});
  }
  size_t bytes = jinja::render_chat_template(chat_template, inputs).size();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.iterations));
  for (int i = 0; i < options.iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    bytes = std::max(bytes, jinja::render_chat_template(chat_template, inputs).size());
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(samples.begin(), samples.end());
  double total = 0;
  for (double sample : samples)
    total += sample;
  std::cout << "chat template: compiled once in " << compile_us << " us; " << options.turns
            << "-turn conversation (" << bytes << " bytes rendered), " << options.iterations
            << " renders: mean " << total / static_cast<double>(samples.size()) << " us, median "
            << samples[samples.size() / 2] << " us, p99 " << samples[samples.size() * 99 / 100]
            << " us\n";
  return 0;
}

}  // namespace

void add_bench_chat_template_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchChatTemplateOptions>();
  auto* command =
      app.add_subcommand("bench-chat-template",
                         "Measure rendering a compiled chat template over a 10-turn conversation");
  command->add_option("--template-file", options->template_file, "a .jinja template to measure");
  command->add_option("--iterations", options->iterations, "renders to time")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  command->add_option("--turns", options->turns, "user and assistant messages after the system one")
      ->check(CLI::Range(1, 10'000))
      ->capture_default_str();
  command->callback([&selected, options] {
    selected = [options] { return bench_chat_template_command(*options); };
  });
}

}  // namespace chatflow::cli
