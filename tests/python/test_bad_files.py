"""Files that are not what they claim, refused with one line and a non-zero
exit instead of a hang or a silent wrong answer: a FIFO as --data file or as
a checkpoint's manifest.json (refused without blocking: a FIFO with no
writer would block open() forever, so the subprocess timeout is the
failure), a --metrics-file that is a FIFO or a directory (refused before
training), and a --metrics-file whose writes fail (/dev/full: every write
is ENOSPC), which must end the run instead of losing lines with exit 0."""
import json
import os
import shutil
import subprocess
import unittest

import numpy as np

from accel_testing import TempDirMixin, read_metrics, run_host, write_tokens

COMMON = ["--model", "gpt-tiny", "--batch-size", 4, "--threads", 1, "--log-level", "warn"]
# Generous: the refusal is immediate; only a blocked open() reaches it.
HANG = 60


def error_lines(proc):
    return [l for l in proc.stderr.splitlines() if "[error]" in l]


class FifoInputs(TempDirMixin, unittest.TestCase):
    def run_refused(self, *args):
        try:
            proc = run_host(*COMMON, *args, check=False, timeout=HANG)
        except subprocess.TimeoutExpired:
            self.fail(f"accel-host {args} blocked on a FIFO for {HANG} s")
        self.assertNotEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(error_lines(proc)), 1, proc.stderr)
        return error_lines(proc)[0]

    def test_fifo_as_tokens_file_is_refused_without_blocking(self):
        fifo = self.path("tokens.bin")
        os.mkfifo(fifo)
        line = self.run_refused("--steps", 1, "--data", f"tokens:{fifo}")
        self.assertIn(f"--data: '{fifo}' is a FIFO", line)

    def test_fifo_as_manifest_is_refused_without_blocking(self):
        root = self.path("ckpt")
        run_host(*COMMON, "--steps", 1, "--save", root)
        manifest = os.path.join(root, "step_1", "manifest.json")
        os.remove(manifest)
        os.mkfifo(manifest)
        line = self.run_refused("--steps", 2, "--resume", os.path.join(root, "step_1"))
        self.assertIn("manifest.json: is a FIFO, not a regular file", line)
        # Through the root, too: the only candidate is passed over, by name.
        line = self.run_refused("--steps", 2, "--resume", root)
        self.assertIn("holds no complete checkpoint (step_1: ", line)
        self.assertIn("is a FIFO", line)


class MetricsFile(TempDirMixin, unittest.TestCase):
    def test_fifo_or_directory_is_refused_before_training(self):
        fifo = self.path("metrics.fifo")
        os.mkfifo(fifo)
        for target, kind in ((fifo, "a FIFO"), (self.tmp, "a directory")):
            try:
                proc = run_host(*COMMON, "--steps", 1, "--metrics-file", target, check=False, timeout=HANG)
            except subprocess.TimeoutExpired:
                self.fail(f"--metrics-file {target} blocked for {HANG} s")
            self.assertEqual(proc.returncode, 2, proc.stderr)  # a bad value of an option
            self.assertEqual(error_lines(proc), [l for l in error_lines(proc)
                                                 if f"--metrics-file: cannot open '{target}': it is {kind}" in l],
                             proc.stderr)
            self.assertEqual(len(error_lines(proc)), 1, proc.stderr)
            self.assertNotIn("step ", proc.stderr)

    @unittest.skipUnless(os.path.exists("/dev/full"), "no /dev/full")
    def test_a_failed_write_ends_the_run(self):
        # /dev/full accepts the open and fails every write with ENOSPC: a
        # full disk, deterministically.
        proc = run_host(*COMMON, "--steps", 3, "--metrics-file", "/dev/full", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(len(error_lines(proc)), 1, proc.stderr)
        self.assertIn("--metrics-file: cannot write '/dev/full': No space left on device", error_lines(proc)[0])

    def test_a_working_file_gets_every_line(self):
        metrics = self.path("m.jsonl")
        run_host(*COMMON, "--steps", 3, "--metrics-file", metrics)
        self.assertEqual([m["step"] for m in read_metrics(metrics)], [1, 2, 3])


class LlmcTokenFiles(TempDirMixin, unittest.TestCase):
    """llm.c's .bin (dev/data/data_common.py write_datafile): 256 int32 of
    header, then uint16 (magic 20240520, version 1) or uint32 (magic
    20240801, version 7) tokens. The header is never trained on."""

    def write_llmc(self, path, tokens, magic, version, dtype, count=None):
        header = np.zeros(256, dtype="<i4")
        header[:3] = [magic, version, len(tokens) if count is None else count]
        with open(path, "wb") as f:
            f.write(header.tobytes())
            f.write(np.asarray(tokens, dtype=dtype).tobytes())

    def losses(self, data, vocab):
        metrics = self.path("m.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        run_host(*COMMON, "--vocab-size", vocab, "--steps", 3, "--data-order", "sequential", "--data", data,
                 "--metrics-file", metrics)
        return [m["loss"] for m in read_metrics(metrics)]

    def test_uint16_and_uint32_files_train_on_the_same_tokens_as_a_flat_file(self):
        flat = self.path("flat.bin")
        tokens = write_tokens(flat, 4000, 256, seed=3)
        self.write_llmc(self.path("v1.bin"), tokens, 20240520, 1, "<u2")
        self.write_llmc(self.path("v7.bin"), tokens, 20240801, 7, "<u4")
        expected = self.losses(f"tokens:{flat}", 256)
        self.assertEqual(self.losses(f"tokens:{self.path('v1.bin')}", 256), expected)
        self.assertEqual(self.losses(f"tokens:{self.path('v7.bin')}", 256), expected)


if __name__ == "__main__":
    unittest.main()
