// Command-line parsing: defaults, kwargs sections, and one clear error per bad input.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <typeinfo>

#include "host/cli/options.h"

using accel::cli::parse_command_line;
using accel::cli::UsageError;

namespace {

accel::RunConfig parse(std::vector<std::string> args) { return parse_command_line(args).config; }

std::string error_of(std::vector<std::string> args) {
  try {
    parse_command_line(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Options, DefaultsAreTheTinyModelOnSyntheticData) {
  const accel::RunConfig c = parse({});
  EXPECT_EQ(c.model, "gpt-tiny");
  EXPECT_EQ(c.data, "synthetic");
  EXPECT_EQ(c.mixed_precision, accel::MixedPrecision::no);
  EXPECT_EQ(c.optimizer.schedule, accel::LrScheduleKind::cosine);
  EXPECT_TRUE(c.fused_kernels);  // on a CUDA device; the CPU keeps ATen's path regardless
}

TEST(Options, FusedKernelsCanBeTurnedOff) {
  EXPECT_FALSE(parse({"--fused-kernels", "false"}).fused_kernels);
  EXPECT_TRUE(parse({"--fused-kernels", "true"}).fused_kernels);
  EXPECT_NE(error_of({"--fused-kernels", "sometimes"}).find("fused-kernels"), std::string::npos);
}

TEST(Options, ParsesRunAndKwargsOptions) {
  const accel::RunConfig c = parse({"--steps", "7", "--batch-size=12", "--grad-accum", "3", "--lr", "0.5",
                                    "--lr-schedule", "linear", "--mixed-precision", "fp16",
                                    "--grad_scaler.init_scale", "1024", "--plugin", "a", "--plugin", "b",
                                    "--data-order", "sequential", "--n-layer", "3"});
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.batch_size, 12);
  EXPECT_EQ(c.grad_accum, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.5);
  EXPECT_EQ(c.optimizer.schedule, accel::LrScheduleKind::linear);
  EXPECT_EQ(c.mixed_precision, accel::MixedPrecision::fp16);
  EXPECT_DOUBLE_EQ(c.grad_scaler.init_scale, 1024);
  EXPECT_EQ(c.plugins, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.data_order, accel::DataOrder::sequential);
  ASSERT_TRUE(c.model_overrides.n_layer.has_value());
  EXPECT_EQ(*c.model_overrides.n_layer, 3);
  EXPECT_FALSE(c.model_overrides.n_head.has_value());
}

// Issue 30: DeepSpeed's fp16.hysteresis and fp16.min_loss_scale have a host
// flag to agree with, and a plugin's own clipping option needs to know
// whether --grad-clip was given or holds its default.
TEST(Options, ScalerHysteresisFloorAndWhetherGradClipWasGiven) {
  const accel::RunConfig defaults = parse({});
  EXPECT_EQ(defaults.grad_scaler.hysteresis, 1);
  EXPECT_DOUBLE_EQ(defaults.grad_scaler.min_scale, 0.0);
  EXPECT_FALSE(defaults.optimizer.grad_clip_given);
  const accel::RunConfig c = parse({"--grad_scaler.hysteresis", "2", "--grad_scaler.min_scale", "1", "--grad-clip", "1"});
  EXPECT_EQ(c.grad_scaler.hysteresis, 2);
  EXPECT_DOUBLE_EQ(c.grad_scaler.min_scale, 1.0);
  EXPECT_TRUE(c.optimizer.grad_clip_given);
  EXPECT_NE(error_of({"--grad_scaler.hysteresis", "0"}).find("--grad_scaler.hysteresis 0: must be >= 1"), std::string::npos);
  EXPECT_NE(error_of({"--grad_scaler.min_scale", "1e6"}).find("--grad_scaler.min_scale must lie in [0, "),
            std::string::npos);
}

TEST(Options, ConfigFileSectionsMapToKwargsOptions) {
  const std::string path = ::testing::TempDir() + "accel_options_test.cfg";
  std::ofstream(path) << "steps = 5\n[grad_scaler]\ngrowth_interval = 17\n";
  const accel::RunConfig c = parse({"--config", path});
  EXPECT_EQ(c.steps, 5);
  EXPECT_EQ(c.grad_scaler.growth_interval, 17);
  // The command line wins over the file.
  EXPECT_EQ(parse({"--config", path, "--steps", "9"}).steps, 9);
  std::remove(path.c_str());
}

TEST(Options, HelpAndVersionAreActions) {
  EXPECT_EQ(parse_command_line({"--help"}).action, accel::cli::Action::help);
  EXPECT_NE(parse_command_line({"--help"}).help_text.find("--batch-size"), std::string::npos);
  EXPECT_EQ(parse_command_line({"--version"}).action, accel::cli::Action::version);
}

TEST(Options, BadInputGivesOneLineNamingTheOption) {
  EXPECT_NE(error_of({"--no-such-option"}).find("no-such-option"), std::string::npos);
  EXPECT_NE(error_of({"--steps", "many"}).find("steps"), std::string::npos);
  EXPECT_NE(error_of({"--lr", "-1"}).find("--lr"), std::string::npos);
  EXPECT_NE(error_of({"--mixed-precision", "fp64"}).find("no, bf16, fp16"), std::string::npos);
  EXPECT_NE(error_of({"--data", "csv:x"}).find("--data"), std::string::npos);
  EXPECT_NE(error_of({"--save-every", "5"}).find("--save"), std::string::npos);
  EXPECT_NE(error_of({"--config", "/nonexistent/accel.cfg"}).find("cannot open"), std::string::npos);
  for (const auto& args : {std::vector<std::string>{"--no-such-option"}, {"--steps", "x"}}) {
    EXPECT_EQ(error_of(args).find('\n'), std::string::npos);
  }
}

TEST(Options, StrayPositionalsAreRefused) {
  EXPECT_NE(error_of({"merge-weight", "ckpt", "out"}).find("unexpected argument 'merge-weight'"), std::string::npos);
  EXPECT_NE(error_of({"--steps", "3", "extra"}).find("'extra'"), std::string::npos);
}

TEST(Options, ConfigMustBeAFile) {
  EXPECT_NE(error_of({"--config", ::testing::TempDir()}).find("is a directory"), std::string::npos);
  EXPECT_THROW(accel::cli::scan_plugin_request({"--config", ::testing::TempDir()}), UsageError);
}

// Boost.Program_options' message builder loops forever on a token holding
// the placeholder it substitutes (cli_fuzz found it): before the check these
// calls never returned, and ctest's timeout failed the test.
TEST(Options, ParserMessagePlaceholdersAreRefusedNotLoopedOn) {
  const std::vector<std::vector<std::string>> inputs = {
      {"--grad%canonical_option%-accum", "1"}, {"--steps", "%value%"}, {"--%option%"},
      {"--lr", "x%original_token%"}, {"--%prefix%steps", "1"}};
  for (const std::vector<std::string>& args : inputs) {
    const std::string error = error_of(args);
    EXPECT_NE(error.find("does not accept in options"), std::string::npos) << args[0] << ": " << error;
    EXPECT_THROW(accel::cli::scan_plugin_request(args), UsageError) << args[0];
  }
  const std::string path = ::testing::TempDir() + "placeholder.cfg";
  {
    std::ofstream file(path);
    file << "steps = %value%\n";
  }
  EXPECT_NE(error_of({"--config", path}).find("--config '" + path + "' contains '%value%'"), std::string::npos);
  {
    std::ofstream file(path);  // a syntax error's message substitutes the line
    file << "%--model %invalid_line%\n";
  }
  EXPECT_NE(error_of({"--config", path}).find("contains '%invalid_line%'"), std::string::npos);
  EXPECT_THROW(accel::cli::scan_plugin_request({"--config", path}), UsageError);
  std::remove(path.c_str());
}

TEST(Options, RealOptionsMustBeFinite) {
  for (const char* option : {"--lr", "--min-lr", "--eps", "--weight-decay", "--grad-clip", "--beta1", "--beta2",
                             "--grad_scaler.init_scale", "--grad_scaler.growth_factor",
                             "--grad_scaler.backoff_factor", "--init_process_group.timeout"}) {
    for (const char* value : {"inf", "nan"}) {
      const std::string error = error_of({option, value});
      EXPECT_NE(error.find(std::string(option) + ": "), std::string::npos) << option << " " << value << ": " << error;
      EXPECT_NE(error.find("not a finite number"), std::string::npos) << option << " " << value << ": " << error;
    }
  }
  // An overflowing literal is refused by the parser itself, naming the option.
  EXPECT_NE(error_of({"--lr", "1e400"}).find("'--lr'"), std::string::npos);
  const std::string path = ::testing::TempDir() + "accel_nonfinite.cfg";
  std::ofstream(path) << "eps = inf\n";
  EXPECT_NE(error_of({"--config", path}).find("--eps"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Options, TimeoutHasADocumentedRange) {
  for (const char* value : {"0", "-1", "0.0004", "1e10", "1e300", "604800.5"}) {
    EXPECT_NE(error_of({"--init_process_group.timeout", value}).find("outside [0.001, 604800]"), std::string::npos)
        << value;
  }
  EXPECT_DOUBLE_EQ(parse({"--init_process_group.timeout", "0.001"}).comm.timeout_s, 0.001);
  EXPECT_DOUBLE_EQ(parse({"--init_process_group.timeout", "604800"}).comm.timeout_s, 604800.0);
}

TEST(Options, ChoicesAreCheckedWhileParsing) {
  EXPECT_NE(error_of({"--log-level", "verbose"}).find("--log-level: 'verbose'"), std::string::npos);
  EXPECT_NE(error_of({"--model", "gpt-huge"}).find("--model: 'gpt-huge'"), std::string::npos);
  EXPECT_NE(error_of({"--nonfinite-loss-skips", "-1"}).find("--nonfinite-loss-skips"), std::string::npos);
}

// Issue 30: integer options without bounds let products of them leave
// int64 further on (a division by zero, a check that passed on a wrapped
// value). Every integer option the run's parser declares, now or later, has
// an entry in integer_option_ranges(), and every entry names a real one.
TEST(Options, EveryIntegerOptionHasARange) {
  namespace po = boost::program_options;
  std::set<std::string> ranged;
  for (const auto& range : accel::cli::integer_option_ranges()) {
    EXPECT_TRUE(ranged.insert(range.option).second) << range.option << " listed twice";
    EXPECT_LE(range.min, range.max) << range.option;
    EXPECT_GE(range.max, 0) << range.option << ": the unsigned --seed is compared against a non-negative maximum";
  }
  const std::type_info* integer_types[] = {&typeid(short),     &typeid(unsigned short),     &typeid(int),
                                           &typeid(unsigned),  &typeid(long),               &typeid(unsigned long),
                                           &typeid(long long), &typeid(unsigned long long), &typeid(signed char),
                                           &typeid(unsigned char)};
  std::set<std::string> integer_options;
  const po::options_description run = accel::cli::describe_run_options();
  for (const auto& option : run.options()) {
    const auto* typed = dynamic_cast<const po::typed_value_base*>(option->semantic().get());
    if (typed == nullptr) continue;  // a flag without a value (--help)
    bool integer = false;
    for (const std::type_info* type : integer_types) integer = integer || typed->value_type() == *type;
    if (!integer) continue;
    integer_options.insert(option->long_name());
    EXPECT_TRUE(ranged.count(option->long_name()))
        << "--" << option->long_name() << " is an integer option without an entry in integer_option_ranges()";
  }
  EXPECT_GE(integer_options.size(), 15u);  // the walk itself found them (--steps, --batch-size, ...)
  for (const std::string& name : ranged) {
    EXPECT_TRUE(integer_options.count(name)) << name << " has a range but is not an integer option";
  }
}

// Each range is enforced: one past either end is one line naming the option.
TEST(Options, IntegerOptionsPastTheirRangeAreRefused) {
  for (const auto& range : accel::cli::integer_option_ranges()) {
    const std::string flag = std::string("--") + range.option;
    std::vector<std::string> past;
    if (range.max < INT64_MAX) {
      past.push_back(std::to_string(range.max + 1));
    } else {
      past.push_back(std::to_string(static_cast<unsigned long long>(range.max) + 1));
    }
    if (range.min > INT64_MIN) past.push_back(std::to_string(range.min - 1));
    for (const std::string& value : past) {
      const std::string error = error_of({flag, value});
      EXPECT_NE(error.find(flag), std::string::npos) << flag << " " << value << " gave '" << error << "'";
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
  }
  // The bounds themselves are accepted.
  EXPECT_EQ(parse({"--steps", "1000000000"}).steps, 1000000000);
  EXPECT_EQ(parse({"--batch-size", "1048576"}).batch_size, int64_t{1} << 20);
  EXPECT_EQ(parse({"--seed", "0"}).seed, 0u);
  EXPECT_EQ(error_of({"--steps", "1000000001"}), "--steps 1000000001: must be >= 0 and <= 1000000000");
  EXPECT_EQ(error_of({"--grad-accum", "9223372036854775807"}),
            "--grad-accum 9223372036854775807: must be >= 1 and <= 1048576");
}

TEST(Options, GlobalBatchMustSplitAcrossRanksAndMicroSteps) {
  accel::RunConfig c = parse({"--batch-size", "12", "--grad-accum", "2"});
  EXPECT_NO_THROW(accel::cli::validate_for_world(c, 3));
  EXPECT_THROW(accel::cli::validate_for_world(c, 4), UsageError);
  c.batch_size = 11;  // odd: not divisible by 2 micro-steps
  EXPECT_THROW(accel::cli::validate_for_world(c, 1), UsageError);
}

}  // namespace
