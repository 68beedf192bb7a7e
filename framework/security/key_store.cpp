#include "framework/security/key_store.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>

#include <yaml-cpp/yaml.h>

#include "framework/api/config_value.h"
#include "framework/security/crypto.h"
#include "framework/text/yaml_reader.h"

namespace chatflow::security {
namespace {

bool is_hex64(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return buffer;
}

const std::vector<std::string> kRecordKeys = {"id",    "sha256", "tenant",  "user",
                                              "roles", "limits", "created", "revoked"};

// A key record holds only known fields, and never a key itself (which would defeat storing
// hashes).
void check_record_fields(const ConfigValue& item, Diagnostics& diagnostics) {
  for (size_t i = 0; i < item.keys.size(); ++i) {
    const std::string& name = item.keys[i].name;
    if (name == "key" || name == "api_key" || name == "secret") {
      diagnostics.error(item.keys[i].where,
                        "a keys file must never hold a key itself, only its 'sha256'; create "
                        "keys with `chatflow keys add`");
    } else if (std::find(kRecordKeys.begin(), kRecordKeys.end(), name) == kRecordKeys.end()) {
      diagnostics.error(item.keys[i].where, "unknown key '" + name + "' in a key record");
    }
  }
}

// Leaves `out` as it is when the field is absent or not a string.
void read_text_field(const ConfigValue& item, const char* name, bool required, std::string& out,
                     Diagnostics& diagnostics) {
  const ConfigValue* value = item.find(name);
  if (!value || value->is_null()) {
    if (required) diagnostics.error(item.where, std::string("missing '") + name + "'");
    return;
  }
  if (!value->is_scalar()) {
    diagnostics.error(value->where, std::string("'") + name + "' must be a string");
    return;
  }
  out = value->text;
}

void read_roles(const ConfigValue& item, ApiKeyRecord& record, Diagnostics& diagnostics) {
  const ConfigValue* roles = item.find("roles");
  if (!roles || roles->is_null()) return;
  if (!roles->is_sequence()) {
    diagnostics.error(roles->where, "'roles' must be a list of strings");
    return;
  }
  for (const auto& role : roles->items)
    record.roles.push_back(role.text);
}

void read_limits(const ConfigValue& item, ApiKeyRecord& record, Diagnostics& diagnostics) {
  const ConfigValue* limits = item.find("limits");
  if (!limits || limits->is_null()) return;
  if (!limits->is_mapping()) {
    diagnostics.error(limits->where, "'limits' must be a mapping such as {rpm: 60}");
    return;
  }
  for (size_t i = 0; i < limits->keys.size(); ++i) {
    try {
      size_t used = 0;
      double value = std::stod(limits->items[i].text, &used);
      if (used != limits->items[i].text.size() || value < 0) throw std::invalid_argument("");
      record.limits[limits->keys[i].name] = value;
    } catch (const std::exception&) {
      diagnostics.error(limits->items[i].where,
                        "limit '" + limits->keys[i].name + "' must be a non-negative number");
    }
  }
}

// One entry of the 'keys' list; every problem in it is reported, and the record is kept either
// way (load refuses the whole file when anything was reported).
ApiKeyRecord read_key_record(const ConfigValue& item, Diagnostics& diagnostics) {
  ApiKeyRecord record;
  check_record_fields(item, diagnostics);
  read_text_field(item, "id", true, record.id, diagnostics);
  read_text_field(item, "sha256", true, record.sha256, diagnostics);
  read_text_field(item, "tenant", true, record.tenant, diagnostics);
  read_text_field(item, "user", false, record.user, diagnostics);
  read_text_field(item, "created", false, record.created, diagnostics);
  if (!record.sha256.empty() && !is_hex64(record.sha256)) {
    diagnostics.error(item.find("sha256")->where,
                      "'sha256' must be 64 lower-case hex digits (the key's SHA-256)");
  }
  read_roles(item, record, diagnostics);
  read_limits(item, record, diagnostics);
  if (const ConfigValue* revoked = item.find("revoked"); revoked && !revoked->is_null()) {
    if (revoked->text != "true" && revoked->text != "false")
      diagnostics.error(revoked->where, "'revoked' must be true or false");
    record.revoked = revoked->text == "true";
  }
  return record;
}

}  // namespace

std::optional<KeyStore> KeyStore::load(const std::string& path, Diagnostics& diagnostics) {
  size_t before = diagnostics.size();
  ConfigValue root = read_yaml_file(path, diagnostics);
  if (diagnostics.size() != before) return std::nullopt;
  return from_tree(root, path, diagnostics);
}

std::optional<KeyStore> KeyStore::parse(const std::string& text, const std::string& file_name,
                                        Diagnostics& diagnostics) {
  size_t before = diagnostics.size();
  ConfigValue root = read_yaml_text(text, file_name, diagnostics);
  if (diagnostics.size() != before) return std::nullopt;
  return from_tree(root, file_name, diagnostics);
}

std::optional<KeyStore> KeyStore::from_tree(const ConfigValue& root, const std::string& path,
                                            Diagnostics& diagnostics) {
  size_t before = diagnostics.size();
  KeyStore store;
  if (root.is_null()) return store;  // an empty file: no keys yet
  const ConfigValue* keys = root.is_mapping() ? root.find("keys") : nullptr;
  if (root.is_mapping()) {
    for (const auto& key : root.keys) {
      if (key.name != "keys") {
        std::string shown = key.name.size() > 40 ? key.name.substr(0, 40) + "..." : key.name;
        diagnostics.error(key.where,
                          "unknown key '" + shown + "' in a keys file (it holds 'keys' only)");
      }
    }
  }
  if (!keys) {
    diagnostics.error(root.where.line > 0 ? root.where : SourceLocation{path, 1, 1},
                      "a keys file is a mapping with a 'keys' list");
    return std::nullopt;
  }
  if (diagnostics.size() != before) return std::nullopt;
  if (keys->is_null()) return store;
  if (!keys->is_sequence()) {
    diagnostics.error(keys->where, "'keys' must be a list, got " + keys->describe());
    return std::nullopt;
  }
  for (const ConfigValue& item : keys->items) {
    if (!item.is_mapping()) {
      diagnostics.error(item.where, "each key must be a mapping, got " + item.describe());
      continue;
    }
    store.records_.push_back(read_key_record(item, diagnostics));
  }
  if (diagnostics.size() != before) return std::nullopt;
  return store;
}

std::string KeyStore::add(const std::string& tenant, const std::string& user,
                          const std::vector<std::string>& roles,
                          const std::map<std::string, double>& limits) {
  if (tenant.empty()) throw std::invalid_argument("a key needs a tenant");
  std::string key = std::string(kKeyPrefix) + random_hex(24);
  ApiKeyRecord record;
  record.id = "k_" + random_hex(4);
  record.sha256 = sha256_hex(key);
  record.tenant = tenant;
  record.user = user;
  record.roles = roles;
  record.limits = limits;
  record.created = utc_now();
  records_.push_back(std::move(record));
  return key;
}

bool KeyStore::revoke(const std::string& id) {
  for (auto& record : records_) {
    if (record.id == id) {
      record.revoked = true;
      return true;
    }
  }
  return false;
}

void KeyStore::save(const std::string& path) const {
  YAML::Emitter out;
  out << YAML::Comment(
      "chatflow API keys: only SHA-256 hashes are stored. Manage with `chatflow keys add|list|"
      "revoke --keys-file FILE`.");
  out << YAML::BeginMap << YAML::Key << "keys" << YAML::Value << YAML::BeginSeq;
  for (const auto& record : records_) {
    out << YAML::BeginMap;
    out << YAML::Key << "id" << YAML::Value << record.id;
    out << YAML::Key << "sha256" << YAML::Value << record.sha256;
    out << YAML::Key << "tenant" << YAML::Value << YAML::DoubleQuoted << record.tenant;
    out << YAML::Key << "user" << YAML::Value << YAML::DoubleQuoted << record.user;
    out << YAML::Key << "roles" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& role : record.roles)
      out << role;
    out << YAML::EndSeq;
    if (!record.limits.empty()) {
      out << YAML::Key << "limits" << YAML::Value << YAML::Flow << YAML::BeginMap;
      for (const auto& [name, value] : record.limits)
        out << YAML::Key << name << YAML::Value << value;
      out << YAML::EndMap;
    }
    out << YAML::Key << "created" << YAML::Value << YAML::DoubleQuoted << record.created;
    out << YAML::Key << "revoked" << YAML::Value << record.revoked;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;

  std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    if (!file) throw std::runtime_error("cannot write " + temporary);
    file << out.c_str() << "\n";
    if (!file) throw std::runtime_error("cannot write " + temporary);
  }
  ::chmod(temporary.c_str(), 0600);
  std::filesystem::rename(temporary, target);
}

const ApiKeyRecord* KeyStore::match(std::string_view key) const {
  std::string digest = sha256_hex(key);
  const ApiKeyRecord* found = nullptr;
  for (const auto& record : records_) {
    bool equal = constant_time_equal(digest, record.sha256);
    if (equal && !found) found = &record;
  }
  return found && !found->revoked ? found : nullptr;
}

}  // namespace chatflow::security
