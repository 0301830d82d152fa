// One option schema per command and job kind (base/option_schema.h): iterating
// each schema, the CLI's flags (clients/cli/schema_flags.h) and lrkvd's
// params_json parser (service/job_params.cc) accept exactly the same names and
// refuse exactly the same values; and the real `lrkv` binary's commands carry
// the schema's flags and no other job option.
#include <array>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "clients/cli/schema_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/decode_bench_options_schema.h"
#include "nlohmann/json.hpp"
#include "runtime/generate_bench_options_schema.h"
#include "service/job_params.h"
#include "study/compare_options_schema.h"
#include "surgery/convert_options_schema.h"
#include "tests/test_paths.h"
#include "train/heal_options_schema.h"
#include "verify/verify_options_schema.h"

namespace lrkv {
namespace {

using nlohmann::json;

// A value on the command line, and the same value as a client writes it in
// params_json.
struct Value {
  std::string text;
  json param;
};

// Values of `info`'s type that it refuses: the wrong type, outside the range,
// not a choice, an empty list.
std::vector<Value> BadValues(const OptionInfo& info) {
  std::vector<Value> bad;
  const bool list = IsListType(info.type);
  auto as_param = [list](json v) { return list ? json::array({v}) : v; };
  switch (info.type) {
    case OptionType::kFlag:
      bad.push_back({"", json("yes")});  // no text form: a flag takes none
      break;
    case OptionType::kInteger:
    case OptionType::kIntegerList:
      bad.push_back({"2.5", as_param(2.5)});
      bad.push_back({"many", as_param("many")});
      break;
    case OptionType::kNumber:
    case OptionType::kNumberList:
      bad.push_back({"many", as_param("many")});
      break;
    case OptionType::kBytes:
      bad.push_back({"5XB", json("5XB")});
      bad.push_back({"-5", json(-5)});
      break;
    case OptionType::kString:
    case OptionType::kStringList:
      if (!info.choices.empty())
        bad.push_back({"no-such-value", as_param("no-such-value")});
      break;
  }
  // Out of range: integers as integers (else they would be refused as the wrong
  // type).
  const bool integral = info.type == OptionType::kInteger ||
                        info.type == OptionType::kIntegerList;
  auto number = [integral](double x) {
    return integral ? json(static_cast<int64_t>(x)) : json(x);
  };
  if (info.min) {
    const double below = info.min_open ? *info.min : *info.min - 1;
    if (below > -1e18)
      bad.push_back({number(below).dump(), as_param(number(below))});
  }
  if (info.max && *info.max < 1e18) {
    bad.push_back(
        {number(*info.max + 1).dump(), as_param(number(*info.max + 1))});
  }
  if (list && info.non_empty) bad.push_back({",", json::array()});
  return bad;
}

// A JSON value as the command line writes it: lists as comma lists.
std::string Text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return v.dump();
  std::string text;
  for (const auto& e : v) text += (text.empty() ? "" : ",") + Text(e);
  return text;
}

// A value `info` takes: its default, its least value where the default is a
// sentinel the option cannot be given (-1: from the budget), or for options
// without a default, an example.
Value GoodValue(const OptionInfo& info) {
  if (info.type == OptionType::kFlag) return {"", true};
  const json& d = info.default_value;
  if (info.role ==
      OptionRole::kPath) {  // a real text file: some checks open it
    const std::string text = lrkv::testing::StoriesTextPath();
    return {text, json(text)};
  }
  const bool numeric =
      info.type == OptionType::kInteger || info.type == OptionType::kNumber;
  if (d.is_null() && numeric) {  // unset by default (a gate): its least value
    // (its greatest where the least is excluded: a budget in (0, 1])
    const double x = !info.min        ? 0
                     : !info.min_open ? *info.min
                     : info.max       ? *info.max
                                      : *info.min + 1;
    const json least = info.type == OptionType::kInteger
                           ? json(static_cast<int64_t>(x))
                           : json(x);
    return {Text(least), least};
  }
  if (info.role != OptionRole::kValue || d.is_null() || d == "") {
    return {"some-name", json("some-name")};
  }
  if (!info.Check(d, OptionSource::kParamsJson).ok() && info.min) {
    const json least =
        static_cast<int64_t>(*info.min) + (info.min_open ? 1 : 0);
    return {Text(least), least};
  }
  return {Text(d), d};
}

// One job kind: its schema, and lrkvd's parser of its params_json.
template <typename Options>
struct Kind {
  const OptionSchema<Options>& schema;
  std::function<absl::Status(const std::string& params_json)> service_parse;
};

// The required options with values they take, so that one option can be varied
// alone.
template <typename Options>
json RequiredParams(const OptionSchema<Options>& schema) {
  json p = json::object();
  for (const OptionInfo& info : schema.Infos()) {
    if (info.required) p[info.name] = GoodValue(info).param;
  }
  return p;
}

// The verdict of the CLI's path on `args` after the command name: CLI11 parses,
// the flags give their JSON, the schema parses it.
template <typename Options>
absl::Status CliVerdict(const OptionSchema<Options>& schema,
                        std::vector<std::string> args) {
  CLI::App app;
  // "bench decode": a subcommand of a subcommand.
  CLI::App* cmd = &app;
  std::vector<std::string> argv = {"lrkv"};
  for (absl::string_view word : absl::StrSplit(schema.command(), ' ')) {
    cmd = cmd->add_subcommand(std::string(word));
    argv.push_back(std::string(word));
  }
  auto flags = cli::AddSchemaFlags(cmd, schema);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> raw;
  for (const auto& a : argv) raw.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(raw.size()), raw.data());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(absl::StrCat("CLI11: ", e.what()));
  }
  return cli::ParseFlags(*flags, schema, Options{}).status();
}

