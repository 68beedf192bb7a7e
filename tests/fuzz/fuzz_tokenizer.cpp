// libFuzzer target: arbitrary bytes through every tokenizer family (SentencePiece, byte-level
// BPE, WordPiece), back through decoding and the incremental detokenizer. Vocabularies come from
// ../shared/models/vocab when present (or CHATFLOW_SHARED_DIR), else from a generated model.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/engine/detokenizer.h"
#include "framework/engine/model_writer.h"
#include "framework/engine/tokenizer.h"
#include "framework/text/utf8.h"

namespace {

using namespace chatflow::engine;

std::vector<std::unique_ptr<Tokenizer>> load_tokenizers() {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  std::filesystem::path shared = std::getenv("CHATFLOW_SHARED_DIR")
                                     ? std::getenv("CHATFLOW_SHARED_DIR")
                                     : std::filesystem::path(CHATFLOW_SOURCE_DIR) / ".." / "shared";
  for (const char* name : {"llama-spm", "gpt-2", "deepseek-coder", "bert-bge"}) {
    auto path = shared / "models" / "vocab" / (std::string("ggml-vocab-") + name + ".gguf");
    if (!std::filesystem::exists(path)) continue;
    auto file = GgufFile::open(path.string());
    tokenizers.push_back(std::make_unique<Tokenizer>(Vocabulary::from_gguf(*file)));
  }
  if (tokenizers.empty()) {
    std::string path =
        (std::filesystem::temp_directory_path() / "chatflow-fuzz-vocabulary.gguf").string();
    ModelShape shape;
    shape.layers = 1;
    write_random_model(shape, path);
    auto file = GgufFile::open(path);
    tokenizers.push_back(std::make_unique<Tokenizer>(Vocabulary::from_gguf(*file)));
  }
  return tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizers = load_tokenizers();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& tokenizer : tokenizers) {
    for (bool parse_special : {false, true}) {
      auto ids = tokenizer->encode(text, true, parse_special);
      for (TokenId id : ids) {
        if (id < 0 || static_cast<size_t>(id) >= tokenizer->vocabulary().size()) __builtin_trap();
      }
      std::string decoded = tokenizer->decode(ids, true);
      IncrementalDetokenizer detokenizer(*tokenizer, {"\n\n", "END"});
      std::string streamed;
      for (TokenId id : ids)
        streamed += detokenizer.push(id).text;
      streamed += detokenizer.finish().text;
      // Released text is always valid UTF-8.
      if (chatflow::text::repair(streamed) != streamed) __builtin_trap();
    }
  }
  return 0;
}
