#include "framework/engine/pre_tokenizer_table.h"

namespace chatflow::engine {

const std::string kGpt2WordExpression =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// llama.cpp's case-insensitive contractions without (?i:), which its regex engine lacks.
const std::string kLlama3WordExpression =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

const std::vector<std::string> kDefault = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2WordExpression,
                                           R"(\p{N}+)", "[0-9][0-9][0-9]"};
const std::vector<std::string> kLlama3 = {kLlama3WordExpression};
const std::vector<std::string> kGpt2 = {kGpt2WordExpression};
const std::vector<std::string> kDeepseekLlm = {
    "[\r\n]",
    // The letters of Hugging Face's class, as llama.cpp writes them (escaped: several are
    // compatibility characters that an editor would normalise).
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0"
    "-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-"
    "\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B"
    "\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-"
    "\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113"
    "\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F"
    "\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00"
    "-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-"
    "\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-"
    "\U000118DF\U0001E900-\U0001E943]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
};
const std::vector<std::string> kDeepseekV3 = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
const std::vector<std::string> kDeepseekCoder = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}",
};
const std::vector<std::string> kFalcon = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2WordExpression,
                                          "[0-9][0-9][0-9]"};
const std::vector<std::string> kStarcoder = {R"(\p{N})", kGpt2WordExpression};
const std::vector<std::string> kQwen2 = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const std::vector<std::string> kPoro = {" ?[^(\\s|.,!?…。，、।۔،)]+"};
const std::vector<std::string> kViking = {" ?[^(\\s|.,!?…。，、।۔،)]+", R"(\p{N})"};
// llama.cpp's form of Tekken's upper/lower-case letter classes, with look-aheads.
const std::vector<std::string> kTekken = {
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const std::vector<std::string> kChameleon = {
    "<sentinel:[0-9]+>",       "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",      R"(\p{N})",
    R"([\p{P}!-/:-@\[-`{-~])", kGpt2WordExpression,
};

PreTokenizerFamily family(std::vector<std::string_view> names,
                          const std::vector<std::string>& expressions) {
  PreTokenizerFamily result;
  result.names = std::move(names);
  result.expressions = &expressions;
  return result;
}

PreTokenizerFamily keeping_spaces(PreTokenizerFamily family) {
  family.clean_spaces = false;
  return family;
}

// In llama.cpp's order (llama-vocab.cpp, the tokenizer.ggml.pre comparison chain).
std::vector<PreTokenizerFamily> make_families() {
  std::vector<PreTokenizerFamily> families;
  families.push_back(family({"default"}, kDefault));
  PreTokenizerFamily llama3 = family({"llama3", "llama-v3", "llama-bpe", "falcon3"}, kLlama3);
  llama3.ignore_merges = true;
  llama3.add_bos = true;
  families.push_back(llama3);
  families.push_back(keeping_spaces(family({"deepseek-llm"}, kDeepseekLlm)));
  families.push_back(keeping_spaces(family({"deepseek-coder"}, kDeepseekCoder)));
  families.push_back(keeping_spaces(family({"deepseek-v3"}, kDeepseekV3)));
  families.push_back(family({"falcon"}, kFalcon));
  families.push_back(family({"mpt"}, kGpt2));
  families.push_back(family({"starcoder"}, kStarcoder));
  families.push_back(family({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                             "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe"},
                            kGpt2));
  families.push_back(family({"refact"}, kStarcoder));
  families.push_back(keeping_spaces(family({"command-r"}, kStarcoder)));
  families.push_back(keeping_spaces(family({"qwen2", "deepseek-r1-qwen"}, kQwen2)));
  families.push_back(family({"stablelm2"}, kQwen2));
  families.push_back(family({"olmo"}, kGpt2));
  families.push_back(family({"dbrx"}, kLlama3));
  families.push_back(family({"smaug-bpe"}, kLlama3));
  families.push_back(keeping_spaces(family({"poro-chat"}, kPoro)));
  PreTokenizerFamily chatglm = family({"chatglm-bpe"}, kLlama3);
  chatglm.without_bos = true;
  families.push_back(chatglm);
  families.push_back(keeping_spaces(family({"viking"}, kViking)));
  families.push_back(family({"jais"}, kGpt2));
  PreTokenizerFamily tekken = keeping_spaces(family({"tekken"}, kTekken));
  tekken.ignore_merges = true;
  tekken.add_bos = true;
  families.push_back(tekken);
  families.push_back(keeping_spaces(family({"smollm"}, kStarcoder)));
  families.push_back(family({"codeshell"}, kStarcoder));
  families.push_back(family({"bloom"}, kPoro));
  families.push_back(family({"gpt3-finnish"}, kPoro));
  families.push_back(family({"exaone"}, kStarcoder));
  PreTokenizerFamily chameleon = keeping_spaces(family({"chameleon"}, kChameleon));
  chameleon.add_bos = true;
  families.push_back(chameleon);
  families.push_back(family({"minerva-7b"}, kStarcoder));
  // Megrez splits like Qwen2 but keeps llama.cpp's default space cleaning.
  families.push_back(family({"megrez"}, kQwen2));
  return families;
}

const std::vector<PreTokenizerFamily>& families() {
  static const std::vector<PreTokenizerFamily> all = make_families();
  return all;
}

}  // namespace

const PreTokenizerFamily* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizerFamily& candidate : families()) {
    for (std::string_view known : candidate.names) {
      if (known == name) return &candidate;
    }
  }
  return nullptr;
}

std::string supported_pre_tokenizers() {
  std::string list;
  for (const PreTokenizerFamily& candidate : families()) {
    for (std::string_view known : candidate.names) {
      if (!list.empty()) list += ", ";
      list += known;
    }
  }
  return list;
}

}  // namespace chatflow::engine
