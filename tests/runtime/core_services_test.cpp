// The core of the services table: its shape, identity, the error rule of
// accel/status.h (last_error, set_error context, the pending error the
// registry takes), logging, and info-only handles.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

using CoreServicesTest = ServicesTest;

TEST_F(CoreServicesTest, TableHasTheCoreAndTheAreasThisHostOffers) {
  ASSERT_EQ(services->struct_size, sizeof(AccelHostServices));
  EXPECT_NE(services->set_error, nullptr);
  EXPECT_NE(services->last_error, nullptr);
  EXPECT_NE(services->log, nullptr);
  EXPECT_NE(services->log_enabled, nullptr);
  EXPECT_NE(services->get_identity, nullptr);
  EXPECT_NE(services->options, nullptr);
  EXPECT_NE(services->memory, nullptr);
  EXPECT_NE(services->kernels, nullptr);
  EXPECT_NE(services->model, nullptr);
  EXPECT_NE(services->trace, nullptr);
  EXPECT_NE(services->checkpoint, nullptr);
  ASSERT_NE(services->comm, nullptr);
  EXPECT_TRUE(ACCEL_HAS_FN(services->comm, AccelCommServices, all_reduce));
  EXPECT_TRUE(ACCEL_HAS_FN(services->comm, AccelCommServices, work_free));
  // Since 1.7: the pipeline's unit ranges (host/runtime/README.md).
  EXPECT_TRUE(ACCEL_HAS_FN(services->model, AccelModelServices, run_forward));
  EXPECT_TRUE(ACCEL_HAS_FN(services->model, AccelModelServices, run_backward));
  EXPECT_TRUE(ACCEL_HAS_FN(services->kernels, AccelKernelServices, fp8_scale_update));
  EXPECT_TRUE(ACCEL_HAS_FN(services->memory, AccelMemoryServices, event_elapsed));
  EXPECT_TRUE(ACCEL_HAS_FN(services->checkpoint, AccelCheckpointServices, get_string));
  EXPECT_EQ(host_services(), services);  // one static table
}

TEST_F(CoreServicesTest, IdentityIsTheContextsAndValidUntilTeardown) {
  context.identity.rank = 3;
  context.identity.world_size = 8;
  const AccelIdentity* identity = nullptr;
  ASSERT_EQ(services->get_identity(&host, &identity), ACCEL_OK);
  ASSERT_NE(identity, nullptr);
  EXPECT_EQ(identity->struct_size, sizeof(AccelIdentity));
  EXPECT_EQ(identity->rank, 3);
  EXPECT_EQ(identity->world_size, 8);
  EXPECT_EQ(identity->device.device_type, kDLCPU);
  EXPECT_EQ(identity, &context.identity);
}

TEST_F(CoreServicesTest, LastErrorIsEmptyUntilAServiceFailsThenNamesIt) {
  EXPECT_STREQ(services->last_error(&host), "");
  int64_t value = 0;
  EXPECT_EQ(services->options->get_int(&host, "nope", &value), ACCEL_ERROR_NOT_FOUND);
  const std::string message = last_error();
  EXPECT_NE(message.find("get_int"), std::string::npos) << message;
  EXPECT_NE(message.find("tester.nope"), std::string::npos) << message;
  // The failure is pending: a plugin may propagate it without set_error.
  const PendingError pending = take_pending_error();
  EXPECT_EQ(pending.status, ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(pending.message, message);
  EXPECT_STREQ(services->last_error(&host), "");  // taken
}

TEST_F(CoreServicesTest, SuccessfulCallsKeepThePendingFailure) {
  // A plugin frees its buffers between a failure and its return.
  const AccelIdentity* identity = nullptr;
  int64_t value = 0;
  ASSERT_EQ(services->options->get_int(&host, "nope", &value), ACCEL_ERROR_NOT_FOUND);
  ASSERT_EQ(services->get_identity(&host, &identity), ACCEL_OK);
  EXPECT_EQ(take_pending_error().status, ACCEL_ERROR_NOT_FOUND);
}

TEST_F(CoreServicesTest, SetErrorCopiesTheMessageAndPrependsContext) {
  int64_t value = 0;
  ASSERT_NE(services->options->get_int(&host, "nope", &value), ACCEL_OK);
  {
    std::string stack_buffer = "reading my options";
    services->set_error(&host, ACCEL_ERROR_INVALID_ARGUMENT, stack_buffer.c_str());
    stack_buffer.assign(stack_buffer.size(), 'x');  // the host copied it
  }
  const PendingError pending = take_pending_error();
  EXPECT_EQ(pending.status, ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(pending.message.rfind("reading my options: get_int: ", 0), 0u) << pending.message;
}

TEST_F(CoreServicesTest, SetErrorWithoutMessageOrWithOkIsHarmless) {
  services->set_error(&host, ACCEL_OK, "ignored");
  EXPECT_EQ(take_pending_error().status, ACCEL_OK);
  services->set_error(&host, ACCEL_ERROR_INTERNAL, nullptr);
  const PendingError pending = take_pending_error();
  EXPECT_EQ(pending.status, ACCEL_ERROR_INTERNAL);
  EXPECT_EQ(pending.message, "");
}

TEST_F(CoreServicesTest, ErrorsArePerThread) {
  services->set_error(&host, ACCEL_ERROR_INTERNAL, "main thread");
  std::string seen_elsewhere = "unset";
  std::thread([&] {
    seen_elsewhere = services->last_error(&host);
    EXPECT_EQ(take_pending_error().status, ACCEL_OK);
  }).join();
  EXPECT_EQ(seen_elsewhere, "");
  EXPECT_EQ(take_pending_error().message, "main thread");
}

TEST_F(CoreServicesTest, SetPendingErrorIsWhatLastErrorReturns) {
  set_pending_error(ACCEL_ERROR_ABORTED, "fp8: linear_forward: cast: boom");
  EXPECT_STREQ(services->last_error(&host), "fp8: linear_forward: cast: boom");
  EXPECT_EQ(take_pending_error().status, ACCEL_ERROR_ABORTED);
}

TEST_F(CoreServicesTest, LoggingNeverFails) {
  services->log(&host, ACCEL_LOG_INFO, "hello from a plugin");
  services->log(&host, ACCEL_LOG_DEBUG, nullptr);
  services->log(nullptr, static_cast<AccelLogLevel>(99), "odd level");
  EXPECT_TRUE(services->log_enabled(&host, ACCEL_LOG_ERROR));
  EXPECT_EQ(take_pending_error().status, ACCEL_OK);
}

TEST_F(CoreServicesTest, InfoOnlyHandleHasTheCoreOnly) {
  AccelHost info_only;
  info_only.plugin_name = "lister";
  const AccelIdentity* identity = nullptr;
  ASSERT_EQ(services->get_identity(&info_only, &identity), ACCEL_OK);
  EXPECT_EQ(identity->rank, 0);
  EXPECT_EQ(identity->world_size, 1);
  bool value = false;
  EXPECT_EQ(services->options->get_bool(&info_only, "x", &value), ACCEL_ERROR_FAILED_PRECONDITION);
  EXPECT_NE(last_error().find("info-only"), std::string::npos) << last_error();
}

TEST_F(CoreServicesTest, NullArgumentsFailCleanly) {
  EXPECT_EQ(services->get_identity(&host, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  const AccelIdentity* identity = nullptr;
  EXPECT_EQ(services->get_identity(nullptr, &identity), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("NULL"), std::string::npos) << last_error();
}

}  // namespace
}  // namespace accel::runtime::testing
