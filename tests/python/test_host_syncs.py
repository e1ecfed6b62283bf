"""Host synchronisations per training step, counted on the CPU: every read of
a tensor's value on the host goes through aten::_local_scalar_dense (what
.item() calls), which the profiler plugin records with the cpu activity. On a
CUDA rank each one stalls the host until the device has caught up, so the
step makes as few as it can: the host's own path reads the loss (its
all-reduce, the stop signal and the non-finite check need it before the
optimizer step) and the gradient norm (once, after the optimizer step is
queued); fp16's loss scaler reads its overflow verdict once; a plugin that
clips reads its norm once. A change that adds a read per buffer, per unit or
per linear fails here on the CPU, long before a GPU would show it."""
import json
import os
import unittest

from accel_testing import TempDirMixin, run_host


class HostSynchronisationsPerStep(TempDirMixin, unittest.TestCase):
    def count(self, *extra):
        trace_dir = self.path("trace" + str(len(os.listdir(self.tmp))))
        run_host("--model", "gpt-tiny", "--steps", 5, "--batch-size", 4, "--log-level", "warn", *extra,
                 "--plugin", "profiler", "--profiler.activities", "cpu", "--profiler.wait", 2,
                 "--profiler.warmup", 1, "--profiler.active", 2, "--profiler.output_trace_dir", trace_dir)
        with open(os.path.join(trace_dir, "profile_0.json")) as f:
            events = json.load(f)["traceEvents"]
        steps = sum(1 for e in events if e.get("name") == "step" and e.get("ph") == "X")
        self.assertEqual(steps, 2)
        reads = sum(1 for e in events if e.get("name") == "aten::_local_scalar_dense")
        return reads / steps

    def test_the_hosts_step_reads_the_loss_and_the_norm_only(self):
        # gpt-tiny has four units: a read per gradient buffer would make 6.
        self.assertEqual(self.count(), 2)
        self.assertEqual(self.count("--mixed-precision", "bf16", "--plugin", "fp8"), 2)
        self.assertEqual(self.count("--mixed-precision", "fp16"), 3)  # and the overflow verdict

    def test_a_plugin_that_clips_reads_its_norm_once(self):
        self.assertEqual(self.count("--plugin", "fsdp"), 3)


if __name__ == "__main__":
    unittest.main()
