// chatflow tokenize / detokenize: a model's tokenizer on the command line.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/engine/model.h"
#include "framework/engine/tokenizer.h"

namespace chatflow::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string file;    // "-" or empty: standard input
  std::string prompt;  // the text itself, instead of a file
  bool prompt_given = false;
  bool from_stdin = false;
  bool bos = false;
  bool special = false;
  bool no_parse_special = false;
  bool no_bos = false;
  bool python_list = false;  // --ids: "[1, 2, 3]", as llama-tokenize --ids prints
};

struct DetokenizeOptions {
  std::string model;
  std::string file;  // "-" or empty: standard input
  bool special = false;
};

// Only the vocabulary is needed: vocabulary-only GGUF files work too.
std::unique_ptr<engine::Tokenizer> load_tokenizer(const std::string& model) {
  auto file = engine::GgufFile::open(model);
  return std::make_unique<engine::Tokenizer>(engine::Vocabulary::from_gguf(*file));
}

bool read_input(const std::string& path, std::string& text) {
  if (path.empty() || path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return true;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  return true;
}

int tokenize_command(const TokenizeOptions& options) {
  auto tokenizer = load_tokenizer(options.model);
  std::string text = options.prompt;
  if (!options.prompt_given && !read_input(options.file, text)) {
    std::cerr << "chatflow: cannot read " << options.file << "\n";
    return 1;
  }
  bool bos = options.bos && !options.no_bos;
  bool parse_special = options.special && !options.no_parse_special;
  auto ids = tokenizer->encode(text, bos, parse_special);
  if (bos && !tokenizer->vocabulary().add_bos && tokenizer->vocabulary().bos != engine::kNoToken) {
    ids.insert(ids.begin(), tokenizer->vocabulary().bos);
  }
  const char* separator = options.python_list ? ", " : " ";
  if (options.python_list) std::cout << "[";
  for (size_t i = 0; i < ids.size(); ++i)
    std::cout << (i ? separator : "") << ids[i];
  std::cout << (options.python_list ? "]\n" : "\n");
  return 0;
}

int detokenize_command(const DetokenizeOptions& options) {
  auto tokenizer = load_tokenizer(options.model);
  std::string text;
  if (!read_input(options.file, text)) {
    std::cerr << "chatflow: cannot read " << options.file << "\n";
    return 1;
  }
  std::vector<engine::TokenId> ids;
  std::istringstream numbers(text);
  std::string word;
  while (numbers >> word) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 ||
        id >= static_cast<long long>(tokenizer->vocabulary().size())) {
      std::cerr << "chatflow: '" << word << "' is not a token id of this vocabulary (0.."
                << tokenizer->vocabulary().size() - 1 << ")\n";
      return 1;
    }
    ids.push_back(static_cast<engine::TokenId>(id));
  }
  std::cout << tokenizer->decode(ids, options.special);
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<TokenizeOptions>();
  auto* command = app.add_subcommand("tokenize", "Print the token ids of a file's exact bytes");
  // The short names and --ids, --no-bos, --no-parse-special, --stdin are llama-tokenize's, so
  // that one command line serves both programs.
  command->add_option("-m,--model", options->model, "GGUF file (a vocabulary-only one will do)")
      ->required();
  auto* file =
      command->add_option("-f,--file", options->file, "input file; '-' or absent: standard input");
  command->add_option("-p,--prompt", options->prompt, "the text itself, not a file")
      ->excludes(file)
      ->each([options](const std::string&) { options->prompt_given = true; });
  command->add_flag("--stdin", options->from_stdin,
                    "read standard input (the default without --file or --prompt)");
  command->add_flag("--bos", options->bos, "add BOS (and the vocabulary's other special tokens)");
  command->add_flag("--no-bos", options->no_bos, "add no BOS (the default), even with --bos");
  command->add_flag("--special,--parse-special", options->special,
                    "recognise control tokens written in the text (llama-tokenize's default)");
  command->add_flag("--no-parse-special", options->no_parse_special,
                    "control tokens written in the text stay text (the default)");
  command->add_flag("--ids", options->python_list, "print [1, 2, 3] as llama-tokenize --ids does");
  command->callback(
      [&selected, options] { selected = [options] { return tokenize_command(*options); }; });
}

void add_detokenize_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<DetokenizeOptions>();
  auto* command = app.add_subcommand("detokenize", "Print the text of space-separated token ids");
  command->add_option("--model", options->model, "GGUF file")->required();
  command->add_option("--file", options->file, "input file; '-' or absent: standard input");
  command->add_flag("--special", options->special, "print control tokens as text");
  command->callback(
      [&selected, options] { selected = [options] { return detokenize_command(*options); }; });
}

}  // namespace chatflow::cli
