// Shared fixture of the services tests: a HostContext with a small GptModel
// and AccelHost handles for two plugins, and helpers that make DLTensor views
// the way a plugin would (pointer, shape, strides). Every test reaches the
// host only through host_services(), as a plugin does.
#pragma once

#include <ATen/ATen.h>
#include <accel/accel.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "host/model/gpt.h"
#include "host/runtime/host_context.h"

namespace accel::runtime::testing {

// A plugin-made DLTensor view of an at::Tensor (which must outlive it).
class View {
 public:
  explicit View(const at::Tensor& tensor);
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  DLTensor* get() { return &dl_; }
  operator const DLTensor*() const { return &dl_; }

 private:
  at::Tensor tensor_;
  std::vector<int64_t> shape_, strides_;
  DLTensor dl_{};
};

class ServicesTest : public ::testing::Test {
 protected:
  ServicesTest();
  ~ServicesTest() override;

  // The message of the last failed service call on this thread.
  std::string last_error() { return services->last_error(&host); }

  HostContext context;
  std::unique_ptr<model::GptModel> model;
  AccelHost host;        // plugin "tester"
  AccelHost other_host;  // plugin "other"
  const AccelHostServices* services;
};

}  // namespace accel::runtime::testing
