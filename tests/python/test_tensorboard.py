"""--tensorboard-dir: the event files accel-host writes are read back with
the `tensorboard` package itself (its EventAccumulator, which checks the
TFRecord CRCs), and hold every scalar of every step with the value the
--metrics-file line of that step holds; under ddp only rank 0 writes. A
path that is not a directory is refused before training, in one line."""
import glob
import os
import unittest

from accel_testing import MPIRUN, TempDirMixin, mpirun, read_metrics, run_host

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

COMMON = ["--model", "gpt-tiny", "--batch-size", 4, "--threads", 1, "--log-level", "warn", "--seq-len", 32]
STEPS = 5

# Scalar tag -> the metrics line's key (floats are stored as float32).
TAGS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
        "train/tokens_per_s": "tokens_per_s", "memory/peak_rss_bytes": "peak_mem_bytes",
        "comm/bytes": "comm_bytes"}


def read_scalars(directory):
    accumulator = EventAccumulator(directory, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


class TensorBoard(TempDirMixin, unittest.TestCase):
    def check_against_metrics(self, board, metrics_path):
        scalars = read_scalars(board)
        lines = read_metrics(metrics_path)
        self.assertEqual(len(lines), STEPS)
        for tag, key in TAGS.items():
            self.assertIn(tag, scalars)
            self.assertEqual([step for step, _ in scalars[tag]], list(range(1, STEPS + 1)), tag)
            for (step, value), line in zip(scalars[tag], lines):
                self.assertClose(value, line[key], f"{tag} at {step}")
        # Plugin metrics ("PLUGIN.name" keys) may come at some steps only.
        for line in lines:
            for key in (k for k in line if "." in k):
                by_step = dict(scalars.get(f"plugins/{key}", []))
                self.assertIn(line["step"], by_step, key)
                self.assertClose(by_step[line["step"]], line[key], f"{key} at {line['step']}")
        return scalars

    def assertClose(self, value, expected, msg):  # the events hold float32
        self.assertAlmostEqual(value, float(expected), delta=abs(float(expected)) * 1e-6 + 1e-30, msg=msg)

    def test_every_scalar_of_every_step_reads_back(self):
        board, metrics = self.path("tb"), self.path("m.jsonl")
        run_host(*COMMON, "--steps", STEPS, "--tensorboard-dir", board, "--metrics-file", metrics)
        self.assertEqual(len(glob.glob(os.path.join(board, "events.out.tfevents.*"))), 1)
        scalars = self.check_against_metrics(board, metrics)
        self.assertNotIn("train/loss_scale", scalars)  # fp32: no scaler

    def test_fp16_loss_scale_is_a_scalar(self):
        board, metrics = self.path("tb"), self.path("m.jsonl")
        run_host(*COMMON, "--steps", STEPS, "--mixed-precision", "fp16", "--tensorboard-dir", board,
                 "--metrics-file", metrics)
        scalars = read_scalars(board)
        self.assertEqual([v for _, v in scalars["train/loss_scale"]],
                         [line["loss_scale"] for line in read_metrics(metrics)])

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_under_ddp_rank_zero_writes_plugin_metrics_too(self):
        board, metrics = self.path("tb"), self.path("m.jsonl")
        mpirun(2, *COMMON, "--steps", STEPS, "--plugin", "ddp", "--tensorboard-dir", board, "--metrics-file", metrics)
        self.assertEqual(len(glob.glob(os.path.join(board, "events.out.tfevents.*"))), 1)
        scalars = self.check_against_metrics(board, metrics)
        self.assertTrue([t for t in scalars if t.startswith("plugins/ddp.")], sorted(scalars))

    def test_a_file_in_place_of_the_directory_is_refused(self):
        not_a_dir = self.path("plain")
        open(not_a_dir, "w").close()
        proc = run_host(*COMMON, "--steps", 1, "--tensorboard-dir", not_a_dir, check=False)
        self.assertNotEqual(proc.returncode, 0)
        errors = [l for l in proc.stderr.splitlines() if "[error]" in l]
        self.assertEqual(len(errors), 1, proc.stderr)
        self.assertIn(f"--tensorboard-dir: '{not_a_dir}' is not a directory", errors[0])


if __name__ == "__main__":
    unittest.main()
