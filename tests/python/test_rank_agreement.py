"""Ranks that must agree: ranks started with different settings stop before
the first collective with one line naming the first differing setting and
the ranks (every rank exits 2 by itself, none killed by a signal); a NaN
loss stops every rank together; ddp's weight checksum is enforced; fsdp
follows --mixed-precision bf16 as accelerate does."""
import os
import shutil
import subprocess
import time
import unittest

import numpy as np

from accel_testing import ACCEL_HOST, MPIRUN, MPI_ENV, TempDirMixin, error_lines, mpirun, read_metrics, write_tokens

BASE = ["--model", "gpt-tiny", "--log-level", "warn", "--threads", 1]
MPMD_COMMON = [*BASE, "--steps", 2]
COMMON = [*MPMD_COMMON, "--batch-size", 8]
TEST_PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS",
                              os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))



@unittest.skipUnless(MPIRUN, "mpirun not found")
class DifferentSettings(TempDirMixin, unittest.TestCase):
    def mpmd(self, first, second):
        """Two ranks, each under a shell that records its own exit status:
        returns (mpirun's result, {rank: status})."""
        codes = {}
        argv = [MPIRUN]
        for rank, extra in enumerate((first, second)):
            status = self.path(f"status{rank}")
            batch = [] if "--batch-size" in extra else ["--batch-size", 8]
            args = [ACCEL_HOST, *map(str, MPMD_COMMON), *map(str, batch), *map(str, extra)]
            command = " ".join(f"'{a}'" for a in args)
            argv += ["-n", "1", "sh", "-c", f"{command}; echo $? > {status}"]
            if rank == 0:
                argv.append(":")
        # mpirun must not kill a rank once another exited non-zero: each
        # rank's own status is what is checked.
        env = dict(MPI_ENV, OMPI_MCA_orte_abort_on_non_zero_status="0")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
        for rank in (0, 1):
            with open(self.path(f"status{rank}")) as f:
                codes[rank] = int(f.read())
        return proc, codes

    def expect_refused(self, first, second, mentions):
        proc, codes = self.mpmd(first, second)
        # Exit 2 on every rank, from the rank itself: a signal shows as >= 128.
        self.assertEqual(codes, {0: 2, 1: 2}, proc.stderr)
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        for word in mentions:
            self.assertIn(word, lines[0])
        self.assertNotIn("MPI_ABORT", proc.stderr)
        return lines[0]

    def test_model_shapes_mpmd(self):
        line = self.expect_refused(["--n-embd", 64], ["--n-embd", 128],
                                   ["--n-embd", "'64' on rank 0", "'128' on rank 1"])
        self.assertIn("different settings", line)
        self.expect_refused(["--vocab-size", 256], ["--vocab-size", 300], ["--vocab-size"])
        self.expect_refused(["--seq-len", 64], ["--seq-len", 32], ["--seq-len"])
        self.expect_refused(["--n-layer", 2], ["--n-layer", 3], ["--n-layer"])

    def test_training_settings(self):
        cases = [
            (["--batch-size", 8], ["--batch-size", 16], "--batch-size"),
            (["--grad-accum", 1], ["--grad-accum", 2], "--grad-accum"),
            (["--lr", 1e-3], ["--lr", 2e-3], "--lr"),
            (["--seed", 1], ["--seed", 2], "--seed"),
            (["--mixed-precision", "no"], ["--mixed-precision", "bf16"], "--mixed-precision"),
            (["--data-order", "shuffled"], ["--data-order", "sequential"], "--data-order"),
            (["--init_process_group.timeout", 100], ["--init_process_group.timeout", 200],
             "--init_process_group.timeout"),
            ([], ["--ddp.bucket_cap_mb", 1], "--ddp.bucket_cap_mb"),
            # Ranks that disagree would run different rings and never meet.
            ([], ["--comm-hierarchical-all-reduce", "false"], "--comm-hierarchical-all-reduce"),
        ]
        for first, second, key in cases:
            with self.subTest(setting=key):
                line = self.expect_refused(first, second, [key, "rank 0", "rank 1"])
                # The first differing setting is the one named.
                self.assertTrue(line.split(": ", 1)[1].startswith(key + " is"), line)

    def test_a_plugin_file_with_other_bytes(self):
        # Two nodes with the same plugin name and version but different
        # builds of it: stopped before the first collective, naming it.
        dirs = []
        for rank in (0, 1):
            d = self.path(f"plugins{rank}")
            os.mkdir(d)
            shutil.copy(os.path.join(TEST_PLUGINS, "drift", "libaccel_drift.so"), d)
            dirs.append(d)
        with open(os.path.join(dirs[1], "libaccel_drift.so"), "ab") as f:
            f.write(b"another build")
        line = self.expect_refused(["--plugin-path", dirs[0], "--plugin", "drift"],
                                   ["--plugin-path", dirs[1], "--plugin", "drift"], ["rank 0", "rank 1"])
        self.assertTrue(line.split(": ", 1)[1].startswith("--plugin drift (file) is"), line)

    def test_data_content_not_path(self):
        a, b, c = self.path("a.bin"), self.path("b.bin"), self.path("c.bin")
        write_tokens(a, 20000, 256, seed=1)
        write_tokens(c, 20000, 256, seed=2)
        with open(a, "rb") as src, open(b, "wb") as dst:
            dst.write(src.read())
        self.expect_refused(["--data", "tokens:" + a], ["--data", "tokens:" + c], ["--data (content)"])
        # The same bytes under another path agree, and per-rank settings may differ.
        proc, codes = self.mpmd(["--data", "tokens:" + a, "--metrics-file", self.path("m.jsonl")],
                                ["--data", "tokens:" + b, "--log-every", 3, "--plugin-path", self.tmp])
        self.assertEqual(codes, {0: 0, 1: 0}, proc.stderr)
        self.assertEqual(len(read_metrics(self.path("m.jsonl"))), 2)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class NonFiniteLoss(TempDirMixin, unittest.TestCase):
    def test_every_rank_stops_together(self):
        metrics = self.path("m.jsonl")
        proc = mpirun(2, *BASE, "--batch-size", 8, "--steps", 6, "--lr", 1e30, "--grad-clip", 0, "--lr-schedule", "constant",
                      "--metrics-file", metrics, check=False, timeout=180)
        self.assertEqual(proc.returncode, 3, proc.stderr)  # diverged: resuming would repeat it
        lines = error_lines(proc.stderr)
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("step 2: the loss averaged over every rank is", lines[0])
        self.assertNotIn("MPI_ABORT", proc.stderr)
        self.assertEqual(len(read_metrics(metrics)), 1)


