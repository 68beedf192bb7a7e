// chatflow inspect MODEL: a GGUF file's metadata and tensor table, like gguf-dump.
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/engine/gguf_file.h"

namespace chatflow::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool all_tensors = false;
};

int inspect_command(const InspectOptions& options) {
  std::shared_ptr<const engine::GgufFile> file = engine::GgufFile::open(options.model);
  std::cout << options.model << ": GGUF v" << file->version() << ", " << file->size() << " bytes, "
            << file->metadata().size() << " metadata entries, " << file->tensors().size()
            << " tensors, alignment " << file->alignment() << "\n\nMetadata:\n";
  for (const auto& [key, value] : file->metadata()) {
    std::cout << "  " << std::left << std::setw(44) << key << value.describe() << "\n";
  }
  std::cout << "\nTensors:\n";
  for (const auto& tensor : file->tensors()) {
    std::cout << "  " << std::left << std::setw(32) << tensor.name << std::setw(6)
              << kernels::to_string(tensor.type) << std::setw(20) << tensor.shape_text()
              << tensor.bytes << " bytes\n";
    if (!options.all_tensors && &tensor - file->tensors().data() >= 40) {
      std::cout << "  ... " << file->tensors().size() - 41 << " more (--all-tensors)\n";
      break;
    }
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<InspectOptions>();
  auto* command = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  command->add_option("model", options->model, "GGUF file")->required();
  command->add_flag("--all-tensors", options->all_tensors, "list every tensor");
  command->callback(
      [&selected, options] { selected = [options] { return inspect_command(*options); }; });
}

}  // namespace chatflow::cli
