"""The megatron plugin under mpirun: tensor parallelism (Megatron's column /
row-parallel blocks, vocab-parallel embedding and cross-entropy) over T ranks,
with or without sequence parallelism,
data parallel over the rest, gives the per-step losses and gradient norms of
one process with the same global batch (fp32, within 1e-5 relative); each
rank holds 1/T of every split weight; the host's tensor-parallel collectives
move the bytes Megatron's analysis predicts; checkpoints hold whole tensors
(same-layout resume bit-exact, merge-weights the full model); bad settings
fail with one clear line on every rank."""
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

    def test_sequence_parallelism(self):
        # LayerNorm / residual regions split along the sequence: the same
        # losses and norms, on every layout.
        SP = ("--megatron.sequence_parallelism", "true")
        self.parity(2, 2, *SP)
        self.parity(4, 2, *SP)
        self.parity(4, 4, *SP, model=("--vocab-size", 254))
        self.parity(4, 2, *SP, "--megatron.recompute_activations", "true", "--grad-clip", 0.05)

    def test_recompute_and_accumulation(self):
        # (The host checks --batch-size against world x accumulation before
        # the plugins plan, so 16, though only the data group splits it.)
        self.parity(4, 2, "--megatron.recompute_activations", "true", "--grad-accum", 2, batch=16)


