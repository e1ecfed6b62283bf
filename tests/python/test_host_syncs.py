"""Host synchronisations per training step, counted on the CPU: every read
of a tensor's value on the host goes through aten::_local_scalar_dense (what
.item() calls), the trainer's read_to_host (a "host_read" range) or, for a
plugin, the stream_synchronize service (a range on CPU ranks too), all of
which the profiler plugin records with the cpu activity. On a CUDA rank each
one stalls the host until the device has caught up, so a step makes one: its
loss (averaged over the ranks on the device), its skip verdict (a non-finite
loss, fp16's overflow) and its gradient norm come back together after the
optimizer step is queued, the skip having been applied on the device (the
host's optimizer, or a plugin's through found_inf). Only fp16 under a plugin
that steps reads its verdict and the plugin's norm first. A change that adds
a read per micro-batch, per buffer, per unit or per linear fails here on the
CPU, long before a GPU would show it. What it cannot see: a plugin reading a
tensor through the SDK's helpers without stream_synchronize (on a CPU rank
every tensor is host memory)."""
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
        reads = sum(1 for e in events
                    if e.get("name") in ("aten::_local_scalar_dense", "host_read", "stream_synchronize"))
        return reads / steps

    def test_the_hosts_step_reads_once(self):
        # gpt-tiny has four units: a read per gradient buffer would make 5 or more.
        self.assertEqual(self.count(), 1)
        # fp8's amax rows and scales ride the step's read (copied to pinned memory before it); counting
        # saturation is a diagnostic that reads on its own, on by default on CPU ranks only.
        fp8 = ("--mixed-precision", "bf16", "--plugin", "fp8")
        self.assertEqual(self.count(*fp8, "--fp8.count_saturation", "false"), 1)
        self.assertEqual(self.count(*fp8), 2)
        self.assertEqual(self.count("--mixed-precision", "fp16"), 1)  # the overflow verdict stays on the device
        self.assertEqual(self.count("--grad-accum", 2, "--grad-clip", 0.5), 1)  # not one per micro-batch

    def test_a_plugin_that_steps_and_clips_reads_once_too(self):
        self.assertEqual(self.count("--plugin", "fsdp"), 1)
        # fp16's bookkeeping is the host's: the verdict first, then the scaled norm.
        self.assertEqual(self.count("--plugin", "fsdp", "--mixed-precision", "fp16"), 2)


if __name__ == "__main__":
    unittest.main()
