"""Context parallelism (`--megatron.cp_degree C`) under mpirun: every sequence
split over C ranks, attention through a ring (p2p), all-gathered keys and
values (all_gather), Ulysses' all-to-all (a2a) or both (a2a+p2p), gives the per-step losses and gradient norms of one
process with the same global batch (fp32, 20 steps, within 1e-5 relative,
norms within 1e-4), for GPT-2's learned positions and Llama's rotary ones,
alone and with tensor (and sequence) parallelism, data parallelism with the
distributed optimizer, fsdp and ZeRO-3, pipeline stages, recompute,
evaluation, bf16 and fp8; the context group's traffic is
the exchange's formula; settings that cannot split fail with one line on
every rank. (Checkpoints across cp degrees: test_cross_strategy.py.)"""
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, mpirun, read_metrics, run_host

COMMON = ["--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1, "--batch-size", 4]
STEPS = 20


def cp(degree, comm_type="p2p", *extra):
    return ["--plugin", "megatron", "--megatron.cp_degree", degree, "--megatron.cp_comm_type", comm_type, *extra]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class ContextParallelParity(TempDirMixin, unittest.TestCase):
    """Per-step losses and norms of context-parallel runs against one process."""

    _references = {}

    def reference(self, model, host_extra):
        key = (model, tuple(map(str, host_extra)))
        if key not in self._references:
            path = self.path(f"reference{len(self._references)}.jsonl")
            run_host(*COMMON, "--model", model, "--steps", STEPS, "--metrics-file", path, *host_extra)
            ContextParallelParity._references[key] = read_metrics(path)
        return self._references[key]

    def parity(self, n, model, plugin_args, host_extra=(), loss_tol=1e-5, norm_tol=1e-4):
        path = self.path("cp.jsonl")
        if os.path.exists(path):
            os.remove(path)
        mpirun(n, *COMMON, "--model", model, "--steps", STEPS, "--metrics-file", path, *plugin_args, *host_extra)
        want, got = self.reference(model, host_extra), read_metrics(path)
        self.assertEqual(len(got), STEPS)
        # Split for real: a run that fell back to plain data parallelism
        # would match the reference too.
        self.assertGreater(got[0]["host.context_parallel_bytes"], 0, plugin_args)
        for x, y in zip(want, got):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], loss_tol, (n, plugin_args, x["step"], x["loss"], y["loss"]))
            self.assertLess(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"], norm_tol,
                            (n, plugin_args, x["step"], x["grad_norm"], y["grad_norm"]))
        return got

    def test_ring_on_two_and_four_ranks(self):
        for model in ("gpt-tiny", "llama-tiny"):
            rows = self.parity(2, model, cp(2))
            self.assertEqual(rows[0]["megatron.cp_degree"], 2)
            self.parity(4, model, cp(4))

    def test_all_gather_on_two_and_four_ranks(self):
        for model in ("gpt-tiny", "llama-tiny"):
            self.parity(2, model, cp(2, "all_gather"))
            self.parity(4, model, cp(4, "all_gather"))
        self.parity(4, "llama-tiny", cp(2, "all_gather", "--megatron.tp_degree", 2))

    def test_ulysses_on_two_and_four_ranks(self):
        self.parity(2, "gpt-tiny", cp(2, "a2a"))
        self.parity(4, "gpt-tiny", cp(4, "a2a"))
        self.parity(2, "llama-tiny", cp(2, "a2a"))  # 4 query heads, 2 key/value heads: 2 divides both

    def test_ulysses_and_ring_combined_on_four_ranks(self):
        for model in ("gpt-tiny", "llama-tiny"):
            self.parity(4, model, cp(4, "a2a+p2p"))  # all-to-all over 2, a ring of 2
        self.parity(4, "gpt-tiny", cp(4, "a2a+p2p", "--megatron.cp_a2a_degree", 2), host_extra=("--grad-accum", 2))

    def test_with_tensor_and_sequence_parallelism(self):
        for model in ("gpt-tiny", "llama-tiny"):
            self.parity(4, model, cp(2, "p2p", "--megatron.tp_degree", 2))
        self.parity(4, "gpt-tiny", cp(2, "a2a", "--megatron.tp_degree", 2, "--megatron.sequence_parallelism", "true"))

    def test_with_data_parallelism_and_the_distributed_optimizer(self):
        self.parity(4, "llama-tiny", cp(2, "p2p", "--megatron.use_distributed_optimizer", "true"),
                    host_extra=("--grad-clip", 0.05))

    def test_under_fsdp_and_zero3(self):
        # The sharding strategies offer it too (Accelerate's cp_size with
        # FSDP, DeepSpeed's sequence_parallel_size): shards span data x context.
        self.parity(2, "gpt-tiny", ["--plugin", "fsdp", "--fsdp.cp_size", 2, "--fsdp.auto_wrap_policy",
                                    "transformer_based_wrap"])
        self.parity(4, "llama-tiny", ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3,
                                      "--deepspeed_zero.sequence_parallel_size", 2], host_extra=("--grad-clip", 0.05))

    def test_the_batch_splits_over_data_ranks_only(self):
        # Issue 50 (18): a context group's ranks read the same micro-batches,
        # but the batch check counted them as data ranks under fsdp's cp_size
        # and ZeRO's sequence_parallel_size (not under megatron's cp_degree):
        # 4 ranks with context 2 are 2 data ranks, which split a batch of 2
        # and refuse one of 3 naming 2 ranks, whichever plugin plans it.
        unbatched = COMMON[:-2]
        self.assertEqual(COMMON[-2:], ["--batch-size", 4])
        path = self.path("batch2.jsonl")
        run_host(*unbatched, "--model", "gpt-tiny", "--steps", 3, "--batch-size", 2, "--metrics-file", path)
        want = read_metrics(path)
        split = "--batch-size 3 does not split evenly into 2 rank(s) x 1 micro-step(s)"
        for plugin_args, refusal in (
                (cp(2), split), (["--plugin", "fsdp", "--fsdp.cp_size", 2], split),
                # ZeRO checks its DeepSpeed config's batch when created, first.
                (["--plugin", "deepspeed_zero", "--deepspeed_zero.sequence_parallel_size", 2],
                 "train_batch_size 3 is not train_micro_batch_size_per_gpu 1 x gradient_accumulation_steps 1 x "
                 "world size 2")):
            with self.subTest(plugin_args[1]):
                os.remove(path)
                mpirun(4, *unbatched, "--model", "gpt-tiny", "--steps", 3, "--batch-size", 2, "--metrics-file", path,
                       *plugin_args)
                got = read_metrics(path)
                self.assertEqual(len(got), 3)
                for x, y in zip(want, got):
                    self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (plugin_args, x["step"]))
                proc = mpirun(4, *unbatched, "--model", "gpt-tiny", "--steps", 1, "--batch-size", 3, *plugin_args,
                              check=False, timeout=120)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(refusal, proc.stderr)

    def test_evaluation_splits_the_sequence_too(self):
        rows = self.parity(2, "gpt-tiny", cp(2), host_extra=("--eval-every", 10, "--eval-steps", 2))
        want = self.reference("gpt-tiny", ("--eval-every", 10, "--eval-steps", 2))
        evals = [(x["eval_loss"], y["eval_loss"]) for x, y in zip(want, rows) if "eval_loss" in x]
        self.assertEqual(len(evals), 2)
        for a, b in evals:
            self.assertLess(abs(a - b) / a, 1e-5)

    def test_with_pipeline_stages_and_recompute(self):
        self.parity(4, "gpt-tiny", cp(2, "p2p", "--megatron.pp_degree", 2))
        self.parity(2, "gpt-tiny", cp(2, "p2p", "--megatron.recompute_activations", "true",
                                      "--megatron.recompute_granularity", "full"))

    def test_bf16_and_fp8_within_their_tolerance(self):
        self.parity(2, "llama-tiny", cp(2), host_extra=("--mixed-precision", "bf16"), loss_tol=2e-2, norm_tol=5e-2)
        # FP8's scales come from amaxes over the data group, which holds the
        # context ranks: the same scales as one process sees.
        self.parity(2, "gpt-tiny", cp(2), host_extra=("--mixed-precision", "bf16", "--plugin", "fp8"), loss_tol=2e-2,
                    norm_tol=5e-2)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class ContextParallelTraffic(TempDirMixin, unittest.TestCase):
    """host.context_parallel_bytes per step against the exchanges' formulas
    (gpt-tiny: 2 layers, 4 heads of 16, seq 64; fp32; micro-batch 4)."""

    LAYERS, B, H, D, T = 2, 4, 4, 16, 64

    def bytes_per_step(self, n, plugin_args):
        path = self.path("traffic.jsonl")
        if os.path.exists(path):
            os.remove(path)
        mpirun(n, *COMMON, "--model", "gpt-tiny", "--steps", 2, "--metrics-file", path, *plugin_args)
        rows = read_metrics(path)
        return [r["host.context_parallel_bytes"] for r in rows]

    def test_ring_sends_each_block_c_minus_1_times_and_its_gradient_c_times(self):
        for c in (2, 4):
            block = 2 * self.B * self.H * (self.T // c) * self.D * 4  # keys and values of this rank
            # forward: C-1 hops of the block; backward: C-1 hops again, and
            # the block's gradient (fp32) on C hops back to its owner.
            want = self.LAYERS * ((c - 1) + (c - 1) + c) * block
            self.assertEqual(self.bytes_per_step(c, cp(c)), [want, want], c)

    def test_all_gather_sends_each_block_c_minus_1_times_per_gather(self):
        for c in (2, 4):
            block = 2 * self.B * self.H * (self.T // c) * self.D * 4
            # forward gathers; backward gathers again and reduce-scatters the
            # gradients: each time this rank's block (or its gradient) to C-1 others.
            want = self.LAYERS * 3 * (c - 1) * block
            self.assertEqual(self.bytes_per_step(c, cp(c, "all_gather")), [want, want], c)

    def test_ulysses_sends_four_all_to_alls_each_way_per_layer(self):
        for c in (2, 4):
            activation = self.B * self.H * (self.T // c) * self.D * 4  # q, k, v or the output, this rank's part
            want = self.LAYERS * 2 * 4 * activation * (c - 1) // c  # 4 forward, their 4 adjoints backward
            self.assertEqual(self.bytes_per_step(c, cp(c, "a2a")), [want, want], c)


@unittest.skipUnless(MPIRUN, "mpirun not found")
class ContextParallelRefusals(TempDirMixin, unittest.TestCase):
    """Settings that cannot split end the run with one line naming why."""

    def refused(self, n, *args, model="gpt-tiny"):
        proc = mpirun(n, *COMMON, "--model", model, "--steps", 1, *args, check=False)
        self.assertNotEqual(proc.returncode, 0)
        return proc.stderr

    def test_heads_the_all_to_all_cannot_split(self):
        # llama-tiny holds 2 key/value heads: Ulysses over 4 cannot split them.
        err = self.refused(4, *cp(4, "a2a"), model="llama-tiny")
        self.assertIn("all-to-all over 4 ranks splits heads", err)

    def test_a_sequence_the_ring_cannot_balance(self):
        err = self.refused(4, *cp(4), "--seq-len", 36)
        self.assertIn("does not split into the ring's 8 load-balanced chunks", err)

    def test_a_degree_that_does_not_divide_the_world(self):
        err = self.refused(2, *cp(4))
        self.assertIn("cp_degree 4 does not divide", err)

    def test_comm_type_without_cp(self):
        err = self.refused(2, "--plugin", "megatron", "--megatron.cp_comm_type", "a2a")
        self.assertIn("need cp_degree > 1", err)


if __name__ == "__main__":
    unittest.main()
