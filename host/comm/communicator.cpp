// Request validation shared by every backend (see communicator.h). Messages
// name the offending quantity and what it should be, so a plugin author can
// fix the call from the log line alone.
#include "host/comm/communicator.h"

#include <cstdint>

#include "host/util/strformat.h"

namespace accel::comm::validate {
namespace {

Status invalid(std::string message) { return Status::error(ErrorCode::invalid_argument, std::move(message)); }

}  // namespace

Status buffer(const char* role, const Buffer& b) {
  if (!dtype_valid(b.dtype))
    return invalid(strformat("%s has an invalid dtype (%d)", role, static_cast<int>(b.dtype)));
  if (b.count < 0)
    return invalid(
        strformat("%s has a negative element count (%lld)", role, static_cast<long long>(b.count)));
  if (b.count > 0 && b.data == nullptr) {
    return invalid(strformat("%s is NULL but has %lld elements", role, static_cast<long long>(b.count)));
  }
  if (b.on_cuda && b.device < 0) return invalid(strformat("%s is on CUDA device %d", role, b.device));
  return Status{};
}

Status reduction(ReduceOp op, DType dtype) {
  if (!reduce_op_valid(op)) return invalid(strformat("invalid reduce op (%d)", static_cast<int>(op)));
  if (op == ReduceOp::avg && dtype_is_integer(dtype)) {
    return Status::error(ErrorCode::unsupported,
                         strformat("avg of integer dtype %s is not supported (integer division would "
                                   "truncate; reduce with sum and divide in a float type)",
                                   dtype_name(dtype)));
  }
  return Status{};
}

Status same_kind(const Buffer& a, const Buffer& b) {
  if (a.dtype != b.dtype) {
    return invalid(
        strformat("input dtype %s differs from output dtype %s", dtype_name(a.dtype), dtype_name(b.dtype)));
  }
  if (a.on_cuda != b.on_cuda || (a.on_cuda && a.device != b.device)) {
    return invalid("input and output are on different devices");
  }
  return Status{};
}

Status all_reduce(const Buffer& input, const Buffer& output, ReduceOp op) {
  Status problem = buffer("input", input);
  if (problem.ok()) problem = buffer("output", output);
  if (problem.ok()) problem = same_kind(input, output);
  if (problem.ok()) problem = reduction(op, input.dtype);
  if (problem.ok() && input.count != output.count) {
    problem = invalid(strformat("output has %lld elements, input %lld (they must be equal)",
                                static_cast<long long>(output.count), static_cast<long long>(input.count)));
  }
  return problem;
}

Status all_gather(const Buffer& input, const Buffer& output, int size) {
  Status problem = buffer("input", input);
  if (problem.ok()) problem = buffer("output", output);
  if (problem.ok()) problem = same_kind(input, output);
  if (problem.ok() && output.count != input.count * size) {
    problem =
        invalid(strformat("output has %lld elements; all_gather needs group size (%d) x input (%lld) = %lld",
                          static_cast<long long>(output.count), size, static_cast<long long>(input.count),
                          static_cast<long long>(input.count * size)));
  }
  return problem;
}

bool reduce_scatter_in_place(const Buffer& input, const Buffer& output, int rank) {
  return output.count > 0 &&
         output.data == static_cast<const char*>(input.data) + static_cast<size_t>(rank) * output.bytes();
}

Status reduce_scatter(const Buffer& input, const Buffer& output, ReduceOp op, int rank, int size) {
  Status problem = buffer("input", input);
  if (problem.ok()) problem = buffer("output", output);
  if (problem.ok()) problem = same_kind(input, output);
  if (problem.ok()) problem = reduction(op, input.dtype);
  if (problem.ok() && input.count != output.count * size) {
    problem = invalid(
        strformat("input has %lld elements; reduce_scatter needs group size (%d) x output (%lld) = %lld "
                  "(pad the input to a multiple of the group size)",
                  static_cast<long long>(input.count), size, static_cast<long long>(output.count),
                  static_cast<long long>(output.count * size)));
  }
  // In place is the output at this rank's own chunk, nowhere else: a ring
  // (or NCCL) reads the other chunks while this rank's result is written.
  if (problem.ok() && output.count > 0 && !reduce_scatter_in_place(input, output, rank)) {
    const auto in = reinterpret_cast<uintptr_t>(input.data);
    const auto out = reinterpret_cast<uintptr_t>(output.data);
    if (out < in + input.bytes() && in < out + output.bytes()) {
      problem = invalid(strformat("output overlaps the input at byte %lld, not at this rank's chunk (byte %lld); "
                                  "in place, the output is exactly chunk %d of the input",
                                  static_cast<long long>(out) - static_cast<long long>(in),
                                  static_cast<long long>(static_cast<size_t>(rank) * output.bytes()), rank));
    }
  }
  return problem;
}

Status all_to_all(const Buffer& input, const Buffer& output, int size) {
  Status problem = buffer("input", input);
  if (problem.ok()) problem = buffer("output", output);
  if (problem.ok()) problem = same_kind(input, output);
  if (problem.ok() && input.count != output.count) {
    problem = invalid(strformat("output has %lld elements, input %lld (they must be equal)",
                                static_cast<long long>(output.count), static_cast<long long>(input.count)));
  }
  if (problem.ok() && input.count % size != 0) {
    problem = invalid(strformat("%lld elements do not split into group size (%d) equal chunks",
                                static_cast<long long>(input.count), size));
  }
  return problem;
}

Status all_to_all_v(const Buffer& input, std::span<const int64_t> send_counts, const Buffer& output,
                    std::span<const int64_t> recv_counts, int size) {
  Status problem = buffer("input", input);
  if (problem.ok()) problem = buffer("output", output);
  if (problem.ok()) problem = same_kind(input, output);
  const auto counts = [&](const char* role, std::span<const int64_t> c, int64_t elements) {
    if (static_cast<int64_t>(c.size()) != size) {
      return invalid(strformat("%s has %zu counts, the group %d ranks", role, c.size(), size));
    }
    int64_t sum = 0;
    for (size_t j = 0; j < c.size(); ++j) {
      if (c[j] < 0) return invalid(strformat("%s[%zu] is %lld (counts are >= 0)", role, j, static_cast<long long>(c[j])));
      sum += c[j];
    }
    if (sum != elements) {
      return invalid(strformat("%s add up to %lld elements, the buffer holds %lld", role, static_cast<long long>(sum),
                               static_cast<long long>(elements)));
    }
    return Status{};
  };
  if (problem.ok()) problem = counts("send_counts", send_counts, input.count);
  if (problem.ok()) problem = counts("recv_counts", recv_counts, output.count);
  if (problem.ok() && input.count > 0 && output.count > 0) {
    const auto in = reinterpret_cast<uintptr_t>(input.data);
    const auto out = reinterpret_cast<uintptr_t>(output.data);
    if (out < in + input.bytes() && in < out + output.bytes()) problem = invalid("output overlaps the input");
  }
  return problem;
}

Status rank_in_group(const char* role, int rank, int size) {
  if (rank < 0 || rank >= size)
    return invalid(strformat("%s %d is not a rank of this group (size %d)", role, rank, size));
  return Status{};
}

}  // namespace accel::comm::validate
