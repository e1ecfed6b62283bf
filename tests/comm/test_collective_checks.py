"""Collective argument and sequence checks, end to end (accel-host with the
collective_faults test plugin): a collective whose tensor over-runs its
allocation, a bogus or stale group or work handle, each is refused with one
line naming the plugin and the call, no crash; a rank that skips an
all_reduce is caught at that step within seconds (not at the 30-minute
deadline), naming both operations — by default and with ACCEL_COMM_VERIFY=ops.
"""
import os
import re
import subprocess
import time
import unittest

from accel_testing import ACCEL_HOST, MPI_ENV, MPIRUN, run_host

PLUGINS = os.environ.get("ACCEL_TEST_PLUGINS", os.path.join(os.path.dirname(__file__), "../../build/test_plugins"))
FAULTS = os.path.join(PLUGINS, "collective_faults")
RUN = ["--plugin-path", FAULTS, "--plugin", "collective_faults", "--steps", 3, "--batch-size", 4,
       "--model", "gpt-tiny", "--data", "synthetic", "--log-level", "warn"]
CRASH = re.compile(r"Segmentation|signal \d+|Aborted \(core|backtrace|terminate called|double free|corrupted",
                   re.IGNORECASE)


def job(n, *args, env=None, timeout=120):
    """mpirun -n N accel-host RUN args; returns (CompletedProcess, seconds)."""
    start = time.monotonic()
    proc = subprocess.run([MPIRUN, "-n", str(n), "-x", "ACCEL_COMM_VERIFY", ACCEL_HOST, *map(str, RUN),
                           *map(str, args)], capture_output=True, text=True, env=dict(MPI_ENV, **(env or {})),
                          timeout=timeout)
    return proc, time.monotonic() - start


@unittest.skipUnless(MPIRUN, "no mpirun")
class Refusals(unittest.TestCase):
    def refused(self, n, fault, call, cause):
        proc, _ = job(n, "--collective_faults.fault", fault, env={"ACCEL_COMM_VERIFY": "0"})
        out = proc.stdout + proc.stderr
        self.assertNotEqual(proc.returncode, 0, out)
        self.assertIsNone(CRASH.search(out), out)
        refusal = re.compile(r"plugin collective_faults: step_end failed \(ACCEL_ERROR_INVALID_ARGUMENT\): "
                             + call + ": ")
        lines = [line for line in out.splitlines() if refusal.search(line)]
        self.assertTrue(lines, out)
        self.assertRegex(lines[0], cause)
        return lines[0]

    def test_overrun_all_reduce_is_refused_at_two_ranks(self):
        self.refused(2, "overrun_all_reduce", "comm.all_reduce",
                     r"input \(f32 x1024 = 4.00 KiB .*runs 3.94 KiB past the end of allocation "
                     r"'collective_faults small' \(f32 x16, 64 B\) of plugin collective_faults")

    def test_overrun_all_gather_output_is_refused_at_two_ranks(self):
        self.refused(2, "overrun_all_gather", "comm.all_gather",
                     r"output \(f32 x32 = 128 B .*runs 64 B past the end of allocation 'collective_faults small'")

    def test_bogus_group_handle_is_refused(self):
        self.refused(2, "bogus_group", "comm.all_reduce", r"group: group handle 0x1234 is not a group handle this host")

    def test_destroyed_group_handle_is_refused_as_stale(self):
        self.refused(2, "stale_group", "comm.all_reduce", r"group handle 0x[0-9a-f]+ is stale: its group was destroyed")

    def test_bogus_work_handle_is_refused(self):
        self.refused(1, "bogus_work", "comm.work_wait", r"work handle 0x[0-9a-f]+ is not a work handle this host")

    def test_freed_work_handle_is_refused_as_stale(self):
        self.refused(1, "stale_work", "comm.work_wait", r"work handle 0x[0-9a-f]+ is stale: its work was freed")

    def test_all_to_all_v_past_its_input_is_refused(self):
        self.refused(2, "all_to_all_v_overrun", "comm.all_to_all_v",
                     r"input \(f32 x2[12] = .*runs .* past the end of allocation 'collective_faults small'")

    def test_all_to_all_v_counts_two_ranks_disagree_on_fail_the_receiver_naming_the_peer(self):
        # At 4 ranks rank 3 expects (0 + 2 x 3) % 3 + 1 = 1 float from rank 0, which sends it none.
        proc, _ = job(4, "--collective_faults.fault", "all_to_all_v_disagree", env={"ACCEL_COMM_VERIFY": "0"})
        out = proc.stdout + proc.stderr
        self.assertNotEqual(proc.returncode, 0, out)
        self.assertIsNone(CRASH.search(out), out)
        self.assertRegex(out, r"\[rank 3\] \[error\] plugin collective_faults: step_end failed \(ACCEL_ERROR_\w+\): "
                              r"comm.all_to_all_v: .*received 0 elements from peer 0, expected 1")


