#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/json.hpp>

#include "framework/embedding/embedder.h"
#include "framework/embedding/hf_tokenizer.h"
#include "framework/embedding/safetensors.h"

namespace chatflow::embedding {
namespace {

constexpr size_t kMaxTokens = 512;

class Model2Vec final : public Embedder {
 public:
  Model2Vec(std::string directory, std::unique_ptr<HfTokenizer> tokenizer, std::vector<float> rows,
            size_t dimensions, std::vector<int64_t> mapping, std::vector<float> weights,
            bool normalize)
      : directory_(std::move(directory)),
        tokenizer_(std::move(tokenizer)),
        rows_(std::move(rows)),
        dimensions_(dimensions),
        mapping_(std::move(mapping)),
        weights_(std::move(weights)),
        normalize_(normalize) {}

  size_t dimensions() const override { return dimensions_; }
  std::string describe() const override { return "model2vec " + directory_; }

  size_t token_count(std::string_view text) const override { return token_ids(text).size(); }

  std::vector<float> embed(std::string_view text) const override {
    std::vector<int32_t> ids = token_ids(text);
    size_t rows = rows_.size() / dimensions_;
    std::vector<double> sum(dimensions_, 0.0);
    size_t count = 0;
    for (int32_t id : ids) {
      auto token = static_cast<size_t>(id);
      size_t row = token < mapping_.size() ? static_cast<size_t>(mapping_[token]) : token;
      if (row >= rows) continue;
      double scale = token < weights_.size() ? weights_[token] : 1.0;
      for (size_t d = 0; d < dimensions_; ++d)
        sum[d] += rows_[row * dimensions_ + d] * scale;
      ++count;
    }
    std::vector<float> out(dimensions_);
    double norm = 0;
    for (size_t d = 0; d < dimensions_; ++d) {
      sum[d] /= static_cast<double>(std::max<size_t>(count, 1));
      norm += sum[d] * sum[d];
    }
    norm = normalize_ ? std::max(std::sqrt(norm), 1e-12) : 1.0;
    for (size_t d = 0; d < dimensions_; ++d)
      out[d] = static_cast<float>(sum[d] / norm);
    return out;
  }

 private:
  // The tokens a vector is pooled from: those of the text's first characters (long texts are cut
  // before tokenising, by characters, as the reference does), unknown ones left out, at most
  // kMaxTokens.
  std::vector<int32_t> token_ids(std::string_view text) const {
    size_t max_characters = kMaxTokens * tokenizer_->median_token_length();
    size_t position = 0, characters = 0;
    while (position < text.size() && characters < max_characters) {
      auto lead = static_cast<unsigned char>(text[position]);
      position += lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      ++characters;
    }
    std::vector<int32_t> ids = tokenizer_->encode(text.substr(0, std::min(position, text.size())));
    std::erase(ids, tokenizer_->unk_id());
    if (ids.size() > kMaxTokens) ids.resize(kMaxTokens);
    return ids;
  }

  std::string directory_;
  std::unique_ptr<HfTokenizer> tokenizer_;
  std::vector<float> rows_;
  size_t dimensions_;
  std::vector<int64_t> mapping_;
  std::vector<float> weights_;
  bool normalize_;
};

}  // namespace

std::unique_ptr<Embedder> load_model2vec(const std::string& directory) {
  namespace fs = std::filesystem;
  fs::path base(directory);
  for (const char* file : {"model.safetensors", "tokenizer.json", "config.json"}) {
    if (!fs::exists(base / file))
      throw std::runtime_error(directory + " has no " + file + " (not a model2vec model)");
  }
  bool normalize = true;
  {
    std::ifstream file(base / "config.json");
    std::stringstream text;
    text << file.rdbuf();
    std::error_code error;
    boost::json::value config = boost::json::parse(text.str(), error);
    if (error || !config.is_object())
      throw std::runtime_error((base / "config.json").string() + ": not a JSON object");
    if (const auto* value = config.as_object().if_contains("normalize"); value && value->is_bool())
      normalize = value->as_bool();
  }
  SafeTensors tensors = SafeTensors::load((base / "model.safetensors").string());
  const SafeTensor* embeddings = tensors.find("embeddings");
  if (!embeddings) embeddings = tensors.find("0");
  if (!embeddings || embeddings->shape.size() != 2)
    throw std::runtime_error(directory + ": model.safetensors has no 2-D 'embeddings' tensor");
  std::vector<int64_t> mapping;
  if (const SafeTensor* tensor = tensors.find("mapping")) mapping = tensor->integers();
  std::vector<float> weights;
  if (const SafeTensor* tensor = tensors.find("weights")) weights = tensor->floats();
  auto dimensions = static_cast<size_t>(embeddings->shape[1]);
  auto rows = static_cast<size_t>(embeddings->shape[0]);
  for (int64_t row : mapping) {
    if (row < 0 || static_cast<size_t>(row) >= rows)
      throw std::runtime_error(directory + ": 'mapping' points outside 'embeddings'");
  }
  return std::make_unique<Model2Vec>(
      directory, HfTokenizer::load((base / "tokenizer.json").string()), embeddings->floats(),
      dimensions, std::move(mapping), std::move(weights), normalize);
}

}  // namespace chatflow::embedding
