"""Bad input: each case exits non-zero with one clear error line naming the
problem, never a crash (signal) or a traceback, and harms nothing on disk."""
import os
import unittest

from accel_testing import TempDirMixin, run_host


class BadInput(TempDirMixin, unittest.TestCase):
    def expect_error(self, *args, mentions, code=None):
        proc = run_host(*args, "--log-level", "warn", check=False) if args and args[0].startswith("--") and \
            not any(a in ("--help", "--version") for a in map(str, args)) else run_host(*args, check=False)
        self.assertGreater(proc.returncode, 0, f"exit {proc.returncode} (a signal is negative)\n{proc.stderr}")
        if code is not None:
            self.assertEqual(proc.returncode, code)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, f"expected one line, got:\n{proc.stderr}")
        for word in mentions:
            self.assertIn(word, lines[0])
        return lines[0]

    def test_unknown_option(self):
        self.expect_error("--no-such-flag", mentions=["no-such-flag"], code=2)

    def test_bad_values(self):
        self.expect_error("--steps", "ten", mentions=["steps"], code=2)
        self.expect_error("--lr", "0", mentions=["--lr"], code=2)
        self.expect_error("--mixed-precision", "fp64", mentions=["fp64"], code=2)
        self.expect_error("--batch-size", 7, "--grad-accum", 2, mentions=["--batch-size 7"], code=2)
        self.expect_error("--model", "gpt-huge", mentions=["gpt-huge"])
        self.expect_error("--n-embd", 30, "--n-head", 4, mentions=["--n-embd"])

    def test_device_choice(self):
        self.expect_error("--device", "tpu", mentions=["--device", "auto, cpu, cuda"], code=2)
        import torch
        if not torch.cuda.is_available():
            self.expect_error("--device", "cuda", mentions=["--device cuda: no CUDA device"])
        run_host("--device", "cpu", "--steps", 1)  # explicit CPU works everywhere

    def test_missing_or_bad_data_file(self):
        self.expect_error("--data", "tokens:" + self.path("missing.bin"), mentions=["missing.bin", "cannot open"])
        with open(self.path("odd.bin"), "wb") as f:
            f.write(b"\x01\x02\x03")
        self.expect_error("--data", "tokens:" + self.path("odd.bin"), mentions=["odd.bin"])

    def test_corrupt_checkpoint(self):
        root = self.path("ckpt")
        run_host("--steps", 2, "--save", root, "--log-level", "warn")
        model = os.path.join(root, "step_2", "model.safetensors")
        with open(model, "r+b") as f:
            f.truncate(os.path.getsize(model) // 2)
        self.expect_error("--steps", 4, "--resume", os.path.join(root, "step_2"), mentions=["step_2"])
        # A root whose only checkpoint is damaged holds no complete checkpoint.
        self.expect_error("--steps", 4, "--resume", root, mentions=["no complete checkpoint"])
        self.assertTrue(os.path.exists(model))  # nothing deleted

    def test_malformed_header_with_a_valid_manifest_is_caught_by_the_reader(self):
        root = self.path("ckpt")
        run_host("--steps", 1, "--save", root, "--log-level", "warn")
        step = os.path.join(root, "step_1")
        os.remove(os.path.join(step, "manifest.json"))
        with open(os.path.join(step, "model.safetensors"), "r+b") as f:
            f.write(b"\xff" * 8)  # header length beyond the file
        # Without a manifest the directory is treated as a root holding nothing.
        self.expect_error("--steps", 2, "--resume", step, mentions=["no complete checkpoint"])

    def test_checkpoint_of_another_model_shape(self):
        root = self.path("ckpt")
        run_host("--steps", 1, "--save", root, "--log-level", "warn")
        self.expect_error("--steps", 2, "--n-layer", 3, "--resume", root, mentions=["n_layer=2", "n_layer=3"])

    def test_metrics_file_in_missing_directory(self):
        self.expect_error("--steps", 1, "--metrics-file", self.path("no/such/dir/m.jsonl"), mentions=["metrics"])

    def test_help_and_version_succeed(self):
        self.assertIn("--batch-size", run_host("--help").stdout)
        self.assertIn("accel-host", run_host("--version").stdout)


if __name__ == "__main__":
    unittest.main()
