"""Nothing in a Hugging Face config.json is dropped without a word: for every
model_type accel-host supports (asked of accel-host itself, so a new bridge
is walked without editing this file), a small model of transformers' config
class is saved with every key the class has (to_dict, not save_pretrained's
diff against the defaults) and trained one step. Each key must be read by
the family's bridge or be on the list of keys that cannot change training
(host/checkpoint/bridges/inert_keys.cpp): accel-host names any other one in
a warning, which fails the walk."""
import json
import os
import re
import unittest

import torch
import transformers

from accel_testing import TempDirMixin, run_host, write_tokens

# The tiny shape, for whichever of these keys a config class has.
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=32,
            # GPT-2's names
            n_positions=32, n_embd=64, n_layer=2, n_head=4,
            # mixtures of experts
            num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            # Gemma's softmax scale follows head_dim
            query_pre_attn_scalar=16,
            # token ids inside the tiny vocabulary (inert keys either way)
            pad_token_id=None, bos_token_id=None, eos_token_id=None)


class EveryConfigKeyIsReadOrInert(TempDirMixin, unittest.TestCase):
    def model_types(self):
        bogus = self.path("bogus")
        os.makedirs(bogus)
        with open(os.path.join(bogus, "config.json"), "w") as f:
            json.dump({"model_type": "no-such-family"}, f)
        proc = run_host("--init-from", "hf:" + bogus, "--steps", 1, check=False)
        found = re.search(r"supported: ([a-z0-9_, ]+)\)", proc.stderr)
        self.assertIsNotNone(found, proc.stderr)
        return [t.strip() for t in found.group(1).split(",")]

    def save_full(self, model_type):
        defaults = transformers.AutoConfig.for_model(model_type).to_dict()
        config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in TINY.items() if k in defaults})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
        out = self.path(model_type)
        model.save_pretrained(out, safe_serialization=True)
        every_key = config.to_dict()
        self.assertTrue(set(defaults) <= set(every_key), set(defaults) - set(every_key))
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(every_key, f)
        return out

    def test_every_key_of_each_family_is_read_or_inert(self):
        tokens = self.path("tokens.bin")
        write_tokens(tokens, 4096, TINY["vocab_size"])
        types = self.model_types()
        self.assertIn("llama", types)
        for model_type in types:
            with self.subTest(model_type=model_type):
                hf = self.save_full(model_type)
                proc = run_host("--init-from", "hf:" + hf, "--data", "tokens:" + tokens, "--steps", 1,
                                "--batch-size", 2, "--threads", 1, check=False)
                self.assertEqual(proc.returncode, 0, proc.stderr[-1500:])
                unread = [line for line in proc.stderr.splitlines() if "does not read" in line]
                self.assertEqual(unread, [])

    def test_a_key_no_bridge_reads_is_named(self):
        tokens = self.path("tokens.bin")
        write_tokens(tokens, 4096, TINY["vocab_size"])
        hf = self.save_full("llama")
        with open(os.path.join(hf, "config.json")) as f:
            config = json.load(f)
        config["rope_interleaved"] = True
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump(config, f)
        proc = run_host("--init-from", "hf:" + hf, "--data", "tokens:" + tokens, "--steps", 1, "--batch-size", 2,
                        "--threads", 1, check=False)
        self.assertEqual(proc.returncode, 0, proc.stderr[-1500:])
        self.assertIn("\"rope_interleaved\", a key accel-host's Llama bridge does not read", proc.stderr)


if __name__ == "__main__":
    unittest.main()
