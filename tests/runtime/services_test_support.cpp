// The shared fixture of the services tests (see services_test_support.h).
#include "tests/runtime/services_test_support.h"

#include "host/comm/cuda_backend.h"
#include "host/runtime/tensor_views.h"

namespace accel::runtime::testing {

// Torch caches its CUDA hooks at the first question about CUDA, which the
// fixture's model asks: the GPU cases of this binary need LibTorch's CUDA
// library loaded before any test runs (host/comm/cuda_backend.h). On a GPU
// machine a run without this skipped every CudaPaths case.
[[maybe_unused]] const bool cuda_backend_loaded = comm::load_cuda_backend();

View::View(const at::Tensor& tensor) : tensor_(tensor) {
  shape_.assign(tensor.sizes().begin(), tensor.sizes().end());
  strides_.assign(tensor.strides().begin(), tensor.strides().end());
  dl_.data = tensor.data_ptr();
  dl_.device = tensor.is_cuda() ? DLDevice{kDLCUDA, static_cast<int32_t>(tensor.device().index())} : DLDevice{kDLCPU, 0};
  dl_.ndim = static_cast<int32_t>(shape_.size());
  dl_.dtype = to_dl_dtype(tensor.scalar_type());
  dl_.shape = shape_.data();
  dl_.strides = strides_.data();
  dl_.byte_offset = 0;
}

ServicesTest::ServicesTest()
    : model(std::make_unique<model::GptModel>(model::GptConfig{2, 2, 16, 8, 32})),
      services(host_services()) {
  model->initialise(1234);
  context.model = model.get();
  host.context = &context;
  host.plugin_name = "tester";
  other_host.context = &context;
  other_host.plugin_name = "other";
  take_pending_error();  // each test starts with a clean thread
}

ServicesTest::~ServicesTest() { take_pending_error(); }

}  // namespace accel::runtime::testing