def one_line_per_rank(test, proc, ranks=2):
    """Each rank's single error line, by rank; nothing of MPI_Abort, Open
    MPI's error log or a flight recorder (a deadline that passed) around them."""
    lines = error_lines(proc.stderr)
    mine = {rank: [line for line in lines if f"[rank {rank}]" in line] for rank in range(ranks)}
    for rank in range(ranks):
        test.assertEqual(len(mine[rank]), 1, proc.stderr)
    test.assertEqual(len(lines), ranks, proc.stderr)
    for noise in ("MPI_ABORT", "ORTE_ERROR_LOG", "flight recorder", "did not complete within"):
        test.assertNotIn(noise, proc.stderr)
    return {rank: found[0] for rank, found in mine.items()}


@unittest.skipUnless(MPIRUN, "mpirun not found")
class OneRankFailsInAStepHook(TempDirMixin, unittest.TestCase):
    """A plugin hook that fails on one rank alone in the middle of a run stops
    every rank at once: the failing rank prints its cause, each other rank
    one line pointing at it, all exit 1, and none waits out the
    communication deadline in the next collective (set long here, so a rank
    that waited for it would show in the time taken)."""

    def fail_in(self, hook, rank):
        start = time.monotonic()
        proc = mpirun(2, *COMMON, "--init_process_group.timeout", 120, "--plugin-path",
                      os.path.join(TEST_PLUGINS, "drift"), "--plugin", "drift", "--drift.action", "fail",
                      "--drift.hook", hook, "--drift.rank", rank, "--drift.at_step", 1, check=False, timeout=180)
        self.assertLess(time.monotonic() - start, 60, proc.stderr)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        lines = one_line_per_rank(self, proc)
        self.assertIn(f"plugin drift: {hook} failed", lines[rank])
        self.assertIn("drift: failing on purpose", lines[rank])
        self.assertIn(f"rank {rank} failed in {hook} at step 2: see its line", lines[1 - rank])

    def test_step_end_on_rank_0(self):
        self.fail_in("step_end", 0)

    def test_step_begin_on_rank_1(self):
        self.fail_in("step_begin", 1)

    def test_gradients_finalize_on_rank_1(self):
        self.fail_in("gradients_finalize", 1)

    def test_save_state_on_rank_1_publishes_nothing(self):
        # The checkpoint after step 1 (of 2) fails in rank 1's save_state:
        # the commit exchange tells every rank, no step_1 is published, and
        # the pending directory is gone.
        save = self.path("ckpt")
        proc = mpirun(2, *COMMON, "--init_process_group.timeout", 120, "--plugin-path",
                      os.path.join(TEST_PLUGINS, "drift"), "--plugin", "drift", "--drift.action", "fail",
                      "--drift.hook", "save_state", "--drift.rank", 1, "--drift.at_step", 1,
                      "--save", save, "--save-every", 1, check=False, timeout=180)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        lines = one_line_per_rank(self, proc)
        for rank in (0, 1):
            self.assertIn("step_1 not saved: rank 1: ", lines[rank])
            self.assertIn("drift: failing on purpose in save_state", lines[rank])
        self.assertEqual(sorted(os.listdir(save)), [])

    def test_an_fp8_state_log_that_cannot_be_written_is_refused_at_create(self):
        # Issue 30's case: rank 0 alone writes the log; a path it cannot
        # write stops every rank before the first step.
        proc = mpirun(2, *COMMON, "--plugin", "fp8", "--plugin", "profiler", "--profiler.output_trace_dir",
                      self.path("trace"), "--fp8.state_log", "/nonexistent/x", check=False, timeout=180)
        self.assertNotEqual(proc.returncode, 0, proc.stderr)
        lines = one_line_per_rank(self, proc)
        self.assertIn("--fp8.state_log: cannot append to '/nonexistent/x'", lines[0])
        self.assertNotIn("step ", proc.stderr)


