// The option area: typed lookups over the parsed store, "NAME" in the calling
// plugin's section and "SECTION.NAME" elsewhere, and the errors of
// accel/options.h.
#include <gtest/gtest.h>

#include <string>

#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

OptionValue make(AccelOptionType type, std::string text, bool given = false) {
  OptionValue v;
  v.type = type;
  v.text = std::move(text);
  v.given = given;
  return v;
}

class OptionServicesTest : public ServicesTest {
 protected:
  OptionServicesTest() {
    OptionValue flag = make(ACCEL_OPTION_BOOL, "true", true);
    flag.as_bool = true;
    context.options.put("tester", "flag", flag);
    OptionValue count = make(ACCEL_OPTION_INT, "42");
    count.as_int = 42;
    context.options.put("tester", "count", count);
    OptionValue ratio = make(ACCEL_OPTION_DOUBLE, "0.25");
    ratio.as_double = 0.25;
    context.options.put("tester", "ratio", ratio);
    OptionValue path = make(ACCEL_OPTION_STRING, "");
    path.has_value = false;  // a STRING without default, not given
    context.options.put("tester", "path", path);
    OptionValue mode = make(ACCEL_OPTION_ENUM, "most_recent", true);
    mode.enum_index = 1;
    context.options.put("tester", "mode", mode);
    OptionValue clip = make(ACCEL_OPTION_DOUBLE, "1.0");
    clip.as_double = 1.0;
    context.options.put("train", "max_grad_norm", clip);
    OptionValue offload = make(ACCEL_OPTION_BOOL, "false");
    context.options.put("other", "cpu_offload", offload);
  }
  const AccelOptionServices* options() { return services->options; }
};

TEST_F(OptionServicesTest, ReadsEachTypeFromTheCallersSection) {
  ASSERT_EQ(options()->struct_size, sizeof(AccelOptionServices));
  bool flag = false;
  int64_t count = 0;
  double ratio = 0;
  int32_t mode = -1;
  const char* text = "unchanged";
  ASSERT_EQ(options()->get_bool(&host, "flag", &flag), ACCEL_OK);
  ASSERT_EQ(options()->get_int(&host, "count", &count), ACCEL_OK);
  ASSERT_EQ(options()->get_double(&host, "ratio", &ratio), ACCEL_OK);
  ASSERT_EQ(options()->get_enum(&host, "mode", &mode), ACCEL_OK);
  ASSERT_EQ(options()->get_string(&host, "mode", &text), ACCEL_OK);
  EXPECT_TRUE(flag);
  EXPECT_EQ(count, 42);
  EXPECT_EQ(ratio, 0.25);
  EXPECT_EQ(mode, 1);
  EXPECT_STREQ(text, "most_recent");
}

TEST_F(OptionServicesTest, DoubleAcceptsAnIntAndStringMayBeUnset) {
  double as_double = 0;
  ASSERT_EQ(options()->get_double(&host, "count", &as_double), ACCEL_OK);
  EXPECT_EQ(as_double, 42.0);
  const char* text = "unchanged";
  ASSERT_EQ(options()->get_string(&host, "path", &text), ACCEL_OK);
  EXPECT_EQ(text, nullptr);
}

TEST_F(OptionServicesTest, ReadsOtherSectionsByQualifiedName) {
  double clip = 0;
  ASSERT_EQ(options()->get_double(&host, "train.max_grad_norm", &clip), ACCEL_OK);
  EXPECT_EQ(clip, 1.0);
  bool offload = true;
  ASSERT_EQ(options()->get_bool(&host, "other.cpu_offload", &offload), ACCEL_OK);
  EXPECT_FALSE(offload);
  // "NAME" is always the caller's own section.
  EXPECT_EQ(options()->get_bool(&other_host, "flag", &offload), ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(options()->get_bool(&other_host, "tester.flag", &offload), ACCEL_OK);
}

TEST_F(OptionServicesTest, IsSetTellsGivenFromDefault) {
  bool given = false;
  ASSERT_EQ(options()->is_set(&host, "flag", &given), ACCEL_OK);
  EXPECT_TRUE(given);
  ASSERT_EQ(options()->is_set(&host, "count", &given), ACCEL_OK);
  EXPECT_FALSE(given);
}

TEST_F(OptionServicesTest, WrongTypeIsInvalidArgumentNamingTheOption) {
  bool flag = false;
  EXPECT_EQ(options()->get_bool(&host, "count", &flag), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "get_bool: option 'tester.count' is INT, not BOOL");
  int64_t count = 0;
  EXPECT_EQ(options()->get_int(&host, "ratio", &count), ACCEL_ERROR_INVALID_ARGUMENT);
  int32_t index = 0;
  EXPECT_EQ(options()->get_enum(&host, "path", &index), ACCEL_ERROR_INVALID_ARGUMENT);
  const char* text = nullptr;
  EXPECT_EQ(options()->get_string(&host, "flag", &text), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tester.flag"), std::string::npos) << last_error();
}

TEST_F(OptionServicesTest, UnknownOptionOrSectionIsNotFound) {
  int64_t value = 0;
  EXPECT_EQ(options()->get_int(&host, "missing", &value), ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(last_error(), "get_int: no option 'tester.missing'");
  EXPECT_EQ(options()->get_int(&host, "fsdp.shards", &value), ACCEL_ERROR_NOT_FOUND);
  EXPECT_NE(last_error().find("plugin not loaded"), std::string::npos) << last_error();
}

TEST_F(OptionServicesTest, MalformedNamesAndOutputsAreInvalid) {
  int64_t value = 0;
  EXPECT_EQ(options()->get_int(&host, ".count", &value), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(options()->get_int(&host, "tester.", &value), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(options()->get_int(&host, nullptr, &value), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(options()->get_int(&host, "count", nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace accel::runtime::testing
