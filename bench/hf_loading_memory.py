#!/usr/bin/env python3
"""Peak resident memory per rank while accel-host starts from a Hugging Face
directory (--init-from hf:DIR), issue 30's proof that each rank reads only
the slices it keeps: fsdp with cpu_ram_efficient_loading and ZeRO-3 with
zero3_init_flag (its default) at 1, 2 and 4 ranks, plus one process without
a plugin. The run stops after start-up (--steps 0, no save), so the
kernel's peak RSS (/usr/bin/time %M around every rank; the largest rank is
reported) is the loading peak: the runtime and libraries, the strategy's
own state (fp32 AdamW: 16 bytes per parameter over N ranks), and whatever
loading holds on top. Beside it: the same run initialised from the seed
(no file: the floor loading can reach) and rank 0's "this rank read N of M
bytes" line, the loader's own count.

  .venv/bin/python bench/hf_loading_memory.py [--build BUILD] [--baseline OLD_BUILD] [--ranks 1,2,4]
        [--dtype float32|bfloat16] [--hf-dir DIR]

--baseline runs the same rows with another build's accel-host (e.g. one of
the commit before, which read the whole checkpoint as fp32 on every rank)
for the "before" column. The HF directory is gpt-small's shape (GPT-2 124M:
12 layers, 768 wide, 1024 positions, 50257 tokens) with random weights,
made once with the venv's transformers under --hf-dir (default: a
temporary directory); one repeat per row (RSS does not depend on load).
"""
import argparse
import os
import re
import sys
import tempfile

from rank_rss import mib, run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = {
    "no plugin": [],
    "fsdp cpu_ram_efficient_loading": ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap",
                                       "--fsdp.sync_module_states", "true", "--fsdp.cpu_ram_efficient_loading",
                                       "true"],
    "ZeRO-3 zero3_init_flag": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", "3"],
}
LOADED = re.compile(r"this rank read (\d+) of the (\d+) bytes")

def make_hf_dir(path, dtype):
    """gpt-small as a transformers save_pretrained directory (random weights)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # GPT-2 124M's shape
    model = transformers.GPT2LMHeadModel(config).to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True)


def run(build, ranks, args, workdir):
    """Per-rank peak RSS (bytes) and rank 0's (read, stored) line, if any."""
    rss, done = run_ranks(build, ranks, ["--data", "synthetic", "--steps", "0", "--batch-size", "4", "--threads", "1",
                                         "--log-level", "info"] + args, workdir)
    found = LOADED.search(done.stdout + done.stderr)
    return rss, (int(found[1]), int(found[2])) if found else None


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--baseline", help="another build's directory, for the 'before' column")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--hf-dir")
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="accel-hf-loading-")
    hf_dir = a.hf_dir or os.path.join(work, "gpt-small-hf")
    make_hf_dir(hf_dir, a.dtype)
    size = sum(os.path.getsize(os.path.join(hf_dir, f)) for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
    print(f"hf:{hf_dir} ({a.dtype}, {mib(size)} MiB of safetensors); accel-host --init-from hf:DIR --data synthetic "
          f"--steps 0 --batch-size 4 --threads 1; load average {os.getloadavg()[0]:.1f}")
    print()
    before = " before (MiB) |" if a.baseline else ""
    print(f"| ranks | strategy | seeded, no file (MiB) |{before} hf:DIR (MiB) | hf:DIR less seeded (MiB) | "
          "rank 0 read (MiB) |")
    print("|---:|---|---:|" + ("---:|" if a.baseline else "") + "---:|---:|---:|")
    for ranks in [int(r) for r in a.ranks.split(",")]:
        for name in a.strategies.split(","):
            if name == "no plugin" and ranks != 1:
                continue  # every rank would hold the whole model: not a sharded row
            seeded, _ = run(a.build, ranks, ["--model", "gpt-small", "--seq-len", "1024"] + STRATEGIES[name], work)
            loaded, count = run(a.build, ranks, ["--init-from", "hf:" + hf_dir] + STRATEGIES[name], work)
            cells = [str(ranks), name, mib(max(seeded))]
            if a.baseline:
                old, _ = run(a.baseline, ranks, ["--init-from", "hf:" + hf_dir] + STRATEGIES[name], work)
                cells.append(mib(max(old)))
            cells += [mib(max(loaded)), mib(max(loaded) - max(seeded)),
                      f"{mib(count[0])} of {mib(count[1])}" if count else "n/a"]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
