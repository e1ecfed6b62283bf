"""The arithmetic of bench/scaling/scaling_model.py: the alpha-beta fit
recovers the link it was given, the ring costs follow the ring's step
counts, buckets fill as DDP's do, and the hierarchical all-reduce moves less
across nodes than the flat ring on a slow inter-node link. The model's fit
to measured steps is in docs/benchmarks.md ("Scaling model")."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "scaling"))
import scaling_model as sm  # noqa: E402

LINK = {"alpha_s": 5e-6, "beta_s_per_byte": 1 / 2e9}


class ScalingModel(unittest.TestCase):
    def test_the_fit_recovers_a_known_link(self):
        n = 4
        ops = {op: [(size, sm.ring(op, size, n, LINK)) for size in (1 << 18, 1 << 20, 1 << 22, 1 << 24)]
               for op in sm.OPS}
        fit = sm.fit_alpha_beta({"ranks": n, "ops": ops})
        self.assertAlmostEqual(fit["alpha_s"], LINK["alpha_s"], delta=1e-9)
        self.assertAlmostEqual(fit["beta_s_per_byte"] * 2e9, 1.0, delta=1e-9)

    def test_ring_costs(self):
        s = 8 << 20
        self.assertEqual(sm.ring("all_reduce", s, 1, LINK), 0.0)
        self.assertAlmostEqual(sm.ring("all_reduce", s, 8, LINK), 14 * (5e-6 + s / 8 / 2e9))
        self.assertAlmostEqual(sm.ring("all_gather", s, 8, LINK), 7 * (5e-6 + s / 8 / 2e9))

    def test_buckets_fill_up_to_the_cap(self):
        self.assertEqual(sm.split_buckets([10, 10, 10, 30, 5], 25), [20, 10, 30, 5])

    def test_hierarchical_all_reduce_beats_the_flat_ring_on_a_slow_network(self):
        fast, slow = {"alpha_s": 1e-6, "beta_s_per_byte": 1 / 100e9}, {"alpha_s": 20e-6, "beta_s_per_byte": 1 / 10e9}
        units = sm.gpt_units(12, 768, 50257)
        args = ("ddp", units, 4096, 768, 12, 64, 8, fast, slow)
        self.assertLess(sm.comm_seconds(*args, hierarchical=True), sm.comm_seconds(*args, hierarchical=False) / 4)

    def test_gpt_small_is_within_one_percent_of_its_124_million_parameters(self):
        # The units leave out position embeddings, biases and norms (0.7%).
        self.assertAlmostEqual(sum(sm.gpt_units(12, 768, 50257)) / 124.44e6, 1.0, delta=0.01)


if __name__ == "__main__":
    unittest.main()
