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
  std::string file;  // "-" or empty: standard input
  bool bos = false;
  bool special = false;
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
  std::string text;
  if (!read_input(options.file, text)) {
    std::cerr << "chatflow: cannot read " << options.file << "\n";
    return 1;
  }
  auto ids = tokenizer->encode(text, options.bos, options.special);
  if (options.bos && !tokenizer->vocabulary().add_bos &&
      tokenizer->vocabulary().bos != engine::kNoToken) {
    ids.insert(ids.begin(), tokenizer->vocabulary().bos);
  }
  for (size_t i = 0; i < ids.size(); ++i)
    std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
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
  command->add_option("--model", options->model, "GGUF file (a vocabulary-only one will do)")
      ->required();
  command->add_option("--file", options->file, "input file; '-' or absent: standard input");
  command->add_flag("--bos", options->bos, "add BOS (and the vocabulary's other special tokens)");
  command->add_flag("--special", options->special, "recognise control tokens written in the text");
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
