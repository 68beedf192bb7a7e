// chatflow tokenize / detokenize: a model's tokenizer on the command line.
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "framework/cli/commands.h"
#include "framework/engine/model.h"
#include "framework/engine/tokenizer.h"

namespace chatflow::cli {
namespace {

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

}  // namespace

int tokenize_command(const TokenizeOptions& options) {
  try {
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
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

int detokenize_command(const DetokenizeOptions& options) {
  try {
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
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace chatflow::cli
