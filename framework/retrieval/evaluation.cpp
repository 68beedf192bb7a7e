#include "framework/retrieval/evaluation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <boost/json.hpp>

namespace chatflow::retrieval {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

double gain_of(const Judgments& judgments, const std::string& document) {
  auto found = judgments.find(document);
  return found == judgments.end() ? 0.0 : std::max(found->second, 0.0);
}

Collection load_smart_collection(const fs::path& directory, const fs::path& documents,
                                 const fs::path& queries, const fs::path& relevance) {
  Collection collection;
  collection.layout = "SMART";
  collection.corpus = load_smart(documents.string());
  std::vector<SourceDocument> questions = load_smart(queries.string());
  std::ifstream in(relevance);
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string query, document;
    double relevance_value = 0;
    if (!(fields >> query)) continue;
    if (!(fields >> document >> relevance_value)) {
      throw std::runtime_error(relevance.string() + ":" + std::to_string(number) +
                               ":1: expected 'query document relevance'");
    }
    double gain = relevance_value >= 1 && relevance_value <= 4 ? 5 - relevance_value : 0;
    collection.judgments[query][document] = gain;
  }
  for (size_t i = 0; i < questions.size(); ++i) {
    std::string id = std::to_string(i + 1);  // the n-th query is judged as query n
    if (collection.judgments.count(id)) collection.queries.push_back({id, questions[i].text});
  }
  (void)directory;
  return collection;
}

std::vector<json::object> read_jsonl(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read the file");
  std::vector<json::object> rows;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    boost::system::error_code error;
    json::value value = json::parse(line, error);
    if (error || !value.is_object()) {
      throw std::runtime_error(file.string() + ":" + std::to_string(number) +
                               ":1: expected one JSON object per line");
    }
    rows.push_back(std::move(value.get_object()));
  }
  return rows;
}

std::string text_field(const json::object& row, const char* name) {
  const json::value* value = row.if_contains(name);
  if (!value) return {};
  if (value->is_string()) return std::string(value->get_string());
  if (value->is_int64()) return std::to_string(value->get_int64());
  return {};
}

Collection load_beir_collection(const fs::path& directory) {
  Collection collection;
  collection.layout = "BEIR";
  for (const auto& row : read_jsonl(directory / "corpus.jsonl")) {
    SourceDocument document;
    document.id = text_field(row, "_id");
    document.title = text_field(row, "title");
    document.text = text_field(row, "text");
    collection.corpus.push_back(std::move(document));
  }
  fs::path qrels = directory / "qrels" / "test.tsv";
  std::ifstream in(qrels);
  if (!in) throw std::runtime_error(qrels.string() + ": cannot read the file");
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string query, document, score;
    if (!(fields >> query >> document >> score)) continue;
    if (number == 1 && query == "query-id") continue;
    try {
      collection.judgments[query][document] = std::stod(score);
    } catch (const std::exception&) {
      throw std::runtime_error(qrels.string() + ":" + std::to_string(number) +
                               ":1: expected a numeric score");
    }
  }
  for (const auto& row : read_jsonl(directory / "queries.jsonl")) {
    std::string id = text_field(row, "_id");
    if (collection.judgments.count(id)) collection.queries.push_back({id, text_field(row, "text")});
  }
  return collection;
}

}  // namespace

double ndcg_at(const std::vector<std::string>& ranking, const Judgments& judgments, size_t k) {
  double dcg = 0;
  for (size_t i = 0; i < std::min(k, ranking.size()); ++i)
    dcg += gain_of(judgments, ranking[i]) / std::log2(static_cast<double>(i) + 2);
  std::vector<double> ideal;
  for (const auto& [document, gain] : judgments)
    if (gain > 0) ideal.push_back(gain);
  std::sort(ideal.rbegin(), ideal.rend());
  double idcg = 0;
  for (size_t i = 0; i < std::min(k, ideal.size()); ++i)
    idcg += ideal[i] / std::log2(static_cast<double>(i) + 2);
  return idcg > 0 ? dcg / idcg : 0;
}

double recall_at(const std::vector<std::string>& ranking, const Judgments& judgments, size_t k) {
  size_t relevant = 0;
  for (const auto& [document, gain] : judgments)
    relevant += gain > 0;
  if (relevant == 0) return 0;
  size_t found = 0;
  for (size_t i = 0; i < std::min(k, ranking.size()); ++i)
    found += gain_of(judgments, ranking[i]) > 0;
  return static_cast<double>(found) / static_cast<double>(relevant);
}

double reciprocal_rank(const std::vector<std::string>& ranking, const Judgments& judgments,
                       size_t k) {
  for (size_t i = 0; i < std::min(k, ranking.size()); ++i) {
    if (gain_of(judgments, ranking[i]) > 0) return 1.0 / static_cast<double>(i + 1);
  }
  return 0;
}

double average_precision(const std::vector<std::string>& ranking, const Judgments& judgments,
                         size_t k) {
  size_t relevant = 0;
  for (const auto& [document, gain] : judgments)
    relevant += gain > 0;
  if (relevant == 0) return 0;
  double sum = 0;
  size_t found = 0;
  for (size_t i = 0; i < std::min(k, ranking.size()); ++i) {
    if (gain_of(judgments, ranking[i]) > 0)
      sum += static_cast<double>(++found) / static_cast<double>(i + 1);
  }
  return sum / static_cast<double>(relevant);
}

Collection load_collection(const std::string& directory) {
  fs::path root(directory);
  std::error_code error;
  if (!fs::is_directory(root, error)) throw std::runtime_error(directory + ": not a directory");
  if (fs::exists(root / "corpus.jsonl", error)) return load_beir_collection(root);
  fs::path documents, queries, relevance;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::string name = entry.path().filename().string();
    if (name.find("qrel") != std::string::npos) {
      relevance = entry.path();
    } else if (entry.path().extension() == ".qry") {
      queries = entry.path();
    } else if (name.find(".all") != std::string::npos) {
      documents = entry.path();
    }
  }
  if (documents.empty() || queries.empty() || relevance.empty()) {
    throw std::runtime_error(directory +
                             ": expected a SMART collection (*.all*, *.qry and *qrel* files) or "
                             "a BEIR one (corpus.jsonl, queries.jsonl, qrels/test.tsv)");
  }
  return load_smart_collection(root, documents, queries, relevance);
}

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(fraction * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

}  // namespace chatflow::retrieval