@unittest.skipUnless(MPIRUN, "no mpirun")
class AllToAllV(unittest.TestCase):
    def test_uneven_and_zero_counts_arrive_in_place_at_one_to_four_ranks(self):
        # The plugin checks every received float against its sender and fails the step otherwise.
        for n in (1, 2, 4):  # (RUN's batch of 4 does not split over 3)
            for verify in ("0", "ops"):
                with self.subTest(ranks=n, verify=verify):
                    proc, _ = job(n, "--collective_faults.fault", "all_to_all_v", env={"ACCEL_COMM_VERIFY": verify})
                    self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


@unittest.skipUnless(MPIRUN, "no mpirun")
class Divergence(unittest.TestCase):
    # The deadline stays at its 30-minute default: only the sequence check can end these jobs in time.
    BOUND_S = 60

    def skipped(self, verify):
        proc, took = job(2, "--collective_faults.fault", "skip_all_reduce", "--collective_faults.step", 1,
                         env={"ACCEL_COMM_VERIFY": verify}, timeout=self.BOUND_S + 30)
        out = proc.stdout + proc.stderr
        self.assertNotEqual(proc.returncode, 0, out)
        self.assertLess(took, self.BOUND_S, out)
        self.assertIsNone(CRASH.search(out), out)
        lines = [line for line in out.splitlines() if "collective sequence diverged at step 1" in line]
        self.assertTrue(lines, out)
        return lines[0]

    def test_skipped_all_reduce_is_caught_at_its_step(self):
        line = self.skipped("0")
        # Rank 0 waits in B while rank 1 (which paired its B with rank 0's A) ended the step.
        self.assertRegex(line, r"all_reduce 'collective_faults B' \(f32 x16, sum\) as collective \d+ of the step, "
                               r"but rank 1 ended the step after \d+ \(its last: all_reduce 'collective_faults B'")
        self.assertRegex(line, r"labels first differ at collective \d+: all_reduce 'collective_faults A' .* here, "
                               r"all_reduce 'collective_faults B' .* on rank 1")

    def test_skipped_all_reduce_is_caught_before_it_pairs_with_verify(self):
        line = self.skipped("ops")
        self.assertRegex(line, r"all_reduce 'collective_faults B' \(f32 x16, sum\)")
        self.assertIn("ended the step after", line)

    def test_matching_ranks_pass_every_check(self):
        for verify in ("0", "ops"):
            proc, _ = job(2, "--collective_faults.fault", "none", env={"ACCEL_COMM_VERIFY": verify})
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


class VerifySetting(unittest.TestCase):
    def test_unknown_verify_word_is_refused(self):
        proc = subprocess.run([ACCEL_HOST, *map(str, RUN)], capture_output=True, text=True,
                              env=dict(os.environ, ACCEL_COMM_VERIFY="everything"), timeout=120)
        self.assertEqual(proc.returncode, 4, proc.stderr)  # before the first step: a rerun repeats it
        self.assertIn("ACCEL_COMM_VERIFY: 'everything' is not one of ops, memory, all", proc.stderr)


if __name__ == "__main__":
    unittest.main()
