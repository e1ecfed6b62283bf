"""Across nodes over TCP, on one machine: two "nodes" of two ranks, each node
a network namespace with its own address on a bridge and its own hostname
(tests/multinode/netns_cluster.sh), Open MPI reaching node 1 through an rsh
agent that enters its namespace. Open MPI sees two hosts, so ranks of one
node talk shared memory and ranks of different nodes TCP, as on a cluster.

Every strategy's losses equal one process's within 1e-5 there; the bytes
that cross node 1's interface are at least the gradient volume an all-reduce
between two nodes must move, and the hierarchical all-reduce moves 1.0x the
gradients across where the flat ring moves 1.5x (also what each rank counts
it sent, by link); and HYBRID_SHARD, which shards inside a node
and replicates across nodes, moves far fewer bytes between nodes than
FULL_SHARD."""
import os
import shutil
import subprocess
import unittest

from accel_testing import ACCEL_HOST, MPIRUN, TIMEOUT_SCALE, TempDirMixin, read_metrics, run_host

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "multinode", "netns_cluster.sh")
COMMON = ["--model", "gpt-tiny", "--lr", 3e-3, "--warmup-steps", 2, "--log-level", "warn", "--threads", 1,
          "--batch-size", 8]
STEPS = 5
GRAD_BYTES = 120576 * 4  # gpt-tiny's parameters, fp32


def can_make_namespaces():
    if os.geteuid() != 0 or not MPIRUN or not shutil.which("ip") or not shutil.which("unshare"):
        return False
    probe = f"accel-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made


