"""A step skipped for a non-finite loss changes nothing. The skip verdict is
decided on the device and never read before the optimizer step is queued
(host/train/step_values.h): the host's AdamW takes it (the fused kernel's
found_inf on CUDA), and a plugin that steps the optimizer receives it as
AccelOptimizerStepArgs.found_inf and hands it to the kernels. The drift test
plugin makes one rank's logits NaN in one step's forward; the checkpoint
after that step must equal the one before it byte for byte (weights,
moments), AdamW's step count must stay, and training goes on after it."""
import json
import os
import struct
import unittest

from accel_testing import TempDirMixin, mpirun, read_metrics, run_host

PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))


def tensors(path):
    """{name: raw bytes} of a safetensors file, whatever the dtypes."""
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    body = data[8 + length:]
    return {name: body[t["data_offsets"][0]:t["data_offsets"][1]] for name, t in header.items()}


class ASkippedStepChangesNothing(TempDirMixin, unittest.TestCase):
    def args(self, name, rank):
        self.save = self.path(name)
        self.metrics = self.path(name + ".jsonl")
        # The third step (two optimizer steps done) gets a NaN loss; one skip is allowed.
        return ["--model", "gpt-tiny", "--device", "cpu", "--steps", 4, "--batch-size", 4, "--log-level", "warn",
                "--save", self.save, "--save-every", 1, "--metrics-file", self.metrics, "--nonfinite-loss-skips", 1,
                "--plugin-path", os.path.join(PLUGINS, "drift"), "--plugin", "drift", "--drift.action", "nan_loss",
                "--drift.rank", rank, "--drift.at_step", 2]

    def check(self):
        rows = read_metrics(self.metrics)
        self.assertEqual([r.get("skipped", False) for r in rows], [False, False, True, False])
        self.assertIsNone(rows[2]["loss"])  # NaN is written as null
        self.assertLess(rows[3]["loss"], 10.0)
        before, after = os.path.join(self.save, "step_2"), os.path.join(self.save, "step_3")
        names = sorted(f for f in os.listdir(before) if f.endswith(".safetensors"))
        self.assertEqual(names, sorted(f for f in os.listdir(after) if f.endswith(".safetensors")))
        compared = 0
        for name in names:
            # Every weight and moment; fp8's amax history records every step, a skipped one too.
            a, b = tensors(os.path.join(before, name)), tensors(os.path.join(after, name))
            self.assertEqual(sorted(a), sorted(b))
            kept = [k for k in a if not k.startswith("fp8/")]
            self.assertEqual([k for k in kept if a[k] != b[k]], [], name)
            compared += len(kept)
        self.assertGreater(compared, 20)  # the model's tensors and their moments
        steps = []
        for d in (before, after, os.path.join(self.save, "step_4")):
            with open(os.path.join(d, "trainer_state.json")) as f:
                steps.append(json.load(f)["optimizer_steps"])
        self.assertEqual(steps, [2, 2, 3])

    def test_the_hosts_optimizer(self):
        run_host(*self.args("host", 0))
        self.check()

    def test_a_plugin_that_steps_the_optimizer_through_found_inf(self):
        # fsdp's sharded AdamW on 2 ranks; the NaN is rank 1's alone, the average makes it every rank's.
        mpirun(2, *self.args("fsdp", 1), "--plugin", "fsdp", "--fsdp.state_dict_type", "SHARDED_STATE_DICT")
        self.check()

    def test_scaled_moments_keep_their_scales(self):
        # MS-AMP O2: E4M3 and fp16 moments with scales chosen on the host; a skipped step chooses none.
        mpirun(2, *self.args("msamp", 0), "--plugin", "fsdp", "--fsdp.state_dict_type", "SHARDED_STATE_DICT",
               "--plugin", "fp8", "--fp8.backend", "msamp", "--fp8.opt_level", "O2")
        self.check()


if __name__ == "__main__":
    unittest.main()
