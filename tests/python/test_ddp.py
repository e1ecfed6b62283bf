"""The ddp plugin under mpirun: N ranks with global batch B give the losses
of one process with batch B (fp32 within 1e-5 relative per step), the
communicated bytes equal the all-reduce theory, the replicas' weights agree
(ddp enforces it: test_rank_agreement.py), and every DistributedDataParallelKwargs option works or is refused clearly."""
import os
import subprocess
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, TempDirMixin, mpirun, read_metrics, run_host

PARAMS_TINY = 120576
COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]



@unittest.skipUnless(MPIRUN, "mpirun not found")
class DdpParity(TempDirMixin, unittest.TestCase):
    _references = {}  # (batch, steps): one process's rows, run once per suite

    def reference(self, batch, steps):
        if (batch, steps) not in self._references:
            single = self.path("single.jsonl")
            run_host(*COMMON, "--steps", steps, "--batch-size", batch, "--metrics-file", single)
            DdpParity._references[(batch, steps)] = read_metrics(single)
        return self._references[(batch, steps)]

    def parity(self, n, *extra, batch=12, steps=10, tolerance=1e-5):
        multi = self.path(f"multi{n}.jsonl")
        if os.path.exists(multi):
            os.remove(multi)
        mpirun(n, *COMMON, "--steps", steps, "--batch-size", batch, "--metrics-file", multi, *extra)
        a, b = self.reference(batch, steps), read_metrics(multi)
        self.assertEqual(len(b), steps)
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], tolerance, (n, extra, x["step"], x["loss"], y["loss"]))
        return b

    def test_two_three_and_four_ranks_match_one_process(self):
        for n in (2, 3, 4):
            with self.subTest(ranks=n):
                rows = self.parity(n)
                # all_reduce payload per step: every fp32 gradient once (step 1 also carries the broadcast).
                self.assertTrue(all(r["comm_bytes"] == 4 * PARAMS_TINY for r in rows[1:]), rows[1]["comm_bytes"])
                self.assertEqual(rows[0]["ddp.param_checksum_spread"], 0.0)

    def test_accumulation_small_buckets_and_bucket_views(self):
        rows = self.parity(2, "--grad-accum", 2, "--plugin", "ddp", "--ddp.bucket_cap_mb", 0.1)
        self.assertGreater(rows[0]["ddp.buckets"], 1)
        self.parity(2, "--plugin", "ddp", "--ddp.gradient_as_bucket_view", "true", "--ddp.bucket_cap_mb", 0.1)

    def test_compression_hooks(self):
        # fp16/bf16 gradients in the all-reduce: close, not exact.
        self.parity(2, "--plugin", "ddp", "--ddp.comm_hook", "fp16", steps=10, tolerance=1e-3)
        self.parity(2, "--plugin", "ddp", "--ddp.comm_hook", "bf16", steps=10, tolerance=1e-2)

    def test_checkpoint_from_two_ranks_resumes_on_one(self):
        straight, split = self.path("straight.jsonl"), self.path("split.jsonl")
        run_host(*COMMON, "--steps", 12, "--batch-size", 8, "--metrics-file", straight)
        mpirun(2, *COMMON, "--steps", 6, "--lr-decay-steps", 12, "--batch-size", 8, "--save", self.path("ckpt"),
               "--metrics-file", split)
        run_host(*COMMON, "--steps", 12, "--batch-size", 8, "--resume", self.path("ckpt"), "--metrics-file", split)
        a, b = read_metrics(straight), read_metrics(split)
        self.assertEqual([r["step"] for r in b], list(range(1, 13)))
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (x, y))


