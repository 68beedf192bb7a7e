// A deterministic mixed-script text for tokenizer parity: Latin with accents and contractions,
// CJK, Arabic, Devanagari, emoji (ZWJ sequences, flags, skin tones, keycaps), code, digit runs,
// whitespace runs (tabs, CR/LF, NBSP and other Unicode spaces), combining marks, rare but valid
// characters (supplementary planes, private use, BOM, zero-width joiners), special-token texts
// and bytes that are no valid UTF-8 (stray continuations, truncated sequences, overlong forms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chatflow::testing {

// At least `bytes` bytes (a piece more); the same text for the same seed.
std::string mixed_script_text(size_t bytes, uint64_t seed = 1);

}  // namespace chatflow::testing
