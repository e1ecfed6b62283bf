"""A node lost with its memory (issue 34, snapshots across nodes): ZeRO-3 on
2 nodes of 2 ranks (tests/multinode/netns_cluster.sh: network namespaces,
each node with /dev/shm of its own), a snapshot in memory every 5 steps and
no disk checkpoint before the end; `kill -9` of a rank of node 1 once step
K's metrics line appears, node 1's memory wiped, and the job started again
on node 0 alone (2 ranks: what a supervisor does with the nodes it has
left). Node 0 holds node 1's snapshot files as copies, so the job resumes
from the snapshot instead of starting over.

    python bench/checkpoint/node_loss.py [--build build] [--kill-at 50] [--steps 60] [-- MODEL ARGS]

Prints the background write time of a snapshot on one node of 4 ranks and
across the 2 nodes (where every rank also sends its files to the other
node), the step resumed from, the seconds from the kill to the end of the
killed job, to the restarted job's "resumed" line and to its first step,
and the worst loss difference against a run that went from 4 to 2 ranks
through a checkpoint at the same step (within 1e-5). Needs root. Results:
docs/benchmarks.md, "A node lost with its memory".
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from restart_time import ENV, MODEL, ZERO3, rows_of  # noqa: E402

CLUSTER = os.path.join(ROOT, "tests", "multinode", "netns_cluster.sh")
NAME, SUBNET = f"nl{os.getpid() % 100000}", f"10.233.{os.getpid() % 250 + 1}"


def cluster_job(nodes, slots, host, job):
    return [CLUSTER, "mpirun", NAME, str(nodes), SUBNET, str(slots), "--", "-n", str(nodes * slots), host, *job]


def memory(node):
    return f"/run/accel-netns/{NAME}-node{node}"


def write_ms(rows):
    """Mean background write time of the saves these rows committed."""
    ms = [r["ckpt_write_ms"] for r in rows if r.get("ckpt_write_ms")]
    return sum(ms) / len(ms) if ms else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--kill-at", type=int, default=50)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("model", nargs="*", help="model arguments (default: " + " ".join(MODEL) + ")")
    args = parser.parse_args()
    host = os.path.join(os.path.abspath(args.build), "bin", "accel-host")
    model = args.model or MODEL
    subprocess.run([CLUSTER, "up", NAME, "2", SUBNET], check=True, capture_output=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = [*model, *ZERO3, "--lr-decay-steps", str(args.steps), "--save-every", "100000",
                    "--snapshot-every", "5", "--resume", "auto", "--log-level", "info"]

            # One node of 4 ranks: what a snapshot's background write costs without copies.
            one = os.path.join(tmp, "one.jsonl")
            subprocess.run(cluster_job(1, 4, host, [*base, "--save", os.path.join(tmp, "one"), "--steps",
                                                    "20", "--metrics-file", one]),
                           check=True, capture_output=True, env=ENV)

            save, killed = os.path.join(tmp, "save"), os.path.join(tmp, "killed.jsonl")
            job = [*base, "--save", save, "--steps", str(args.steps)]
            proc = subprocess.Popen(cluster_job(2, 2, host, [*job, "--metrics-file", killed]),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
            while not any(r["step"] >= args.kill_at for r in rows_of(killed)):
                if proc.poll() is not None:
                    sys.exit(f"the job ended before step {args.kill_at}")
                time.sleep(0.02)
            pids = subprocess.run(["ip", "netns", "pids", f"{NAME}-node1"], capture_output=True,
                                  text=True).stdout.split()
            ranks = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "accel-host"]
            os.kill(int(ranks[0]), signal.SIGKILL)
            t_kill = time.monotonic()
            proc.wait()
            t_ended = time.monotonic()
            killed_rows = rows_of(killed)
            shutil.rmtree(os.path.join(memory(1), "accel-snapshots"), ignore_errors=True)  # the node is gone

            after = os.path.join(tmp, "after.jsonl")
            restart = subprocess.Popen(cluster_job(1, 2, host, [*job, "--metrics-file", after]),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
            times = {}
            resumed_at = 0
            for line in restart.stdout:
                if "resumed from" in line and "resumed" not in times:
                    times["resumed"] = time.monotonic()
                    resumed_at = int(re.search(r"at step (\d+)", line).group(1))
                    break
            if "resumed" not in times:
                sys.exit("the restarted job resumed from nothing: " + restart.communicate()[0][-3000:])
            while not rows_of(after) and restart.poll() is None:
                time.sleep(0.02)
            times["first_step"] = time.monotonic()
            restart.communicate()
            if restart.returncode != 0:
                sys.exit(f"the restarted job failed ({restart.returncode})")

            # The reference: 4 ranks to the step resumed from, 2 from it.
            ref, ref_metrics = os.path.join(tmp, "ref"), os.path.join(tmp, "ref.jsonl")
            plain = [*model, *ZERO3, "--lr-decay-steps", str(args.steps), "--save", ref, "--metrics-file",
                     ref_metrics, "--log-level", "warn"]
            if resumed_at > 0:
                subprocess.run(["mpirun", "-n", "4", host, *plain, "--steps", str(resumed_at)], env=ENV,
                               check=True, capture_output=True)
            subprocess.run(["mpirun", "-n", "2", host, *plain, "--steps", str(args.steps),
                            *(["--resume", ref] if resumed_at > 0 else [])], env=ENV, check=True,
                           capture_output=True)
            got = {r["step"]: r["loss"] for r in rows_of(after)}
            reference = {r["step"]: r["loss"] for r in rows_of(ref_metrics) if r["step"] > resumed_at}
            worst = max(abs(got[s] - reference[s]) for s in reference)
            result = {
                "snapshot_write_ms_one_node": write_ms(rows_of(one)),
                "snapshot_write_ms_two_nodes": write_ms(killed_rows),
                "killed_after_step": killed_rows[-1]["step"], "resumed_from": resumed_at,
                "steps_lost": killed_rows[-1]["step"] - resumed_at,
                "kill_to_job_ended_s": t_ended - t_kill,
                "kill_to_resumed_s": times["resumed"] - t_kill,
                "kill_to_first_step_s": times["first_step"] - t_kill,
                "worst_loss_difference": worst, "steps_compared": len(reference),
            }
            print(json.dumps(result), file=sys.stderr)
            print("| snapshot write, 1 node x 4 (ms) | across 2 nodes x 2, with copies (ms) | killed after step | "
                  "resumed from | steps lost | kill -> job ended (s) | kill -> resumed (s) | "
                  "kill -> first step (s) | worst loss difference |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            r = result
            print(f"| {r['snapshot_write_ms_one_node']:.0f} | {r['snapshot_write_ms_two_nodes']:.0f} | "
                  f"{r['killed_after_step']} | {r['resumed_from']} | {r['steps_lost']} | "
                  f"{r['kill_to_job_ended_s']:.1f} | {r['kill_to_resumed_s']:.1f} | {r['kill_to_first_step_s']:.1f} | "
                  f"{r['worst_loss_difference']:.1e} ({r['steps_compared']} steps) |")
    finally:
        subprocess.run([CLUSTER, "down", NAME, "2"], capture_output=True)


if __name__ == "__main__":
    main()
