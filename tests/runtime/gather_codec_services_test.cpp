// The gather-codec area (ABI 1.8): without a provider, query encodes nothing
// and encode / decode decline; with one, each call reaches the provider's
// hook with the caller's args, and the provider's failure comes back as its
// status with "gather_codec.CALL: plugin NAME: message" pending.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

// The provider's side, as a plugin's hooks would see it.
struct Seen {
  int queries = 0, encodes = 0, decodes = 0;
  int32_t unit = -1;
  int32_t slices = -1;
  AccelGroup* group = nullptr;
};
Seen g_seen;

AccelStatus provider_query(AccelPlugin*, AccelGatherCodecQueryArgs* args) {
  ++g_seen.queries;
  g_seen.unit = args->unit;
  args->code_dtypes[1] = DLDataType{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};  // only parameter 1
  return ACCEL_OK;
}
AccelStatus provider_encode(AccelPlugin*, const AccelGatherCodecArgs* args) {
  ++g_seen.encodes;
  g_seen.slices = args->num_slices;
  g_seen.group = args->group;
  return ACCEL_OK;
}
AccelStatus provider_decode_fails(AccelPlugin*, const AccelGatherCodecArgs*) {
  ++g_seen.decodes;
  host_services()->set_error(nullptr, ACCEL_ERROR_INVALID_ARGUMENT, "codes of a parameter it never encoded");
  return ACCEL_ERROR_INVALID_ARGUMENT;
}
AccelStatus provider_query_two_bytes(AccelPlugin*, AccelGatherCodecQueryArgs* args) {
  args->code_dtypes[0] = DLDataType{kDLBfloat, 16, 1};
  return ACCEL_OK;
}

class GatherCodecServicesTest : public ServicesTest {
 protected:
  GatherCodecServicesTest() { g_seen = Seen{}; }
  const AccelGatherCodecServices* codec() { return services->gather_codec; }

  AccelStatus query(std::vector<DLDataType>& answer) {
    AccelGatherCodecQueryArgs q{};
    q.struct_size = sizeof(q);
    q.unit = 1;
    q.param_dtype = DLDataType{kDLBfloat, 16, 1};
    q.num_params = static_cast<int32_t>(answer.size());
    q.code_dtypes = answer.data();
    return codec()->query(&host, &q);
  }
  AccelGatherCodecArgs no_slices() {
    AccelGatherCodecArgs a{};
    a.struct_size = sizeof(a);
    a.unit = 1;
    return a;
  }
};

TEST_F(GatherCodecServicesTest, TheAreaIsInTheTableOfA18Host) {
  ASSERT_TRUE(ACCEL_STRUCT_HAS_FIELD(services, AccelHostServices, gather_codec));
  ASSERT_NE(codec(), nullptr);
  EXPECT_TRUE(ACCEL_HAS_FN(codec(), AccelGatherCodecServices, query));
  EXPECT_TRUE(ACCEL_HAS_FN(codec(), AccelGatherCodecServices, encode));
  EXPECT_TRUE(ACCEL_HAS_FN(codec(), AccelGatherCodecServices, decode));
}

TEST_F(GatherCodecServicesTest, WithoutAProviderNothingIsEncoded) {
  std::vector<DLDataType> answer(3, DLDataType{0, 0, 0});
  ASSERT_EQ(query(answer), ACCEL_OK);
  for (const DLDataType& t : answer) EXPECT_EQ(t.bits, 0);
  const AccelGatherCodecArgs a = no_slices();
  EXPECT_EQ(codec()->encode(&host, &a), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_NE(last_error().find("gather_codec.encode: no plugin provides a codec"), std::string::npos) << last_error();
}

TEST_F(GatherCodecServicesTest, CallsReachTheProviderAndItsFailureNamesIt) {
  context.gather_codec = {"fp8", nullptr, provider_query, provider_encode, provider_decode_fails};
  std::vector<DLDataType> answer(3, DLDataType{0, 0, 0});
  ASSERT_EQ(query(answer), ACCEL_OK);
  EXPECT_EQ(g_seen.queries, 1);
  EXPECT_EQ(g_seen.unit, 1);
  EXPECT_EQ(answer[1].code, ACCEL_DL_FLOAT8_E4M3FN);
  EXPECT_EQ(answer[0].bits, 0);

  AccelGatherCodecArgs a = no_slices();
  a.group = reinterpret_cast<AccelGroup*>(&g_seen);  // passed through untouched
  ASSERT_EQ(codec()->encode(&host, &a), ACCEL_OK);
  EXPECT_EQ(g_seen.encodes, 1);
  EXPECT_EQ(g_seen.slices, 0);
  EXPECT_EQ(g_seen.group, a.group);

  EXPECT_EQ(codec()->decode(&host, &a), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g_seen.decodes, 1);
  EXPECT_EQ(last_error(), "gather_codec.decode: plugin fp8: codes of a parameter it never encoded");
}

TEST_F(GatherCodecServicesTest, BadArgsAndWideCodesAreRefused) {
  context.gather_codec = {"fp8", nullptr, provider_query_two_bytes, provider_encode, provider_decode_fails};
  std::vector<DLDataType> answer(2, DLDataType{0, 0, 0});
  EXPECT_EQ(query(answer), ACCEL_ERROR_INTERNAL);  // a code must be one byte
  EXPECT_NE(last_error().find("not 1 byte"), std::string::npos) << last_error();

  AccelGatherCodecArgs a = no_slices();
  a.num_slices = 2;  // with NULL arrays
  EXPECT_EQ(codec()->encode(&host, &a), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g_seen.encodes, 0);
  a.num_slices = 0;
  a.struct_size = 8;
  EXPECT_EQ(codec()->encode(&host, &a), ACCEL_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace accel::runtime::testing
