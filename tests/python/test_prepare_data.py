"""scripts/prepare_data.py: text files through a tokenizer the test builds
(the `tokenizers` package, nothing from a hub) become llm.c token files that
hold exactly the tokenizer's ids, documents separated by the end-of-text
token; a vocabulary beyond 65536 gives uint32 files; accel-host trains and
evaluates on them, and refuses ids its vocabulary cannot embed in one line;
the eos token a model directory names is the separator."""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

from accel_testing import TempDirMixin, error_lines, read_metrics, run_host

try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:  # requirements-tools.txt installs it (with transformers); say so rather than pass
    Tokenizer = None

SCRIPT = os.path.join(os.path.dirname(__file__), "../../scripts/prepare_data.py")
WORDS = "the of and to in is was for on that with as by at from his her an which were but not".split()


def prose(seed, words):
    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(WORDS, size=12)) + "." for _ in range(words // 12)]
    return "\n".join(lines) + "\n"


def read_llmc(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    magic, version, count = (int(v) for v in header[:3])
    dtype = {20240520: "<u2", 20240801: "<u4"}[magic]
    tokens = np.fromfile(path, dtype=dtype, offset=1024)
    return magic, version, count, tokens.astype(np.int64)


@unittest.skipUnless(Tokenizer, "the tokenizers package is not installed (requirements-tools.txt)")
class PrepareData(TempDirMixin, unittest.TestCase):
    def prepare(self, *args, check=True):
        proc = subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(proc.stderr)
        return proc

    def documents(self, count=3, words=3000):
        paths = []
        for i in range(count):
            paths.append(self.path(f"doc{i}.txt"))
            with open(paths[-1], "w") as f:
                f.write(prose(i, words))
        return paths

    def byte_level_bpe(self, vocab=300, special=("<|endoftext|>",)):
        """A GPT-2-style byte-level BPE, trained here on the documents' words."""
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(special),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator([prose(s, 2000) for s in range(5)], trainer)
        directory = self.path("bpe")
        os.makedirs(directory)
        tokenizer.save(os.path.join(directory, "tokenizer.json"))
        return tokenizer, directory

    def test_gpt2_style_tokens_are_the_tokenizers_ids_and_accel_host_trains_on_them(self):
        tokenizer, directory = self.byte_level_bpe()
        docs = self.documents()
        out = self.path("out")
        self.prepare("--tokenizer", directory, "--out", out, "--val-fraction", 0.2, *docs)
        eot = tokenizer.token_to_id("<|endoftext|>")
        expected = []
        for path in docs:
            with open(path) as f:
                expected += [eot] + tokenizer.encode(f.read(), add_special_tokens=False).ids
        train, val = read_llmc(os.path.join(out, "train.bin")), read_llmc(os.path.join(out, "val.bin"))
        self.assertEqual(train[:2], (20240520, 1))
        self.assertEqual(val[:2], (20240520, 1))
        self.assertEqual(train[2], len(train[3]))
        self.assertEqual(len(val[3]), int(len(expected) * 0.2))
        self.assertEqual(list(train[3]) + list(val[3]), expected)
        self.assertEqual(sorted(os.listdir(out)), ["train.bin", "val.bin"])  # nothing partial left

        metrics = self.path("m.jsonl")
        run_host("--model", "gpt-tiny", "--vocab-size", tokenizer.get_vocab_size(), "--seq-len", 32,
                 "--batch-size", 4, "--steps", 4, "--threads", 1, "--log-level", "warn",
                 "--data", "tokens:" + os.path.join(out, "train.bin"), "--eval-every", 2, "--eval-steps", 2,
                 "--eval-data", "tokens:" + os.path.join(out, "val.bin"), "--metrics-file", metrics)
        self.assertEqual([l["step"] for l in read_metrics(metrics) if "eval_loss" in l], [2, 4])

    def first_tokens(self, directory, docs, *args):
        out = self.path("out")
        self.prepare("--tokenizer", directory, "--out", out, "--val-fraction", 0, *args, *docs)
        return list(read_llmc(os.path.join(out, "train.bin"))[3][:1])

    def test_the_eos_token_the_model_directory_names_separates_documents(self):
        tokenizer, directory = self.byte_level_bpe(special=["<|endoftext|>", "<eos>", "</s>"])
        docs = self.documents(count=1, words=100)
        eos, end_of_text, s = (tokenizer.token_to_id(t) for t in ("<eos>", "<|endoftext|>", "</s>"))
        self.assertEqual(self.first_tokens(directory, docs), [end_of_text])  # no config: the candidates
        config = os.path.join(directory, "config.json")
        with open(config, "w") as f:
            json.dump({"model_type": "mistral", "eos_token_id": [s, eos]}, f)
        self.assertEqual(self.first_tokens(directory, docs), [s])  # config.json's eos_token_id (a list's first)
        tokenizer_config = os.path.join(directory, "tokenizer_config.json")
        for eos_token in ("<eos>", {"content": "<eos>", "special": True, "__type": "AddedToken"}):
            with self.subTest(eos_token=eos_token):
                with open(tokenizer_config, "w") as f:
                    json.dump({"eos_token": eos_token, "bos_token": "<|endoftext|>"}, f)
                self.assertEqual(self.first_tokens(directory, docs), [eos])  # Gemma's <eos> before config.json's
                self.assertEqual(self.first_tokens(directory, docs, "--eot", "</s>"), [s])  # --eot still wins
        with open(tokenizer_config, "w") as f:
            json.dump({"eos_token": "<|im_end|>"}, f)
        self.one_line_refusal(("--tokenizer", directory, "--out", self.path("o"), *docs),
                              "names the eos_token '<|im_end|>', which is not in the tokenizer's vocabulary")
        os.remove(tokenizer_config)
        with open(config, "w") as f:
            json.dump({"eos_token_id": 100_000}, f)
        self.one_line_refusal(("--tokenizer", directory, "--out", self.path("o"), *docs),
                              "eos_token_id 100000 is not an id of the tokenizer")

    def test_a_vocabulary_beyond_65536_writes_uint32_that_accel_host_reads(self):
        vocab = {"<|endoftext|>": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, 70_000)}}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer_file = self.path("words.json")
        tokenizer.save(tokenizer_file)
        rng = np.random.default_rng(0)
        ids = rng.integers(2, 70_000, size=3000)
        ids[:3] = (65_535, 65_536, 69_999)  # either side of the uint16 limit
        text = self.path("words.txt")
        with open(text, "w") as f:
            f.write(" ".join(f"w{i}" for i in ids))
        out = self.path("out")
        self.prepare("--tokenizer", tokenizer_file, "--out", out, "--val-fraction", 0, text)
        magic, version, count, tokens = read_llmc(os.path.join(out, "train.bin"))
        self.assertEqual((magic, version, count), (20240801, 7, len(ids) + 1))
        self.assertEqual(list(tokens), [0, *ids])
        self.assertEqual(os.listdir(out), ["train.bin"])

        common = ["--model", "gpt-tiny", "--n-embd", 32, "--seq-len", 32, "--batch-size", 4, "--steps", 1,
                  "--threads", 1, "--log-level", "warn", "--data", "tokens:" + os.path.join(out, "train.bin")]
        run_host(*common, "--vocab-size", 70_000)
        proc = run_host(*common, "--vocab-size", 65_536, check=False)
        self.assertNotEqual(proc.returncode, 0)
        errors = error_lines(proc.stderr)
        self.assertEqual(len(errors), 1, proc.stderr)
        self.assertIn("contains token id 69999 but the model's vocab_size is 65536", errors[0])

    def test_bad_input_is_one_line_and_exit_2(self):
        _, directory = self.byte_level_bpe()
        docs = self.documents(count=1, words=100)
        cases = {
            ("--tokenizer", directory, "--out", self.path("o"), self.path("missing.txt")):
                f"cannot read '{self.path('missing.txt')}'",
            ("--tokenizer", self.tmp, "--out", self.path("o"), *docs): "--tokenizer: no tokenizer.json at",
            ("--tokenizer", docs[0], "--out", self.path("o"), *docs): "--tokenizer: cannot read",
            ("--tokenizer", directory, "--eot", "<eos>", "--out", self.path("o"), *docs):
                "--eot: '<eos>' is not in the tokenizer's vocabulary",
            ("--tokenizer", directory, "--val-fraction", 1.5, "--out", self.path("o"), *docs):
                "--val-fraction must be in [0, 1), got 1.5",
        }
        for args, message in cases.items():
            with self.subTest(args=args):
                proc = self.prepare(*args, check=False)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                lines = proc.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertIn(message, lines[0])
        self.assertFalse(os.path.exists(self.path("o")) and os.listdir(self.path("o")))

    def one_line_refusal(self, args, message):
        proc = self.prepare(*args, check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(message, lines[0])

    def test_an_unwritable_out_is_one_line_and_exit_2(self):
        # A path under a regular file cannot be made a directory, root or not.
        _, directory = self.byte_level_bpe()
        docs = self.documents(count=1, words=100)
        blocker = self.path("a_file")
        with open(blocker, "w") as f:
            f.write("x")
        for out in (blocker, os.path.join(blocker, "sub")):
            with self.subTest(out=out):
                self.one_line_refusal(("--tokenizer", directory, "--out", out, *docs), f"--out: cannot write '{out}")

    def test_an_empty_token_stream_is_refused(self):
        _, directory = self.byte_level_bpe()
        empty = self.path("empty.txt")
        open(empty, "w").close()
        out = self.path("o")
        self.one_line_refusal(("--tokenizer", directory, "--eot", "none", "--val-fraction", 0, "--out", out, empty),
                              "no tokens")
        self.assertFalse(os.path.exists(os.path.join(out, "train.bin")))


if __name__ == "__main__":
    unittest.main()
