#include "support/unigram_vocabulary.h"

#include "framework/engine/gguf_file.h"
#include "framework/engine/gguf_writer.h"

namespace chatflow::testing {

void write_unigram_vocabulary(const std::string& path, const UnigramVocabularySpec& spec) {
  engine::GgufWriter writer;
  if (!spec.other_metadata_from.empty()) {
    auto source = engine::GgufFile::open(spec.other_metadata_from);
    for (const auto& [key, value] : source->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) writer.copy(*source, key);
    }
  }
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> kinds;
  for (const UnigramPiece& piece : spec.pieces) {
    texts.push_back(piece.text);
    scores.push_back(piece.score);
    kinds.push_back(static_cast<int32_t>(piece.kind));
  }
  writer.set_string("tokenizer.ggml.model", "t5");
  writer.set_strings("tokenizer.ggml.tokens", texts);
  writer.set_float32s("tokenizer.ggml.scores", scores);
  writer.set_int32s("tokenizer.ggml.token_type", kinds);
  writer.set_bool("tokenizer.ggml.add_space_prefix", spec.add_space_prefix);
  writer.set_bool("tokenizer.ggml.remove_extra_whitespaces", spec.remove_extra_whitespaces);
  if (!spec.precompiled_charsmap.empty())
    writer.set_bytes("tokenizer.ggml.precompiled_charsmap", spec.precompiled_charsmap);
  writer.write(path);
}

}  // namespace chatflow::testing
