"""Every composed layout saves and resumes (issue 50): each composition of
parallelisms the docs say works (ep x tp, ep x tp x the distributed
optimizer, ep x pp x tp, cp x ep x tp, ...) is listed once in
COMPOSED_LAYOUTS and gets a generated row, so a composition cannot ship
without one: it trains as one process, saves, and resumes in its layout
bit-exact and in one process on the curve. A suite of its own (split from
test_cross_strategy.py) so ctest runs it beside the others."""
import itertools
import os
import re
import tempfile
import unittest

from accel_testing import MPIRUN, TempDirMixin, assert_same_safetensors, mpirun, read_metrics, run_host

# ---- Composed layouts ---------------------------------------------------------
# Every composition of parallelisms the docs say works (README.md's mixture of
# experts row, plugins/megatron/README.md's "Composes with" lines, the ZeRO
# and fsdp ep_size rows), listed once: each layout below is a row of
# ComposedLayouts, generated, so a composition cannot ship without one. A row
# trains 8 steps in the layout, saving at step 4, and checks that the run
# equals one process (within 1e-5 a step; the clipping norm, 0.5 so it clips,
# summed over the layout's groups), that resuming step 4 in the same layout
# continues to the last bit and writes the same step 8, and that one process
# resumes step 4 on the uninterrupted curve (within 1e-5). moe-tiny, so the
# expert state every layout saves is there to collide.
MOE_ROW = ["--model", "moe-tiny", "--seq-len", 32, "--batch-size", 8, "--lr", 3e-3, "--warmup-steps", 2,
           "--lr-decay-steps", 8, "--grad-clip", 0.5, "--log-level", "warn", "--threads", 1]

# megatron's parallel dimensions, each the options that set it.
MEGATRON_DIMENSIONS = {
    "tp": lambda d: ["--megatron.tp_degree", d],
    "pp": lambda d: ["--megatron.pp_degree", d],
    "cp": lambda d: ["--megatron.cp_degree", d],
    "ep": lambda d: ["--megatron.ep_degree", d],
    "sp": lambda _: ["--megatron.sequence_parallelism", "true"],
    "dist_opt": lambda _: ["--megatron.use_distributed_optimizer", "true"],
    "full_recompute": lambda _: ["--megatron.recompute_activations", "true", "--megatron.recompute_granularity",
                                 "full"],
}
# What a row name says of a dimension: "tp2", "sp".
DEGREELESS = ("sp", "dist_opt", "full_recompute")


class Layout:
    """A composed layout: its ranks, and the plugin's options."""

    def __init__(self, ranks, name, args, dims=()):
        self.ranks, self.name, self.args = ranks, f"{name}_on_{ranks}", args
        self.dims = set(dims)  # megatron's dimensions it composes

    @classmethod
    def megatron(cls, ranks, **dims):
        parts = [k if k in DEGREELESS else f"{k}{d}" for k, d in dims.items()]
        args = ["--plugin", "megatron", *[a for k, d in dims.items() for a in MEGATRON_DIMENSIONS[k](d)]]
        return cls(ranks, "megatron_" + "_".join(parts), args, dims)

    @classmethod
    def zero(cls, ranks, stage, ep):
        return cls(ranks, f"zero{stage}_ep{ep}", ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", stage,
                                                   "--deepspeed_zero.ep_size", ep])


COMPOSED_LAYOUTS = [
    Layout.megatron(2, ep=2),
    Layout.megatron(4, ep=2, tp=2),
    Layout.megatron(4, ep=2, tp=2, dist_opt=True),
    Layout.megatron(8, ep=2, tp=2, dist_opt=True),  # the blocks' partitions over EXPERT_DATA pairs
    Layout.megatron(4, ep=2, tp=2, sp=True),
    Layout.megatron(4, ep=2, pp=2),
    Layout.megatron(8, ep=2, pp=2, tp=2),
    Layout.megatron(2, ep=2, cp=2),
    Layout.megatron(4, cp=2, ep=2, tp=2),
    Layout.megatron(4, ep=2, dist_opt=True),
    Layout.megatron(2, ep=2, full_recompute=True),
    Layout.megatron(4, cp=2, tp=2, sp=True),
    Layout.megatron(4, cp=2, dist_opt=True),
    Layout.megatron(4, cp=2, pp=2),
    Layout.megatron(8, pp=2, tp=2, sp=True, dist_opt=True),
    Layout.zero(4, 1, 2),
    Layout.zero(4, 2, 2),
    Layout.zero(4, 3, 2),
    Layout(4, "fsdp_ep2_sharded_state_dict", ["--plugin", "fsdp", "--fsdp.ep_size", 2, "--fsdp.state_dict_type",
                                               "SHARDED_STATE_DICT"]),
]