@unittest.skipUnless(can_make_namespaces(), "needs root, mpirun, iproute2 and unshare (network namespaces)")
class TwoNodesOfTwoRanks(TempDirMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A name and subnet of this process's own: suites run side by side.
        cls.name = f"acc{os.getpid() % 100000}"
        cls.subnet = f"10.231.{os.getpid() % 250 + 1}"
        # Registered before: a set-up that fails half-way still removes
        # the namespaces it made.
        cls.addClassCleanup(lambda: subprocess.run([CLUSTER, "down", cls.name, "2"], capture_output=True))
        subprocess.run([CLUSTER, "up", cls.name, "2", cls.subnet], check=True, capture_output=True, text=True)

    def node_tx_bytes(self, node):
        out = subprocess.run(["ip", "netns", "exec", f"{self.name}-node{node}", "cat",
                              "/sys/class/net/eth0/statistics/tx_bytes"], capture_output=True, text=True, check=True)
        return int(out.stdout)

    def across(self, *args):
        """4 ranks on 2 nodes; returns (metrics rows, bytes node 1 sent)."""
        path = self.path(f"across{len(os.listdir(self.tmp))}.jsonl")  # the metrics file appends
        before = self.node_tx_bytes(1)
        proc = subprocess.run([CLUSTER, "mpirun", self.name, "2", self.subnet, "2", "--", "-n", "4", ACCEL_HOST,
                               *map(str, COMMON), "--steps", str(STEPS), "--metrics-file", path, *map(str, args)],
                              capture_output=True, text=True, timeout=300 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, f"{args}:\n{proc.stdout}\n{proc.stderr}")
        return read_metrics(path), self.node_tx_bytes(1) - before

    def one_process(self):
        path = self.path("one.jsonl")
        run_host(*COMMON, "--steps", STEPS, "--metrics-file", path)
        return read_metrics(path)

    def assert_same_curve(self, rows, what):
        reference = self.one_process()
        self.assertEqual(len(rows), STEPS, what)
        for x, y in zip(reference, rows):
            self.assertLess(abs(x["loss"] - y["loss"]) / x["loss"], 1e-5, (what, x["step"], x["loss"], y["loss"]))

    def test_the_nodes_are_two_hosts(self):
        proc = subprocess.run([CLUSTER, "mpirun", self.name, "2", self.subnet, "2", "--", "-n", "4", "hostname"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(sorted(proc.stdout.split()), ["node0", "node0", "node1", "node1"])

    def test_ddp_equals_one_process_and_its_gradients_cross_the_wire(self):
        flat, flat_sent = self.across("--plugin", "ddp", "--comm-hierarchical-all-reduce", "false")
        self.assert_same_curve(flat, "ddp, flat ring")
        # An all-reduce between two nodes moves every element's partial sum
        # across at least once each way: node 1 sends >= the gradient bytes.
        self.assertGreaterEqual(flat_sent, STEPS * GRAD_BYTES, flat_sent)
        # Rank 0's next rank on the flat ring (0 1 2 3) is on its node: it
        # sends 2(n-1)/n of the gradients there and nothing across.
        for row in flat[1:]:
            self.assertEqual(row["host.bytes_sent_inter_node"], 0, row)
            self.assertAlmostEqual(row["host.bytes_sent_intra_node"] / GRAD_BYTES, 1.5, delta=1e-3, msg=row)

    def test_hierarchical_all_reduce_halves_what_crosses_per_rank(self):
        rows, sent = self.across("--plugin", "ddp")
        self.assert_same_curve(rows, "ddp, hierarchical all-reduce")
        # Reduce-scatter and all-gather inside the node send the gradients
        # once inside; each rank's half then crosses once each way between
        # two nodes: rank 0 sends G inside and G/2 across, where the flat
        # ring's ranks 1 and 3 send 1.5 G across (buckets of odd length
        # shift an element between the halves).
        for row in rows[1:]:
            self.assertAlmostEqual(row["host.bytes_sent_intra_node"] / GRAD_BYTES, 1.0, delta=1e-3, msg=row)
            self.assertAlmostEqual(row["host.bytes_sent_inter_node"] / GRAD_BYTES, 0.5, delta=1e-3, msg=row)
        # What node 1's interface carried: G per step against the flat
        # ring's 1.5 G (test above), plus Open MPI's framing.
        self.assertGreaterEqual(sent, STEPS * GRAD_BYTES, sent)
        self.assertLess(sent, STEPS * GRAD_BYTES * 1.25, sent)

    def test_fsdp_full_and_hybrid_shard_equal_one_process(self):
        full, full_sent = self.across("--plugin", "fsdp", "--fsdp.sharding_strategy", "FULL_SHARD")
        self.assert_same_curve(full, "FULL_SHARD")
        hybrid, hybrid_sent = self.across("--plugin", "fsdp", "--fsdp.sharding_strategy", "HYBRID_SHARD")
        self.assert_same_curve(hybrid, "HYBRID_SHARD")
        # HYBRID_SHARD's groups follow the nodes (the launcher's local world
        # size): parameters are gathered inside a node, and only the shards'
        # gradients cross. FULL_SHARD gathers across nodes in forward and
        # backward as well.
        self.assertGreaterEqual(hybrid_sent, STEPS * GRAD_BYTES / 2, hybrid_sent)
        self.assertLess(hybrid_sent * 1.5, full_sent, (hybrid_sent, full_sent))

    def test_zero3_equals_one_process(self):
        rows, _ = self.across("--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3)
        self.assert_same_curve(rows, "ZeRO-3")

    def test_megatron_tensor_and_pipeline_parallel_equal_one_process(self):
        rows, _ = self.across("--plugin", "megatron", "--megatron.tp_degree", 2)
        self.assert_same_curve(rows, "megatron tp 2 x dp 2")
        rows, _ = self.across("--plugin", "megatron", "--megatron.pp_degree", 2)
        self.assert_same_curve(rows, "megatron pp 2 x dp 2")

    def test_a_tensor_group_spanning_nodes_is_refused_unless_asked(self):
        proc = subprocess.run([CLUSTER, "mpirun", self.name, "2", self.subnet, "2", "--", "-n", "4", ACCEL_HOST,
                               *map(str, COMMON), "--steps", "1", "--plugin", "megatron", "--megatron.tp_degree",
                               "4"], capture_output=True, text=True, timeout=120 * TIMEOUT_SCALE)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        lines = [line for line in proc.stderr.splitlines() if "spans nodes" in line]
        self.assertEqual(len(lines), 4, proc.stderr)  # every rank its one line
        self.assertIn("world ranks 0-3 spans nodes 0 and 1", lines[0])
        self.assertIn("--tensor-parallel-across-nodes", lines[0])
        rows, _ = self.across("--plugin", "megatron", "--megatron.tp_degree", 4, "--tensor-parallel-across-nodes")
        self.assert_same_curve(rows, "megatron tp 4 across 2 nodes")


if __name__ == "__main__":
    unittest.main()
