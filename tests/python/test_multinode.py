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
FULL_SHARD. Snapshots live in each node's own /dev/shm with a copy of each
rank's files on the other node, so a node lost with its memory costs no
steps: a restart on a fresh node copies them back, and one on the surviving
node alone resumes at the smaller world size."""
import glob
import json
import os
import shutil
import signal
import subprocess
import time
import unittest
from pathlib import Path

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


def start_two_nodes(cls, prefix, network):
    """Brings up a 2-node cluster for test class `cls` (cls.name, cls.subnet),
    taken down when the class ends."""
    # A name and subnet of this process's own: suites run side by side.
    cls.name = f"{prefix}{os.getpid() % 100000}"
    cls.subnet = f"10.{network}.{os.getpid() % 250 + 1}"
    # Registered before: a set-up that fails half-way still removes the
    # namespaces it made.
    cls.addClassCleanup(lambda: subprocess.run([CLUSTER, "down", cls.name, "2"], capture_output=True))
    subprocess.run([CLUSTER, "up", cls.name, "2", cls.subnet], check=True, capture_output=True, text=True)


@unittest.skipUnless(can_make_namespaces(), "needs root, mpirun, iproute2 and unshare (network namespaces)")
class TwoNodesOfTwoRanks(TempDirMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_two_nodes(cls, "acc", 231)

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


@unittest.skipUnless(can_make_namespaces(), "needs root, mpirun, iproute2 and unshare (network namespaces)")
class SnapshotsAcrossNodes(TempDirMixin, unittest.TestCase):
    """--snapshot-every on 2 nodes of 2 ranks, each node with /dev/shm of
    its own (netns_cluster.sh): one rank of node 1 is killed, node 1's
    memory wiped as a lost node's would be, and the job restarted."""

    # Info lines: the resume says what it took.
    JOB = [*(str(a) if a != "warn" else "info" for a in COMMON), "--lr-schedule", "constant", "--plugin", "fsdp",
           "--fsdp.state_dict_type", "SHARDED_STATE_DICT", "--snapshot-every", "4", "--resume", "auto"]

    @classmethod
    def setUpClass(cls):
        start_two_nodes(cls, "acs", 232)

    def memory(self, node):
        """Node `node`'s /dev/shm, as this machine sees it."""
        return f"/run/accel-netns/{self.name}-node{node}"

    def snapshots(self, node):
        """The committed snapshot directories in node `node`'s memory."""
        return sorted(glob.glob(os.path.join(self.memory(node), "accel-snapshots", "*", "step_*[0-9]")))

    def job(self, nodes, steps, metrics, *args):
        return [CLUSTER, "mpirun", self.name, str(nodes), self.subnet, "2", "--", "-n", str(2 * nodes), ACCEL_HOST,
                *self.JOB, "--save", self.path("save"), "--steps", str(steps), "--metrics-file", metrics, *args]

    def kill_a_rank_of_node1_after(self, metrics, rows):
        proc = subprocess.Popen(self.job(2, 100000, metrics), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            deadline = time.monotonic() + 120 * TIMEOUT_SCALE
            while time.monotonic() < deadline and proc.poll() is None:
                if (os.path.exists(metrics) and len(read_metrics(metrics)) >= rows and self.snapshots(0)
                        and self.snapshots(1)):
                    break
                time.sleep(0.02)
            pids = subprocess.run(["ip", "netns", "pids", f"{self.name}-node1"], capture_output=True,
                                  text=True).stdout.split()
            ranks = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "accel-host"]
            self.assertTrue(ranks, "no rank of node 1 to kill")
            os.kill(int(ranks[0]), signal.SIGKILL)
            out, _ = proc.communicate(timeout=60 * TIMEOUT_SCALE)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertNotEqual(proc.returncode, 0, out[-2000:])
        return read_metrics(metrics)

    def test_a_lost_nodes_snapshot_comes_back_from_its_peer_at_either_world_size(self):
        killed = {row["step"]: row["loss"] for row in self.kill_a_rank_of_node1_after(self.path("killed.jsonl"), 20)}
        # Each node's newest snapshot holds all four ranks' files: its own
        # ranks' and, copied while training, the other node's.
        newest = self.snapshots(0)[-1]
        step = int(newest.rsplit("_", 1)[1])
        for node in (0, 1):
            held = self.snapshots(node)[-1]
            self.assertEqual(os.path.basename(held), os.path.basename(newest))
            with open(os.path.join(held, "manifest.json")) as f:
                files = {e["file"] for e in json.load(f)["files"]}
            self.assertLessEqual({f"plugin_state.rank{r}.safetensors" for r in (1, 2, 3)}, files, (node, files))
        self.assertIn(step + 1, killed)
        kept = os.path.join(self.tmp, "node0-memory")
        shutil.copytree(os.path.join(self.memory(0), "accel-snapshots"), kept, symlinks=True)

        # Node 1 replaced by a machine with empty memory: its ranks' files
        # come back from node 0, and the run goes on from the snapshot,
        # to the bit, at the same world size.
        shutil.rmtree(os.path.join(self.memory(1), "accel-snapshots"))
        proc = subprocess.run(self.job(2, step + 6, self.path("same.jsonl")), capture_output=True, text=True,
                              timeout=120 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertIn(f"the snapshot step_{step} made whole on every node", proc.stdout + proc.stderr)
        self.assertIn(f"resumed from /dev/shm/accel-snapshots/", proc.stdout + proc.stderr)
        same = read_metrics(self.path("same.jsonl"))
        self.assertEqual(same[0]["step"], step + 1)
        for row in same:
            if row["step"] in killed:
                self.assertEqual(row["loss"], killed[row["step"]], row["step"])

        # Node 1 gone for good: node 0 alone holds every file (its own and
        # node 1's copies) and carries on at 2 ranks, within 1e-5. (The run
        # above ended with a checkpoint on disk, newer than the snapshot.)
        # Its checkpoints go, not the job: accel-job.json stays, naming the
        # run the snapshot belongs to (snapshot_root.h).
        for name in os.listdir(self.path("save")):
            if name.startswith("step_"):
                shutil.rmtree(os.path.join(self.path("save"), name))
        shutil.rmtree(os.path.join(self.memory(0), "accel-snapshots"))
        shutil.copytree(kept, os.path.join(self.memory(0), "accel-snapshots"), symlinks=True)
        proc = subprocess.run(self.job(1, step + 6, self.path("smaller.jsonl")), capture_output=True, text=True,
                              timeout=120 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        self.assertIn(f"the snapshot step_{step} in /dev/shm/", proc.stdout + proc.stderr)
        smaller = read_metrics(self.path("smaller.jsonl"))
        self.assertEqual(smaller[0]["step"], step + 1)
        for row in smaller:
            if row["step"] in killed:
                self.assertLess(abs(row["loss"] - killed[row["step"]]) / killed[row["step"]], 1e-5, row["step"])

    def test_a_snapshot_dir_both_nodes_share_is_refused(self):
        proc = subprocess.run(self.job(2, 2, self.path("m.jsonl"), "--snapshot-dir", self.path("shared")),
                              capture_output=True, text=True, timeout=120 * TIMEOUT_SCALE)
        self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
        lines = [line for line in proc.stderr.splitlines() if "is one directory for several nodes" in line]
        self.assertEqual(len(lines), 4, proc.stderr[-3000:])  # every rank its one line