@unittest.skipUnless(MPIRUN, "mpirun not found")
class ComposedLayouts(TempDirMixin, unittest.TestCase):
    """One generated row per composed layout (COMPOSED_LAYOUTS), beside the
    one-process run they all compare with, made once."""

    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="accel_test_")
        metrics = os.path.join(cls._shared.name, "straight.jsonl")
        run_host(*MOE_ROW, "--steps", 8, "--metrics-file", metrics)
        cls.straight = [m["loss"] for m in read_metrics(metrics)]

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def assert_close(self, expected, got, what):
        self.assertEqual(len(expected), len(got), what)
        for step, (a, b) in enumerate(zip(expected, got)):
            self.assertLess(abs(a - b) / a, 1e-5, f"{what} step {step + 1}: {a} vs {b}")

    def losses(self, metrics, first_step):
        rows = read_metrics(metrics)
        self.assertEqual([r["step"] for r in rows], list(range(first_step, 9)))
        return [r["loss"] for r in rows]

    def check_layout(self, layout):
        args = [*MOE_ROW, *layout.args]
        root, again = self.path("root"), self.path("again")
        mpirun(layout.ranks, *args, "--steps", 8, "--save", root, "--save-every", 4,
               "--metrics-file", self.path("a.jsonl"))
        own = self.losses(self.path("a.jsonl"), 1)
        self.assert_close(self.straight, own, layout.name)
        step_4 = os.path.join(root, "step_4")
        mpirun(layout.ranks, *args, "--steps", 8, "--resume", step_4, "--save", again,
               "--metrics-file", self.path("b.jsonl"))
        self.assertEqual(self.losses(self.path("b.jsonl"), 5), own[4:], f"{layout.name} resumed in its own layout")
        assert_same_safetensors(self, os.path.join(root, "step_8"), os.path.join(again, "step_8"))
        run_host(*MOE_ROW, "--steps", 8, "--resume", step_4, "--metrics-file", self.path("c.jsonl"))
        self.assert_close(self.straight[4:], self.losses(self.path("c.jsonl"), 5),
                          f"{layout.name} resumed in one process")

    def test_every_pair_of_megatron_dimensions_has_a_row(self):
        # A parallel degree megatron gains is a dimension here, and every two
        # dimensions compose in some row (full recompute is no parallelism:
        # a row of its own).
        help_text = run_host("--plugin", "megatron", "--help").stdout
        degrees = set(re.findall(r"--megatron\.([a-z]+)_degree\b", help_text))
        self.assertTrue(degrees, help_text)
        self.assertLessEqual(degrees, set(MEGATRON_DIMENSIONS))
        parallel = sorted(set(MEGATRON_DIMENSIONS) - {"full_recompute"})
        for a, b in itertools.combinations(parallel, 2):
            self.assertTrue(any({a, b} <= layout.dims for layout in COMPOSED_LAYOUTS),
                            f"no composed layout with both {a} and {b}")


def _row(layout):
    def test(self):
        self.check_layout(layout)
    test.__doc__ = f"{layout.name}: saves, resumes bit-exact in its layout and in one process on the curve"
    return test


for _layout in COMPOSED_LAYOUTS:
    setattr(ComposedLayouts, f"test_{_layout.name}_saves_and_resumes", _row(_layout))


if __name__ == "__main__":
    unittest.main()
