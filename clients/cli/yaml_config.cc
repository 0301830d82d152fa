// YAML option files for CLI11 (see yaml_config.h).
#include "clients/cli/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "clients/cli/commands.h"

namespace lrkv::cli {
namespace {

nlohmann::json& Record() {
  static nlohmann::json record;
  return record;
}

nlohmann::json ToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) a.push_back(ToJson(e));
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n)
        o[kv.first.as<std::string>()] = ToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Scalar: {
      // Quoted: a string even when it looks like a number.
      return n.Tag() == "!" ? nlohmann::json(n.Scalar()) : JsonScalar(n.Scalar());
    }
    default:
      return nullptr;
  }
}

// An option's value as the command line would give it.
std::string AsOption(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) {
    std::string out;
    for (const auto& e : n) {
      if (!out.empty()) out += ",";
      out += e.IsScalar() ? e.Scalar() : ToJson(e).dump();
    }
    return out;
  }
  return ToJson(n).dump();
}

// The subcommands the command line selected, outermost first ("bench",
// "generate").
std::vector<std::string> SelectedPath(const CLI::App* app) {
  std::vector<std::string> path;
  for (const CLI::App* a = app; a != nullptr;) {
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : a->get_subcommands()) next = sub;
    if (next != nullptr) path.push_back(next->get_name());
    a = next;
  }
  return path;
}

// CLI11 (2.1) reads option files on the root app only: the items are addressed
// to the subcommand the command line chose.
class YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(const CLI::App* root) : root_(root) {}

  std::string to_config(const CLI::App*, bool, bool,
                        std::string) const override {
    return "";
  }

  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override {
    const std::string text(std::istreambuf_iterator<char>(in), {});
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw CLI::ConversionError("-f: not valid YAML: " +
                                 std::string(e.what()));
    }
    if (!root.IsMap()) {
      throw CLI::ConversionError(
          "-f: the file must be a YAML mapping of option names");
    }
    Record() = {{"text", text}};
    std::vector<CLI::ConfigItem> items;
    for (const auto& kv : root) {
      CLI::ConfigItem item;
      item.parents = SelectedPath(root_);
      std::string name = kv.first.as<std::string>();
      for (char& c : name) {
        if (c == '_') c = '-';
      }
      item.name = name;
      item.inputs = {AsOption(kv.second)};
      items.push_back(item);
    }
    return items;
  }

 private:
  const CLI::App* root_;
};

std::vector<CLI::Option*>& FileOptions() {
  static std::vector<CLI::Option*> options;
  return options;
}

}  // namespace

void AddConfigFileOption(CLI::App& root) {
  root.config_formatter(std::make_shared<YamlConfig>(&root));
  // A key no option of the command has is an error, not silently dropped
  // (inherited by the subcommands added after this).
  root.allow_config_extras(CLI::config_extras_mode::error);
  FileOptions().push_back(
      root.set_config("-f,--file", "",
                      "YAML file of the command's options, e.g. `lrkv compare "
                      "-f study.yaml` (flags given "
                      "on the command line override it)"));
  FileOptions().back()->group("Global options");
}

nlohmann::json ConfigFileRecord() {
  nlohmann::json r = Record();
  if (!r.contains("text")) return nullptr;
  for (const CLI::Option* o : FileOptions()) {
    if (o->count() > 0) r["name"] = o->results()[0];
  }
  return r;
}

}  // namespace lrkv::cli
