// chatflow chat-template: prints what a chat template makes of a conversation, as transformers'
// apply_chat_template(tokenize=False) would: the template from a GGUF (with its BOS and EOS
// tokens) or a .jinja file, messages and tools from JSON files, extra variables with --var, and
// strftime_now pinned by --now for reproducible output.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "framework/cli/command.h"
#include "framework/engine/chat_template.h"
#include "framework/engine/gguf_file.h"
#include "framework/engine/vocabulary.h"
#include "framework/text/jinja/chat_inputs.h"

namespace chatflow::cli {
namespace {

struct ChatTemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages;
  std::string tools;
  bool add_generation_prompt = false;
  std::vector<std::string> variables;  // KEY=VALUE
  std::string now;                     // ISO-8601
};

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

boost::json::value read_json(const std::string& path) {
  boost::system::error_code error;
  boost::json::value value = boost::json::parse(read_file(path), error);
  if (error) throw std::runtime_error(path + ": not JSON: " + error.message());
  return value;
}

// 2024-07-26, 2024-07-26T12:30 or 2024-07-26T12:30:05 (as local time).
std::tm parse_now(const std::string& text) {
  std::tm time{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  int fields = std::sscanf(text.c_str(), "%d-%d-%d%*[T ]%d:%d:%d", &year, &month, &day, &hour,
                           &minute, &second);
  if (fields < 3 || month < 1 || month > 12 || day < 1 || day > 31)
    throw std::runtime_error("--now " + text +
                             ": expected an ISO-8601 date such as 2024-07-26T12:00:00");
  time.tm_year = year - 1900;
  time.tm_mon = month - 1;
  time.tm_mday = day;
  time.tm_hour = hour;
  time.tm_min = minute;
  time.tm_sec = second;
  time.tm_isdst = -1;
  std::tm normalised = time;
  std::mktime(&normalised);  // fills in the weekday and the day of the year
  time.tm_wday = normalised.tm_wday;
  time.tm_yday = normalised.tm_yday;
  return time;
}

int chat_template_command(const ChatTemplateOptions& options) {
  jinja::ChatTemplateInputs inputs;
  std::string source;
  std::string source_name;
  if (!options.model.empty()) {
    auto file = engine::GgufFile::open(options.model);
    source = file->get_string_or("tokenizer.chat_template").value_or("");
    if (source.empty()) {
      std::cerr << "chatflow: " << options.model << " has no tokenizer.chat_template\n";
      return 1;
    }
    source_name = options.model + ": tokenizer.chat_template";
    auto vocabulary = engine::Vocabulary::from_gguf(*file);
    inputs.bos_token = engine::bos_text(*vocabulary);
    inputs.eos_token = engine::eos_text(*vocabulary);
  } else {
    source = read_file(options.template_file);
    source_name = options.template_file;
  }
  boost::json::value messages = read_json(options.messages);
  if (messages.is_object() && messages.get_object().contains("messages"))
    messages = messages.get_object().at("messages");
  if (!messages.is_array())
    throw std::runtime_error(options.messages + ": expected a JSON array of messages");
  inputs.messages = messages.get_array();
  if (!options.tools.empty()) inputs.tools = read_json(options.tools);
  inputs.add_generation_prompt = options.add_generation_prompt;
  for (const auto& assignment : options.variables) {
    size_t equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0)
      throw std::runtime_error("--var " + assignment + ": expected KEY=VALUE");
    std::string key = assignment.substr(0, equals);
    std::string text = assignment.substr(equals + 1);
    if (key == "bos_token") {
      inputs.bos_token = text;
    } else if (key == "eos_token") {
      inputs.eos_token = text;
    } else {
      // JSON when it parses (true, 3, [..]), else the text itself.
      boost::system::error_code error;
      boost::json::value value = boost::json::parse(text, error);
      inputs.extra_variables[key] = error ? boost::json::value(text) : value;
    }
  }
  jinja::Environment environment;
  if (!options.now.empty()) {
    std::tm pinned = parse_now(options.now);
    environment.now = [pinned] { return pinned; };
  }
  std::unique_ptr<jinja::Template> chat_template;
  try {
    chat_template = std::make_unique<jinja::Template>(jinja::Template::parse(source));
  } catch (const jinja::SyntaxError& error) {
    std::cerr << "chatflow: " << source_name << ":" << error.position().line << ":"
              << error.position().column << ": " << error.message() << "\n";
    return 1;
  }
  try {
    std::cout << jinja::render_chat_template(*chat_template, inputs, environment).text();
  } catch (const jinja::RenderError& error) {
    std::cerr << "chatflow: the template raised: " << error.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_chat_template_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<ChatTemplateOptions>();
  auto* command = app.add_subcommand(
      "chat-template",
      "Print a chat template's rendering of a conversation (as transformers would)");
  auto* model = command->add_option("--model", options->model,
                                    "GGUF file whose tokenizer.chat_template to use");
  auto* file = command->add_option("--template-file", options->template_file, "a .jinja template");
  model->excludes(file);
  command->add_option("--messages", options->messages, "JSON file: an array of messages")
      ->required();
  command->add_option("--tools", options->tools, "JSON file: the tools offered");
  command->add_flag("--add-generation-prompt", options->add_generation_prompt,
                    "end with the assistant turn's opening");
  command->add_option("--var", options->variables,
                      "KEY=VALUE template variable (JSON or text); bos_token and eos_token too");
  command->add_option("--now", options->now, "ISO-8601 time strftime_now reports");
  command->callback([&selected, options] {
    if (options->model.empty() && options->template_file.empty())
      throw CLI::RequiredError("--model or --template-file");
    selected = [options] { return chat_template_command(*options); };
  });
}

}  // namespace chatflow::cli
