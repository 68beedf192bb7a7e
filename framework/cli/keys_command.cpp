// chatflow keys add|list|revoke: API keys for the auth stage. Only SHA-256 hashes go to the file;
// `add` prints the new key once, on standard output.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/security/key_store.h"

namespace chatflow::cli {
namespace {

struct KeysOptions {
  std::string action;  // add, list, revoke
  std::string keys_file = "var/keys.yaml";
  std::string tenant;
  std::string user;
  std::vector<std::string> roles;
  double rpm = 0;
  double tpm = 0;
  std::string id;  // revoke
};

std::optional<security::KeyStore> open_store(const std::string& path, bool create) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    if (create) return security::KeyStore();
    std::cerr << "chatflow: " << path << " does not exist (add a key first)\n";
    return std::nullopt;
  }
  Diagnostics diagnostics;
  auto store = security::KeyStore::load(path, diagnostics);
  if (!store) std::cerr << diagnostics.to_string();
  return store;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "-" : out;
}

int keys_command(const KeysOptions& options) {
  if (options.action == "add") {
    auto store = open_store(options.keys_file, true);
    if (!store) return 1;
    std::map<std::string, double> limits;
    if (options.rpm > 0) limits["rpm"] = options.rpm;
    if (options.tpm > 0) limits["tpm"] = options.tpm;
    std::string key = store->add(options.tenant, options.user, options.roles, limits);
    store->save(options.keys_file);
    std::cerr << "chatflow: added key " << store->records().back().id << " for tenant '"
              << options.tenant << "' to " << options.keys_file << "; it is shown only now:\n";
    std::cout << key << std::endl;
    return 0;
  }
  auto store = open_store(options.keys_file, false);
  if (!store) return 1;
  if (options.action == "list") {
    std::printf("%-12s %-16s %-16s %-16s %-20s %-22s %s\n", "id", "tenant", "user", "roles",
                "limits", "created", "state");
    for (const auto& record : store->records()) {
      std::string limits;
      for (const auto& [name, value] : record.limits) {
        char text[64];
        std::snprintf(text, sizeof text, "%s%s=%g", limits.empty() ? "" : ",", name.c_str(), value);
        limits += text;
      }
      std::printf("%-12s %-16s %-16s %-16s %-20s %-22s %s\n", record.id.c_str(),
                  record.tenant.c_str(), record.user.empty() ? "-" : record.user.c_str(),
                  join(record.roles).c_str(), limits.empty() ? "-" : limits.c_str(),
                  record.created.c_str(), record.revoked ? "revoked" : "active");
    }
    return 0;
  }
  // revoke
  if (!store->revoke(options.id)) {
    std::cerr << "chatflow: no key with id '" << options.id << "' in " << options.keys_file
              << " (see `chatflow keys list`)\n";
    return 1;
  }
  store->save(options.keys_file);
  std::cerr << "chatflow: revoked " << options.id << " (a running server notices within a "
            << "second)\n";
  return 0;
}

}  // namespace

void add_keys_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<KeysOptions>();
  auto* keys = app.add_subcommand("keys", "Manage API keys (only their hashes are stored)");
  keys->require_subcommand(1);
  auto* add = keys->add_subcommand("add", "Create a key; prints it once");
  add->add_option("--tenant", options->tenant, "the tenant the key belongs to")->required();
  add->add_option("--user", options->user, "the user, for logs and per-user limits");
  add->add_option("--role", options->roles, "a role (repeatable), e.g. admin");
  add->add_option("--rpm", options->rpm,
                  "requests per window for this key (replaces rate_limit's user_rpm; above the "
                  "tenant's rpm, the tenant's bucket no longer counts this key)")
      ->check(CLI::Range(0.0, 1e9));
  add->add_option("--tpm", options->tpm,
                  "tokens per window for this key (as --rpm, for rate_limit's tpm)")
      ->check(CLI::Range(0.0, 1e12));
  auto* list = keys->add_subcommand("list", "List keys (ids, tenants, roles, state)");
  auto* revoke = keys->add_subcommand("revoke", "Revoke a key by its id");
  revoke->add_option("id", options->id, "the key's id (see `keys list`)")->required();
  for (auto* action : {add, list, revoke}) {
    action->add_option("--keys-file", options->keys_file, "the keys file")->capture_default_str();
    action->callback([&selected, options, name = action->get_name()] {
      options->action = name;
      selected = [options] { return keys_command(*options); };
    });
  }
}

}  // namespace chatflow::cli
