// Every chat template in ../shared/models/templates over the conversations in
// tests/text/jinja_conversations, rendered by chatflow and by Python's jinja2 set up as
// transformers sets it up (tests/text/jinja_reference.py): byte-identical text, and failures
// where jinja2 fails, with raise_exception's message.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/text/jinja/chat_inputs.h"
#include "support/shared_data.h"

namespace chatflow::jinja {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

bool python_jinja2_available() {
  return std::system("python3 -c 'import jinja2' > /dev/null 2>&1") == 0;
}

std::string run_command(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string output;
  char buffer[65536];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof buffer, pipe.get())) > 0)
    output.append(buffer, read);
  return output;
}

std::vector<std::string> files_in(const std::string& directory, const std::string& extension) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() == extension) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::tm pinned_now() {
  std::tm time{};
  time.tm_year = 2024 - 1900;
  time.tm_mon = 6;
  time.tm_mday = 26;
  time.tm_hour = 12;
  time.tm_wday = 5;
  time.tm_yday = 207;
  return time;
}

struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error message
};

Outcome render_with_chatflow(const std::string& template_path,
                             const boost::json::object& conversation, bool add_generation_prompt) {
  static std::map<std::string, std::shared_ptr<Template>> compiled;
  auto& chat_template = compiled[template_path];
  try {
    if (!chat_template)
      chat_template = std::make_shared<Template>(Template::parse(read_file(template_path)));
  } catch (const SyntaxError& error) {
    return {false, std::string("syntax: ") + error.what()};
  }
  ChatTemplateInputs inputs;
  inputs.messages = conversation.at("messages").as_array();
  if (auto* tools = conversation.if_contains("tools")) inputs.tools = *tools;
  if (auto* documents = conversation.if_contains("documents")) inputs.documents = *documents;
  if (auto* variables = conversation.if_contains("variables"))
    inputs.extra_variables = variables->as_object();
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  Environment environment;
  environment.now = pinned_now;
  try {
    return {true, render_chat_template(*chat_template, inputs, environment).text()};
  } catch (const RenderError& error) {
    return {false, error.what()};
  }
}

TEST(JinjaParity, EveryTemplateMatchesPythonJinja2OnEveryConversation) {
  CHATFLOW_REQUIRE_SHARED(templates, "models/templates");
  if (!python_jinja2_available())
    GTEST_SKIP()
        << "python3 with jinja2 is not installed (apt-get install python3-jinja2); skipped";
  std::string source_dir = CHATFLOW_SOURCE_DIR;
  std::vector<std::string> template_files = files_in(templates, ".jinja");
  std::vector<std::string> conversation_files =
      files_in(source_dir + "/tests/text/jinja_conversations", ".json");
  ASSERT_FALSE(template_files.empty());
  std::string command = "python3 " + source_dir + "/tests/text/jinja_reference.py";
  for (const auto& file : template_files)
    command += " '" + file + "'";
  command += " --";
  for (const auto& file : conversation_files)
    command += " '" + file + "'";
  std::istringstream lines(run_command(command));
  std::map<std::string, boost::json::object> conversations;
  int compared = 0, identical = 0;
  std::string line;
  while (std::getline(lines, line)) {
    boost::json::object expected = boost::json::parse(line).as_object();
    std::string template_path(expected.at("template").as_string());
    std::string conversation_path(expected.at("conversation").as_string());
    bool add_generation_prompt = expected.at("add_generation_prompt").as_bool();
    auto& conversation = conversations[conversation_path];
    if (conversation.empty())
      conversation = boost::json::parse(read_file(conversation_path)).as_object();
    Outcome actual = render_with_chatflow(template_path, conversation, add_generation_prompt);
    bool reference_ok = expected.at("ok").as_bool();
    std::string case_name = std::filesystem::path(template_path).filename().string() + " x " +
                            std::filesystem::path(conversation_path).filename().string() +
                            (add_generation_prompt ? " +generation prompt" : "");
    ++compared;
    if (reference_ok) {
      std::string text(expected.at("text").as_string());
      EXPECT_TRUE(actual.ok) << case_name << ": chatflow failed: " << actual.text;
      if (actual.ok) {
        EXPECT_EQ(actual.text, text) << case_name;
        identical += actual.text == text;
      }
    } else {
      std::string message(expected.at("error").as_string());
      EXPECT_FALSE(actual.ok) << case_name << ": jinja2 failed (" << message
                              << ") but chatflow rendered:\n"
                              << actual.text;
      // raise_exception's message is the template's own words: it must come through unchanged.
      // Python's own errors (TypeError, UndefinedError) need only fail here too.
      bool template_raised = expected.at("error_type").as_string() == "TemplateError";
      if (!actual.ok && template_raised) {
        EXPECT_EQ(actual.text, message) << case_name;
      }
      if (!actual.ok && (!template_raised || actual.text == message)) ++identical;
    }
  }
  EXPECT_GT(compared, 0) << "the reference script printed nothing: " << command;
  std::cout << "[ parity ] " << identical << " of " << compared
            << " template x conversation cases identical (" << template_files.size()
            << " templates, " << conversation_files.size()
            << " conversations, add_generation_prompt false and true)\n";
}

}  // namespace
}  // namespace chatflow::jinja