@unittest.skipUnless(MPIRUN, "mpirun not found")
@unittest.skipUnless(MPIRUN, "mpirun not found")
class RankZeroOutputs(TempDirMixin, unittest.TestCase):
    """Rank 0 alone writes --metrics-file and --tensorboard-dir; a path it
    cannot open is still every rank's usage error: each rank prints its
    line and exits 2, with no MPI_Abort (which a supervisor would take for
    a crash and restart)."""

    def test_a_metrics_file_that_cannot_be_opened(self):
        proc = mpirun(2, *COMMON, "--metrics-file", self.path("no/such/dir/m.jsonl"), check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = one_line_per_rank(self, proc)
        self.assertIn("--metrics-file: cannot open", lines[0])
        self.assertIn("another rank failed (host output files)", lines[1])

    def test_a_tensorboard_dir_that_is_a_file(self):
        with open(self.path("file"), "w") as f:
            f.write("x")
        proc = mpirun(2, *COMMON, "--tensorboard-dir", self.path("file"), check=False, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = one_line_per_rank(self, proc)
        self.assertIn("--tensorboard-dir:", lines[0])
        self.assertIn("another rank failed (host output files)", lines[1])


class SameFailureOnEveryRank(TempDirMixin, unittest.TestCase):
    """A failure every rank meets by itself (the same damaged input) ends
    with each rank's own line and a plain exit code, not MPI_Abort's banner
    and Open MPI's error log: 4, since it came before the first step and a
    rerun would repeat it (util/agreed_error.h)."""

    def test_a_damaged_megatron_index(self):
        import struct
        prefix = self.path("corpus")
        tokens = np.arange(600, dtype=np.uint16) % 256
        tokens.tofile(prefix + ".bin")
        with open(prefix + ".idx", "wb") as f:  # Megatron-LM's MMIDIDX header, then fewer bytes than it counts
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 2, 3))
            f.write(np.array([300, 300], dtype=np.int32).tobytes())
        proc = mpirun(2, *COMMON, "--data", f"megatron:{prefix}", check=False, timeout=120)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        for line in one_line_per_rank(self, proc).values():
            self.assertIn(f"--data megatron:{prefix}: .idx has", line)

    def test_a_weight_missing_from_a_hugging_face_directory(self):
        try:
            from safetensors.numpy import save_file
            from test_hf_checkpoints import random_hf_model
            random_hf_model().save_pretrained(self.path("hf"), safe_serialization=True)
        except (ImportError, AttributeError) as e:  # transformers: requirements-tools.txt
            self.skipTest(f"transformers is needed to write the checkpoint: {e}")
        from safetensors.numpy import load_file
        weights = os.path.join(self.path("hf"), "model.safetensors")
        tensors = load_file(weights)
        del tensors["transformer.h.1.mlp.c_fc.weight"]
        save_file(tensors, weights, metadata={"format": "pt"})
        proc = mpirun(2, "--log-level", "warn", "--threads", 1, "--steps", 1, "--batch-size", 8, "--init-from",
                      "hf:" + self.path("hf"), check=False, timeout=120)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        for line in one_line_per_rank(self, proc).values():
            self.assertIn("h.1.mlp.c_fc.weight", line)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class DdpWeightChecksum(TempDirMixin, unittest.TestCase):
    def test_a_rank_whose_weights_drift_stops_the_run(self):
        proc = mpirun(2, *COMMON, "--plugin", "ddp", "--plugin-path", os.path.join(TEST_PLUGINS, "drift"),
                      "--plugin", "drift", check=False, timeout=180)
        self.assertGreater(proc.returncode, 0, proc.stderr)
        messages = {line.split("] ", 3)[-1] for line in error_lines(proc.stderr)}
        self.assertEqual(len(messages), 1, proc.stderr)  # every rank that printed, the same line
        self.assertIn("the replicas' weights differ after this run's first step", messages.pop())

    def test_agreeing_replicas_pass(self):
        mpirun(2, *COMMON, "--plugin", "ddp", "--plugin-path", os.path.join(TEST_PLUGINS, "drift"),
               "--plugin", "drift", "--drift.at_step", 1000)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class FsdpFollowsHostPrecision(TempDirMixin, unittest.TestCase):
    def losses(self, *extra):
        path = self.path("m.jsonl")
        if os.path.exists(path):
            os.remove(path)
        mpirun(2, "--model", "gpt-tiny", "--log-level", "warn", "--threads", 1, "--batch-size", 8, "--steps", 4,
               "--lr", 3e-3, "--plugin", "fsdp", "--mixed-precision", "bf16", "--metrics-file", path, *extra)
        return [r["loss"] for r in read_metrics(path)]

    def test_bf16_maps_onto_the_policy_and_an_explicit_dtype_wins(self):
        implied = self.losses()
        explicit = self.losses("--fsdp.param_dtype", "bf16")
        fp32 = self.losses("--fsdp.param_dtype", "fp32")
        self.assertEqual(implied, explicit)  # bf16 parameters and reductions, as accelerate's set_mixed_precision
        self.assertNotEqual(implied, fp32)   # the explicit fp32 policy wins over the mapping


if __name__ == "__main__":
    unittest.main()