def local_parameters(tp, C=64, V=256, S=64, L=2):
    """gpt-tiny's parameters one tensor rank holds: split weights 1/T (the
    vocabulary padded to a multiple of T), LayerNorms, wpe and row biases whole."""
    padded = -(-V // tp) * tp
    block = (2 * C + (3 * C * C + 3 * C) // tp + C * C // tp + C  # ln_1, c_attn, attn.c_proj
             + 2 * C + (4 * C * C + 4 * C) // tp + 4 * C * C // tp + C)  # ln_2, c_fc, mlp.c_proj
    return padded // tp * C + S * C + L * block + 2 * C


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronTheory(TempDirMixin, unittest.TestCase):
    """Memory and communication per rank equal Megatron's accounting."""

    def run_tp(self, n, tp, *extra, batch=12):
        path = self.path(f"run{len(os.listdir(self.tmp))}.jsonl")  # the metrics file appends
        mpirun(n, *COMMON, *MEGATRON, "--megatron.tp_degree", tp, "--steps", 2, "--batch-size", batch,
               "--metrics-file", path, *extra)
        return read_metrics(path)

    def test_parameter_gradient_and_optimizer_bytes(self):
        for n, tp, vocab in ((2, 2, 256), (4, 4, 254)):
            with self.subTest(tp=tp):
                row = self.run_tp(n, tp, "--vocab-size", vocab)[0]
                local = 4 * local_parameters(tp, V=vocab)
                peaks = row["memory_startup_peak_bytes"]
                self.assertEqual(peaks["params"], local)
                self.assertEqual(peaks["grads"], local)
                self.assertEqual(peaks["optimizer"], 2 * local)  # AdamW's two fp32 moments

    def test_communicated_bytes_per_step(self):
        # Per micro-batch of b sequences of S tokens, width C, L blocks:
        # forward all-reduces the vocab-parallel embedding and two g's per
        # block (b S C each), and the loss's max, target logit and sum of
        # exponentials (b S each); backward all-reduces two f's per block
        # and the head's f (b S C each). fp32.
        b, S, C, L = 12, 64, 64, 2
        expected = 4 * ((4 * L + 2) * b * S * C + 3 * b * S)
        rows = self.run_tp(2, 2)
        self.assertEqual([r["host.tensor_parallel_bytes"] for r in rows], [expected, expected])
        # tp 2 x dp 2: each data rank's micro-batch is half the batch; the
        # data group's gradient all-reduce is the plugin's (comm_bytes).
        rows = self.run_tp(4, 2)
        half = 4 * ((4 * L + 2) * (b // 2) * S * C + 3 * (b // 2) * S)
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], half)
        self.assertEqual(rows[0]["comm_bytes"], 4 * local_parameters(2) + 8)  # gradients + the norm (f64)
        # Full recompute runs every block's forward again: two more g's each.
        rows = self.run_tp(2, 2, "--megatron.recompute_activations", "true")
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], expected + 4 * 2 * L * b * S * C)
        # Sequence parallel: each all-reduce becomes a reduce-scatter and an
        # all-gather of the same tensor (the same bus traffic as the one
        # all-reduce), in forward and backward alike: the embedding's and
        # each row-parallel output's reduce-scatter, each column-parallel
        # input's and the head's all-gather, each counted at the full b S C.
        rows = self.run_tp(2, 2, "--megatron.sequence_parallelism", "true")
        self.assertEqual(rows[0]["host.tensor_parallel_bytes"], 4 * (2 * (4 * L + 2) * b * S * C + 3 * b * S))


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronBadInput(TempDirMixin, unittest.TestCase):
    """One clear line on every rank and a non-zero exit."""

    def refused(self, n, *args, mentions):
        proc = mpirun(n, *COMMON, *MEGATRON, "--steps", 2, "--batch-size", 12, *args, check=False, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = error_lines(proc.stderr)
        for rank in range(n):
            mine = [line for line in lines if f"[rank {rank}]" in line]
            self.assertTrue(mine, f"rank {rank} printed no error:\n{proc.stderr}")
            self.assertEqual(len(mine), 1, proc.stderr)
            for word in mentions:
                self.assertIn(word, mine[0], proc.stderr)

    def test_tp_not_dividing_the_world(self):
        self.refused(3, "--megatron.tp_degree", 2, mentions=["tp_degree 2", "world size 3"])

    def test_tp_not_dividing_the_heads(self):
        self.refused(4, "--megatron.tp_degree", 4, "--n-head", 2, "--n-embd", 64, mentions=["4", "2 attention heads"])

    def test_sequence_parallelism_without_tp(self):
        self.refused(2, "--megatron.sequence_parallelism", "true", mentions=["sequence_parallelism", "tp_degree"])

    def test_sequence_parallelism_with_a_sequence_the_group_does_not_split(self):
        self.refused(4, "--megatron.tp_degree", 4, "--megatron.sequence_parallelism", "true", "--seq-len", 62,
                     mentions=["sequence parallelism", "seq_len 62"])


@unittest.skipUnless(MPIRUN, "mpirun not found")
class MegatronCheckpoints(TempDirMixin, unittest.TestCase):
    """A tensor-parallel checkpoint holds whole tensors (global shapes): the
    same layout resumes to the last bit, and merge-weights gives the model a
    single process trains. Cross-strategy rows: tests/python/test_cross_strategy.py."""

    TP2 = [*MEGATRON, "--megatron.tp_degree", 2]

    def test_same_layout_resume_is_bit_exact(self):
        for extra in ([], ["--megatron.sequence_parallelism", "true"]):
            with self.subTest(extra=extra):
                args = [*COMMON, *self.TP2, *extra, "--batch-size", 12, "--lr-decay-steps", 6, "--vocab-size", 255]
                tag = len(os.listdir(self.tmp))
                straight, split = self.path(f"straight{tag}"), self.path(f"split{tag}")
                mpirun(4, *args, "--steps", 6, "--save", straight, "--metrics-file", straight + ".jsonl")
                mpirun(4, *args, "--steps", 3, "--save", split, "--metrics-file", split + ".jsonl")
                mpirun(4, *args, "--steps", 6, "--save", split, "--resume", split, "--metrics-file", split + ".jsonl")
                a, b = read_metrics(straight + ".jsonl"), read_metrics(split + ".jsonl")
                self.assertEqual([r["step"] for r in b], list(range(1, 7)))
                self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b])
                for name in ("model.safetensors", "optimizer.safetensors"):
                    with open(os.path.join(straight, "step_6", name), "rb") as x, \
                            open(os.path.join(split, "step_6", name), "rb") as y:
                        self.assertTrue(x.read() == y.read(), f"{name} differs after resume")

    def test_merge_weights_gives_the_full_model(self):
        from safetensors.numpy import load_file
        import numpy as np
        args = [*COMMON, "--steps", 3, "--batch-size", 12, "--vocab-size", 255]
        run_host(*args, "--save", self.path("plain"))
        mpirun(4, *args, *self.TP2, "--save", self.path("tp"))
        for name in ("plain", "tp"):
            run_host("merge-weights", self.path(name), self.path(name + "_merged"))
        plain = load_file(os.path.join(self.path("plain_merged"), "model.safetensors"))
        tp = load_file(os.path.join(self.path("tp_merged"), "model.safetensors"))
        self.assertEqual(sorted(plain), sorted(tp))
        for name in plain:
            self.assertEqual(plain[name].shape, tp[name].shape, name)  # global shapes, wte 255 rows
            # Close, not equal: AdamW normalises each element's step, so where
            # a gradient is ~0 (the key bias's is exactly 0: softmax ignores a
            # per-query constant) rounding differences between layouts become
            # steps of up to ~2e-5 after 3 steps. A misplaced slice would be
            # off by the weights' own scale (~2e-2).
            np.testing.assert_allclose(tp[name], plain[name], rtol=1e-3, atol=1e-4, err_msg=name)