// The command-line form of `params` (every value of a list as one comma list).
std::vector<std::string> CliArgs(const json& params) {
  std::vector<std::string> args;
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string flag = "--" + OptionFlagName(it.key());
    if (it->is_boolean()) {
      if (it->get<bool>()) args.push_back(flag);
      continue;
    }
    args.push_back(flag);
    args.push_back(Text(*it));
  }
  return args;
}

template <typename Options>
void ExpectSameNamesAndVerdicts(const Kind<Options>& kind) {
  const auto& schema = kind.schema;
  const json required = RequiredParams(schema);
  SCOPED_TRACE(schema.command());
  // The required options alone: both accept them.
  EXPECT_TRUE(CliVerdict(schema, CliArgs(required)).ok());
  EXPECT_TRUE(kind.service_parse(required.dump()).ok())
      << kind.service_parse(required.dump());
  int checked = 0;
  for (const OptionInfo& info : schema.Infos()) {
    SCOPED_TRACE(info.name);
    const std::string flag = "--" + OptionFlagName(info.name);
    // A value it takes: both accept it (a local-only option: the job refuses
    // its name).
    // The options it is read beside (convert's --calib: by the activation
    // metric; verify's quality gates: fidelity to a source on text), given with
    // every value.
    json context = required;
    if (schema.command() == "convert" && info.name == "calib")
      context["metric"] = "activation";
    if (schema.command() == "verify" &&
        absl::StrContains("max_ppl_increase min_top1 max_kl", info.name)) {
      context["source"] = "some-name";
      context["text"] = lrkv::testing::StoriesTextPath();
    }
    const Value good = GoodValue(info);
    std::vector<std::string> args = CliArgs(context);
    args.push_back(flag);
    if (info.type != OptionType::kFlag) args.push_back(good.text);
    json params = context;
    params[info.name] = good.param;
    EXPECT_TRUE(CliVerdict(schema, args).ok()) << CliVerdict(schema, args);
    const absl::Status job = kind.service_parse(params.dump());
    if (info.scope == OptionScope::kLocalOnly) {
      EXPECT_EQ(job.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(job.message()), ::testing::HasSubstr("local"));
      continue;
    }
    EXPECT_TRUE(job.ok()) << job;
    for (const std::string& alias : info.aliases) {
      json aliased = context;
      aliased[alias] = good.param;
      EXPECT_TRUE(kind.service_parse(aliased.dump()).ok()) << alias;
    }
    // Values it refuses: both refuse them, with InvalidArgument.
    for (const Value& bad : BadValues(info)) {
      SCOPED_TRACE(bad.param.dump());
      json bad_params = context;
      bad_params[info.name] = bad.param;
      const absl::Status job_verdict = kind.service_parse(bad_params.dump());
      EXPECT_EQ(job_verdict.code(), absl::StatusCode::kInvalidArgument)
          << job_verdict;
      if (info.type == OptionType::kFlag)
        continue;  // a flag has no text to get wrong
      std::vector<std::string> bad_args = CliArgs(context);
      bad_args.push_back(flag);
      bad_args.push_back(bad.text);
      const absl::Status cli_verdict = CliVerdict(schema, bad_args);
      EXPECT_EQ(cli_verdict.code(), absl::StatusCode::kInvalidArgument)
          << cli_verdict;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  // A name the schema lacks: both refuse it.
  json unknown = required;
  unknown["no_such_option"] = 1;
  EXPECT_EQ(kind.service_parse(unknown.dump()).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> unknown_args = CliArgs(required);
  unknown_args.push_back("--no-such-option");
  unknown_args.push_back("1");
  EXPECT_EQ(CliVerdict(schema, unknown_args).code(),
            absl::StatusCode::kInvalidArgument);
  // Every required option: both refuse its absence.
  for (const OptionInfo& info : schema.Infos()) {
    if (!info.required) continue;
    json missing = required;
    missing.erase(info.name);
    EXPECT_EQ(kind.service_parse(missing.dump()).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(CliVerdict(schema, CliArgs(missing)).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(OptionSchemaTest, CliAndJobsAcceptTheSameNamesAndRefuseTheSameValues) {
  ExpectSameNamesAndVerdicts(Kind<ConvertJobOptions>{
      ConvertOptionSchema(), [](const std::string& p) {
        return service::ParseConvertParams(p, "", "").status();
      }});
  ExpectSameNamesAndVerdicts(Kind<VerifyJobOptions>{
      VerifyOptionSchema(), [](const std::string& p) {
        return service::ParseVerifyParams(p, "").status();
      }});
  ExpectSameNamesAndVerdicts(Kind<HealJobOptions>{
      HealOptionSchema(), [](const std::string& p) {
        return service::ParseHealParams(p, "", "").status();
      }});
  ExpectSameNamesAndVerdicts(Kind<CompareJobOptions>{
      CompareOptionSchema(), [](const std::string& p) {
        return service::ParseCompareParams(p, "", "").status();
      }});
  // A bench job times the kernels at its checkpoint's shape.
  ExpectSameNamesAndVerdicts(Kind<kernels::DecodeBenchJobOptions>{
      kernels::DecodeBenchOptionSchema(), [](const std::string& p) {
        ModelConfig config;
        config.num_layers = 2;
        config.num_heads = 4;
        config.num_kv_heads = 4;
        config.head_dim = 16;
        return service::ParseBenchParams(p, config).status();
      }});
  // A pipeline's bench stage takes `lrkv bench generate`'s timing options.
  ExpectSameNamesAndVerdicts(Kind<GenerateBenchOptions>{
      GenerateBenchOptionSchema(), [](const std::string& p) {
        return service::ParsePipelineParams(
                   absl::StrCat(R"({"bench": )", p, "}"))
            .status();
      }});
}

// The same values end in the same options whichever way they came.
TEST(OptionSchemaTest, CliAndJobsStoreTheSameOptions) {
  CLI::App app;
  CLI::App* cmd = app.add_subcommand("compare");
  auto flags = cli::AddSchemaFlags(cmd, CompareOptionSchema());
  const std::array<const char*, 12> argv = {
      "lrkv",       "compare", "--budget", "0.3,0.6", "--variants",   "mla",
      "--variants", "lrkv",    "--eval",   "e.txt",   "--eval-range", "0:0.5"};
  app.parse(static_cast<int>(argv.size()), argv.data());
  auto local =
      cli::ParseFlags(*flags, CompareOptionSchema(), CompareJobOptions{});
  ASSERT_TRUE(local.ok()) << local.status();
  auto job = service::ParseCompareParams(flags->Given().dump(), "", "");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(local->budgets, (std::vector<double>{0.3, 0.6}));
  EXPECT_EQ(local->variants, (std::vector<std::string>{"mla", "lrkv"}));
  EXPECT_EQ(job->budgets, local->budgets);
  EXPECT_EQ(job->variants, local->variants);
  EXPECT_EQ(job->eval_range.end, 0.5);
  // Sizes with units, from the command line or params_json.
  auto shard =
      service::ParseConvertParams(R"({"max_shard_size": "2GiB"})", "", "");
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->max_shard_bytes, uint64_t{2} << 30);
}

// The long flags `lrkv CMD --help` lists.
std::set<std::string> HelpFlags(const std::string& command) {
  std::set<std::string> flags;
  const std::string cmd = absl::StrCat(LRKV_BIN, " ", command, " --help 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return flags;
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    out.append(buf.data(), n);
  pclose(p);
  // An option's line starts with its names ("  -h,--help", "
  // --keep-best,--no-keep-best"); the descriptions after them may mention other
  // commands' flags.
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::StartsWith(line, "-")) continue;
    const absl::string_view names = line.substr(0, line.find(' '));
    for (absl::string_view name : absl::StrSplit(names, ',')) {
      if (!absl::ConsumePrefix(&name, "--")) continue;
      size_t n = 0;
      while (n < name.size() &&
             (absl::ascii_isalnum(name[n]) || name[n] == '-'))
        ++n;
      if (n > 0) flags.insert(std::string(name.substr(0, n)));
    }
  }
  return flags;
}

// The real binary: each command's flags are its schema's (names and aliases)
// plus the command's own outputs and processes, which are never job parameters.
template <typename Options>
void ExpectBinaryUsesSchema(const OptionSchema<Options>& schema,
                            std::set<std::string> own) {
  SCOPED_TRACE(schema.command());
  std::set<std::string> expected = {
      "help",       "detach", "checkpoint", "file",  "server",
      "token-file", "tls-ca", "json",       "local", "verbose"};
  expected.insert(own.begin(), own.end());
  for (const OptionInfo& info : schema.Infos()) {
    expected.insert(OptionFlagName(info.name));
    for (const auto& a : info.aliases) expected.insert(OptionFlagName(a));
    // A flag on by default, or unset (auto) until given, has its --no- form.
    if (info.type == OptionType::kFlag &&
        (info.default_value == true || info.default_value.is_null())) {
      expected.insert("no-" + OptionFlagName(info.name));
    }
  }
  const std::set<std::string> listed = HelpFlags(schema.command());
  for (const std::string& name : expected) {
    if (own.count(name) || name == "help") continue;
    if (name == "server" || name == "token-file" || name == "tls-ca" ||
        name == "json" || name == "local" || name == "verbose" ||
        name == "file" || name == "detach" || name == "checkpoint") {
      continue;  // global, shown or not by the command's help
    }
    EXPECT_TRUE(listed.count(name))
        << "--" << name << " is in the schema, not in the command";
  }
  for (const std::string& name : listed) {
    EXPECT_TRUE(expected.count(name))
        << "--" << name << " is an option outside the schema";
  }
}

TEST(OptionSchemaTest, TheBinaryCommandsCarryTheirSchemas) {
  ExpectBinaryUsesSchema(ConvertOptionSchema(), {"out"});
  ExpectBinaryUsesSchema(VerifyOptionSchema(), {"json-out", "junit"});
  ExpectBinaryUsesSchema(HealOptionSchema(), {"out", "nproc", "events"});
  ExpectBinaryUsesSchema(CompareOptionSchema(), {"json-out", "html"});
  ExpectBinaryUsesSchema(kernels::DecodeBenchOptionSchema(), {"json-out"});
  ExpectBinaryUsesSchema(
      GenerateBenchOptionSchema(),
      {"source", "products", "against-llama-cpp", "llama-cpp-source"});
}

}  // namespace
}  // namespace lrkv
