#include <cmath>

#include "framework/embedding/embedder.h"
#include "framework/text/hash.h"
#include "framework/text/normalizer.h"

namespace chatflow::embedding {
namespace {

uint64_t hashed(std::string_view text, uint64_t seed) {
  uint64_t hash = fnv1a(text, kFnvOffsetBasis ^ seed);
  // Mix the high bits down: buckets and signs must not share the low bits alone.
  hash ^= hash >> 29;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 32;
  return hash;
}

class NgramEmbedder final : public Embedder {
 public:
  NgramEmbedder(size_t dimensions, int n) : dimensions_(dimensions), n_(n) {}
  size_t dimensions() const override { return dimensions_; }
  std::string describe() const override {
    return "hashed n-grams (" + std::to_string(dimensions_) +
           " dimensions, n=" + std::to_string(n_) + ")";
  }

  std::vector<float> embed(std::string_view text) const override {
    // Punctuation says little about what is asked: only letters, digits and single spaces stay.
    std::string letters;
    for (char c : text::normalize(text).text) {
      bool keep = static_cast<unsigned char>(c) >= 0x80 || (c >= 'a' && c <= 'z') ||
                  (c >= '0' && c <= '9') || c == '%';
      if (keep) {
        letters += c;
      } else if (!letters.empty() && letters.back() != ' ') {
        letters += ' ';
      }
    }
    std::string normalized = " " + letters + (letters.empty() || letters.back() != ' ' ? " " : "");
    std::vector<float> vector(dimensions_, 0.0f);
    auto add = [&](std::string_view feature, uint64_t seed, float weight) {
      uint64_t hash = hashed(feature, seed);
      size_t bucket = static_cast<size_t>(hash % dimensions_);
      vector[bucket] += (hash >> 63) ? -weight : weight;
    };
    // Character n-grams (by code point), across word boundaries too.
    std::vector<size_t> starts;
    for (size_t i = 0; i < normalized.size(); ++i) {
      if ((static_cast<unsigned char>(normalized[i]) & 0xC0) != 0x80) starts.push_back(i);
    }
    starts.push_back(normalized.size());
    for (size_t i = 0; i + static_cast<size_t>(n_) < starts.size(); ++i) {
      add(std::string_view(normalized)
              .substr(starts[i], starts[i + static_cast<size_t>(n_)] - starts[i]),
          1, 1.0f);
    }
    // Whole words weigh more: they carry most of the meaning.
    size_t start = 0;
    while (start < normalized.size()) {
      size_t end = normalized.find(' ', start);
      if (end == std::string::npos) end = normalized.size();
      if (end > start) add(std::string_view(normalized).substr(start, end - start), 2, 2.0f);
      start = end + 1;
    }
    double norm = 0;
    for (float value : vector)
      norm += static_cast<double>(value) * value;
    if (norm > 0) {
      auto scale = static_cast<float>(1.0 / std::sqrt(norm));
      for (float& value : vector)
        value *= scale;
    }
    return vector;
  }

 private:
  size_t dimensions_;
  int n_;
};

}  // namespace

std::unique_ptr<Embedder> make_ngram_embedder(size_t dimensions, int n) {
  return std::make_unique<NgramEmbedder>(dimensions, n);
}

float dot(const std::vector<float>& a, const std::vector<float>& b) {
  float sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

}  // namespace chatflow::embedding
