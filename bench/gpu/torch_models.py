"""The PyTorch contenders of bench/gpu/run.sh, one per process, on the same
shapes and card as accel-host: prints one JSON line.

  --impl reference     tests/python/gpt_reference.py's GPT-2 (tanh GELU, tied
                       head, SDPA), the model accel-host's CPU parity tests use
  --impl transformers  transformers' GPT2LMHeadModel / LlamaForCausalLM (SDPA)
  --compile            the same model under torch.compile (default mode)

One step: zero_grad, forward + loss under bf16 autocast (fp32 masters),
backward, clip to 1.0, fused AdamW (decay 0.1 on matrices only), read the
loss. tokens_per_s is the median over the timed steps (each step's loss read
synchronises, as accel-host's does); the warm-up steps (compilation
included) are untimed. Memory: torch.cuda.max_memory_allocated / reserved
over the timed steps, after the warm-up.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
from report import SHAPES  # noqa: E402  (bench/gpu/report.py, beside this file)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", choices=["reference", "transformers"], required=True)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True, help="report.py's SHAPES")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--baseline", action="store_true", help="the eager run others are compared with")
    for name, default in [("batch-size", 16), ("steps", 20), ("warmup-steps", 5)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--label", default="")
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script without a GPU")
    a = p.parse_args(argv)
    s = SHAPES[a.shape]
    a.family, a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size = s["family"], s["L"], s["H"], s["C"], s["T"], s["V"]
    a.n_kv_head, a.ffn_size = s.get("KV", s["H"]), s.get("F", 4 * s["C"])
    a.n_experts, a.experts_per_token = s.get("E", 0), s.get("K", 0)
    return a


def build(a):
    if a.impl == "reference":
        if a.family != "gpt":
            raise SystemExit("--impl reference is GPT-2 only; use --impl transformers for llama")
        import gpt_reference as ref
        model = ref.GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
        with torch.no_grad():  # GPT-2's init, as accel-host's: normal(0, 0.02) matrices, zero biases
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.02)
                elif not name.split(".")[-2].startswith("ln_"):
                    p.zero_()
        return model, "loss_fn"
    import transformers
    if a.family == "gpt":
        cfg = transformers.GPT2Config(vocab_size=a.vocab_size, n_positions=a.seq_len, n_embd=a.n_embd,
                                      n_layer=a.n_layer, n_head=a.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, attn_implementation="sdpa")
        return transformers.GPT2LMHeadModel(cfg), "hf"
    if a.family == "moe":  # MixtralForCausalLM: the llama shape with experts (router_jitter 0, no sliding window)
        cfg = transformers.MixtralConfig(vocab_size=a.vocab_size, hidden_size=a.n_embd, intermediate_size=a.ffn_size,
                                         num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                                         num_key_value_heads=a.n_kv_head, max_position_embeddings=a.seq_len,
                                         num_local_experts=a.n_experts, num_experts_per_tok=a.experts_per_token,
                                         rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="sdpa",
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        return transformers.MixtralForCausalLM(cfg), "hf"
    cfg = transformers.LlamaConfig(vocab_size=a.vocab_size, hidden_size=a.n_embd, intermediate_size=a.ffn_size,
                                   num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                                   num_key_value_heads=a.n_kv_head, max_position_embeddings=a.seq_len,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                                   attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg), "hf"


def main(argv):
    a = parse_args(argv)
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model, kind = build(a)
    model = model.to(dev)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)

    def loss_of(x, y):
        if kind == "hf":
            logits = model(input_ids=x).logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        return model(x, y)

    step_fn = torch.compile(loss_of) if a.compile else loss_of
    batches = [torch.randint(0, a.vocab_size, (a.batch_size, a.seq_len + 1), device=dev)
               for _ in range(a.warmup_steps + a.steps)]
    times, losses = [], []
    for i, b in enumerate(batches):
        if i == a.warmup_steps and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = step_fn(b[:, :-1], b[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if i >= a.warmup_steps:
            times.append(time.perf_counter() - start)
    tokens = a.batch_size * a.seq_len
    print(json.dumps({"label": a.label, "impl": a.impl, "compiled": a.compile, "shape": a.shape,
                      "eager_baseline": a.baseline,
                      "params": params, "tokens_per_s": tokens / statistics.median(times),
                      "ms_per_step": 1e3 * statistics.median(times), "final_loss": losses[-1],
                      "device_peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
                      "device_peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else 0,
                      "device": torch.cuda.get_device_name() if cuda else "cpu"}))


if __name__ == "__main__":
    main(sys.argv[1:])
