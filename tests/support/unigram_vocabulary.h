// Small Unigram (t5) vocabularies written by our GGUF writer, for tests that need one: no T5
// vocabulary is among llama.cpp's test files.
#pragma once

#include <string>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::testing {

struct UnigramPiece {
  std::string text;
  float score = 0;
  engine::TokenKind kind = engine::TokenKind::normal;
};

struct UnigramVocabularySpec {
  std::vector<UnigramPiece> pieces;  // ids in order
  std::string precompiled_charsmap;  // empty: none
  bool add_space_prefix = true;
  bool remove_extra_whitespaces = false;
  // Metadata besides tokenizer.* copied from this GGUF file (llama.cpp wants an architecture's
  // hyper-parameters even for a vocabulary-only file); empty: none.
  std::string other_metadata_from;
};

// Writes the vocabulary to `path` (ids: <pad> 0, </s> 1, <unk> 2 come first if the spec puts
// them there; nothing is added).
void write_unigram_vocabulary(const std::string& path, const UnigramVocabularySpec& spec);

}  // namespace chatflow::testing