@unittest.skipUnless(MPIRUN, "mpirun not found")
class DdpOptions(TempDirMixin, unittest.TestCase):
    def refused(self, *args, mentions):
        proc = mpirun(2, *COMMON, "--steps", 1, "--batch-size", 8, "--plugin", "ddp", *args, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        for word in mentions:
            self.assertIn(word, proc.stderr)

    def test_power_sgd_is_refused_with_the_reason(self):
        self.refused("--ddp.comm_hook", "power_sgd", mentions=["power_sgd is not available"])

    def test_comm_wrapper_needs_power_sgd(self):
        self.refused("--ddp.comm_wrapper", "fp16", mentions=["comm_wrapper wraps the PowerSGD hook"])

    def test_dim_other_than_zero(self):
        self.refused("--ddp.dim", 1, mentions=["--ddp.dim", "maximum 0"])

    def test_accepted_options_run(self):
        mpirun(2, *COMMON, "--steps", 2, "--batch-size", 8, "--plugin", "ddp", "--ddp.find_unused_parameters", "true",
               "--ddp.broadcast_buffers", "false", "--ddp.static_graph", "true", "--ddp.check_reduction", "true")

    def test_batch_that_does_not_split_across_ranks(self):
        proc = mpirun(3, *COMMON, "--steps", 1, "--batch-size", 8, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("does not split evenly into 3 rank(s)", proc.stderr)

    def test_a_plugin_that_does_not_reduce_gradients_is_refused_on_many_ranks(self):
        plugins = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
        proc = mpirun(2, *COMMON, "--steps", 1, "--batch-size", 8, "--plugin-path", os.path.join(plugins, "good"),
                      "--plugin", "takeover", check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("none of the loaded plugins reduces gradients", proc.stderr)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class PointToPoint(unittest.TestCase):
    def test_batched_and_plain_send_recv_around_a_ring(self):
        plugins = os.environ.get("ACCEL_TEST_PLUGINS",
                                 os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
        for n in (2, 3):
            proc = mpirun(n, *COMMON, "--steps", 1, "--batch-size", 6, "--plugin-path", os.path.join(plugins, "good"),
                          "--plugin", "p2p_ring")
            self.assertIn("ring exchange verified", proc.stderr)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class Failures(unittest.TestCase):
    """No run hangs: a rank that skips a collective or dies ends the job
    within the timeout, with a message naming the rank and the operation."""

    # A hang is caught by subprocess's timeout (TimeoutExpired fails the
    # test); how fast the job ends under load is not asserted.
    HANG_LIMIT_S = 180

    def run_mpmd(self, first, second):
        return subprocess.run([MPIRUN, "-n", "1", ACCEL_HOST, *map(str, first), ":", "-n", "1", *map(str, second)],
                              capture_output=True, text=True, env=MPI_ENV, timeout=self.HANG_LIMIT_S)

    def test_a_rank_that_skips_a_collective_times_out_everywhere(self):
        # Ranks started with different --steps now stop at start-up
        # (test_rank_agreement.py); a test plugin stalls rank 1 at step 3 instead.
        plugins = os.environ.get("ACCEL_TEST_PLUGINS",
                                 os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
        args = [*COMMON, "--batch-size", 8, "--init_process_group.timeout", 3, "--steps", 6, "--plugin", "ddp",
                "--plugin-path", os.path.join(plugins, "drift"), "--plugin", "drift", "--drift.action", "stall",
                "--drift.at_step", 3]
        proc = self.run_mpmd(args, [ACCEL_HOST, *map(str, args)])
        self.assertNotEqual(proc.returncode, 0)
        self.assertRegex(proc.stderr, r"rank 0 .*all_reduce #\d+ .* did not complete within 3000 ms")
        self.assertIn("TIMED_OUT", proc.stderr)  # the flight recorder names the stuck operation

    def test_a_rank_killed_mid_step_ends_the_job(self):
        args = [*map(str, COMMON), "--batch-size", "8", "--steps", "100000", "--init_process_group.timeout", "10"]
        proc = self.run_mpmd(args, ["timeout", "-s", "KILL", "3", ACCEL_HOST, *args])
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("rank 1", proc.stderr)


if __name__ == "__main__":
    unittest.main()
