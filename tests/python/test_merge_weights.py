"""accel-host merge-weights (accelerate's merge_fsdp_weights): a checkpoint
from a real run merged into one model.safetensors that the `safetensors`
package opens with the checkpoint's exact tensors, names sorted; the
--no-safe-serialization file opens with torch.load(weights_only=True); a save
root merges its newest complete step; --remove-checkpoint-dir deletes the
checkpoint only after writing; a damaged checkpoint or bad arguments give one
clear line and a non-zero exit, and write nothing."""
import json
import os
import struct
import unittest

import torch
from safetensors.torch import load_file

from accel_testing import MPIRUN, TempDirMixin, mpirun, run_host

PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
RUN = ["--model", "gpt-tiny", "--batch-size", 4, "--log-level", "warn", "--threads", 1]


def header_names(path):
    """Tensor names in the order the file's header lists them."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        pairs = json.loads(f.read(n), object_pairs_hook=list)
    return [name for name, _ in pairs if name != "__metadata__"]


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.strip()]


class MergeWeights(TempDirMixin, unittest.TestCase):
    def train(self, root, *extra, steps=2):
        run_host(*RUN, "--steps", steps, "--save", root, *extra)
        return os.path.join(root, f"step_{steps}")

    def assert_same_tensors(self, merged, checkpoint_dir):
        saved = load_file(os.path.join(checkpoint_dir, "model.safetensors"))
        self.assertEqual(sorted(merged), sorted(saved))
        for name, tensor in saved.items():
            self.assertEqual(merged[name].dtype, torch.float32, name)
            self.assertTrue(torch.equal(merged[name], tensor), name)

    def test_safetensors_output_holds_the_checkpoints_tensors_sorted(self):
        step = self.train(self.path("ckpt"))
        out = self.path("merged")
        run_host("merge-weights", step, out)
        self.assertEqual(os.listdir(out), ["model.safetensors"])  # no temporary left behind
        merged_path = os.path.join(out, "model.safetensors")
        self.assert_same_tensors(load_file(merged_path), step)
        names = header_names(merged_path)
        self.assertEqual(names, sorted(names))
        self.assertIn("wte.weight", names)
        self.assertTrue(os.path.isdir(step))  # kept without --remove-checkpoint-dir

    def test_a_save_root_merges_its_newest_complete_step(self):
        root = self.path("root")
        run_host(*RUN, "--steps", 3, "--save", root, "--save-every", 1)
        # The newest step is damaged: the merge falls back to step_2.
        with open(os.path.join(root, "step_3", "model.safetensors"), "r+b") as f:
            f.truncate(64)
        run_host("merge-weights", root, self.path("merged"))
        self.assert_same_tensors(load_file(self.path("merged/model.safetensors")), os.path.join(root, "step_2"))

    def test_no_safe_serialization_writes_a_torch_load_dict(self):
        step = self.train(self.path("ckpt"))
        out = self.path("merged")
        run_host("merge-weights", step, out, "--no-safe-serialization")
        self.assertEqual(os.listdir(out), ["pytorch_model.bin"])
        merged = torch.load(os.path.join(out, "pytorch_model.bin"), weights_only=True)
        self.assertIsInstance(merged, dict)
        self.assertEqual(list(merged), sorted(merged))
        self.assert_same_tensors(merged, step)

    def test_remove_checkpoint_dir_after_writing(self):
        root = self.path("ckpt")
        step = self.train(root)
        expected = load_file(os.path.join(step, "model.safetensors"))
        run_host("merge-weights", step, self.path("merged"), "--remove-checkpoint-dir")
        self.assertFalse(os.path.exists(step))
        self.assertTrue(os.path.isdir(root))
        merged = load_file(self.path("merged/model.safetensors"))
        self.assertTrue(all(torch.equal(merged[k], v) for k, v in expected.items()))

    def test_a_missing_or_damaged_shard_file_is_one_clear_error(self):
        step = self.train(self.path("ckpt"))
        os.remove(os.path.join(step, "model.safetensors"))
        proc = run_host("merge-weights", step, self.path("merged"), "--remove-checkpoint-dir", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        lines = error_lines(proc)
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("is damaged", lines[0])
        self.assertIn("model.safetensors", lines[0])
        self.assertFalse(os.path.exists(self.path("merged/model.safetensors")))
        self.assertTrue(os.path.isdir(step))  # a failed merge removes nothing

        # A root whose only checkpoint is damaged holds nothing to merge.
        proc = run_host("merge-weights", self.path("ckpt"), self.path("merged"), check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(len(error_lines(proc)), 1, proc.stderr)
        self.assertIn("holds a complete one", proc.stderr)

    def test_usage(self):
        proc = run_host("merge-weights", "--help")
        self.assertIn("usage: accel-host merge-weights CHECKPOINT_DIR OUTPUT_PATH", proc.stdout)
        self.assertIn("--no-safe-serialization", proc.stdout)
        for args, mentions in ((["only-one"], "expected CHECKPOINT_DIR and OUTPUT_PATH"),
                               (["a", "b", "--bogus"], "unknown option '--bogus'"),
                               ([self.path("c"), self.path("c/out"), "--remove-checkpoint-dir"], "inside CHECKPOINT_DIR")):
            proc = run_host("merge-weights", *args, check=False)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            lines = error_lines(proc)
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn(mentions, lines[0])
        proc = run_host("merge-weights", self.path("nowhere"), self.path("out"), check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("is not a directory", proc.stderr)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_a_checkpoint_written_by_two_ranks(self):
        root = self.path("ckpt")
        args = [*RUN, "--steps", 2, "--save", root, "--plugin-path", os.path.join(PLUGINS, "good"), "--plugin",
                "recorder", "--recorder.log_file", self.path("hooks.log")]
        mpirun(2, *args, timeout=120)
        step = os.path.join(root, "step_2")
        # Each rank wrote its own plugin-state file into the one checkpoint.
        self.assertIn("plugin_state.safetensors", os.listdir(step))
        self.assertIn("plugin_state.rank1.safetensors", os.listdir(step))
        with open(os.path.join(step, "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["world_size"], 2)
        run_host("merge-weights", step, self.path("merged"))
        self.assert_same_tensors(load_file(self.path("merged/model.safetensors")), step)


if __name__ == "__main__":
    unittest.main()
