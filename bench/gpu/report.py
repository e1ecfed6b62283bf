"""bench/gpu/run.sh's bookkeeping: turns accel-host's metrics files into the
same JSON lines torch_models.py prints, compares runs, counts a trace's host
synchronisations, and prints the final table.

  report.py accel --label L --shape S --metrics F --rc N [--warmup W]
  report.py parity --label L A.jsonl B.jsonl      (loss and grad-norm gaps per step)
  report.py curves --label L BF16.jsonl FP8.jsonl  (loss gap relative to the first run's loss)
  report.py syncs --label L TRACE.json             (aten::_local_scalar_dense and DtoH copies per recorded step)
  report.py table RESULTS.jsonl
"""
import argparse
import json
import statistics
import sys

# The shapes the benchmark runs (accel-host presets and overrides).
SHAPES = {
    "gpt-tiny": dict(family="gpt", L=2, H=4, C=64, T=64, V=256),
    "gpt-small": dict(family="gpt", L=12, H=12, C=768, T=1024, V=50257),
    "llama-small": dict(family="llama", L=8, H=12, KV=4, C=768, F=2048, T=1024, V=32000),
    # Where FP8 pays: GEMMs of k, n in 2048..8192 dominate the step (the
    # vocabulary head and attention are a small share), as in the issue's
    # _scaled_mm measurement.
    "llama-wide": dict(family="llama", L=4, H=16, KV=4, C=2048, F=8192, T=1024, V=32000),
    # A mixture of experts (Mixtral's block): llama-small's attention, 8
    # experts of width 1024, each token through 2 of them.
    "moe-small": dict(family="moe", L=8, H=12, KV=4, C=768, F=1024, T=1024, V=32000, E=8, K=2),
}
DENSE_BF16_PEAK = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}


def parameters(s, active=False):
    """Parameters of a shape; `active`: those one token's forward uses (a
    mixture of experts' K of E experts, and its router)."""
    L, C, V, T = s["L"], s["C"], s["V"], s["T"]
    if s["family"] == "gpt":  # tied head, learned positions, biases, two LayerNorms per block
        return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    kv = C * s["KV"] // s["H"]
    experts = (s["K"] if active else s["E"]) if s["family"] == "moe" else 1
    router = s["E"] * C if s["family"] == "moe" else 0
    return 2 * V * C + L * (2 * C * C + 2 * C * kv + experts * 3 * C * s["F"] + router + 2 * C) + C


def flops_per_token(s):
    return 6 * parameters(s, active=True) + 12 * s["L"] * s["T"] * s["C"]


def peak_of(device):
    for name, peak in DENSE_BF16_PEAK.items():
        if name in (device or ""):
            return peak
    return None


def accel(a):
    row = {"label": a.label, "impl": "accel-host", "shape": a.shape, "rc": a.rc}
    try:
        lines = [json.loads(l) for l in open(a.metrics) if l.strip()]
    except OSError:
        lines = []
    if not lines:
        row["error"] = "no metrics (exit %d)" % a.rc
        print(json.dumps(row))
        return
    timed = lines[a.warmup:] or lines
    row.update({
        "steps": len(lines),
        "tokens_per_s": statistics.median(l["tokens_per_s"] for l in timed),
        "final_loss": lines[-1]["loss"],
        "losses": [l["loss"] for l in lines],
        "device_peak_allocated_bytes": max((l.get("device_peak_allocated_bytes", 0) for l in timed), default=0),
        "device_peak_reserved_bytes": max((l.get("device_peak_reserved_bytes", 0) for l in timed), default=0),
        "host_peak_rss_bytes": max(l["peak_mem_bytes"] for l in lines),
    })
    print(json.dumps(row))


def parity(a):
    x = [json.loads(l) for l in open(a.files[0]) if l.strip()]
    y = [json.loads(l) for l in open(a.files[1]) if l.strip()]
    n = min(len(x), len(y))
    loss = max((abs(p["loss"] - q["loss"]) for p, q in zip(x, y)), default=float("nan"))
    norm = max((abs(p["grad_norm"] - q["grad_norm"]) / max(abs(q["grad_norm"]), 1e-12) for p, q in zip(x, y)),
               default=float("nan"))
    print(json.dumps({"label": a.label, "impl": "parity", "steps": n, "max_loss_gap": loss,
                      "max_grad_norm_rel_gap": norm}))


def curves(a):
    # Two runs of the same data and seed (bf16, then fp8): the largest gap
    # relative to the bf16 loss, step by step, and over the last 50 steps.
    x = [json.loads(l) for l in open(a.files[0]) if l.strip()]
    y = [json.loads(l) for l in open(a.files[1]) if l.strip()]
    n = min(len(x), len(y))
    if n == 0:
        print(json.dumps({"label": a.label, "impl": "curves", "error": "no metrics"}))
        return
    rel = [abs(p["loss"] - q["loss"]) / abs(p["loss"]) for p, q in zip(x, y)]
    tail = rel[-50:]
    print(json.dumps({"label": a.label, "impl": "curves", "steps": n, "max_rel_gap": max(rel),
                      "mean_rel_gap_last_50": sum(tail) / len(tail), "first_loss": x[0]["loss"],
                      "final_losses": [x[n - 1]["loss"], y[n - 1]["loss"]]}))


def syncs(a):
    events = json.load(open(a.files[0]))
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    steps = sum(1 for e in events if e.get("name") == "step" and e.get("ph") == "X")
    local = sum(1 for e in events if e.get("name") == "aten::_local_scalar_dense")
    dtoh = sum(1 for e in events if "DtoH" in str(e.get("name", "")) or "Device -> Host" in str(e.get("name", "")))
    print(json.dumps({"label": a.label, "impl": "syncs", "recorded_steps": steps,
                      "local_scalar_dense_per_step": local / max(steps, 1), "dtoh_copies_per_step": dtoh / max(steps, 1)}))


def gib(b):
    return "%.2f" % (b / 2**30) if b else "-"


def table(a):
    rows = [json.loads(l) for l in open(a.files[0]) if l.strip().startswith("{")]
    eager = {r["shape"]: r["tokens_per_s"] for r in rows if r.get("impl") in ("reference", "transformers")
             and "tokens_per_s" in r and r.get("eager_baseline")}
    device = next((r["device"] for r in rows if r.get("device")), "")
    peak = peak_of(device)
    print("\nbench/gpu on %s (dense bf16 peak %s TFLOP/s)\n" % (device or "?", "%.0f" % (peak / 1e12) if peak else "?"))
    print("| run | tokens/s | vs eager | MFU | peak allocated GiB | peak reserved GiB | final loss |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r.get("impl") in ("parity", "syncs", "curves") or r["label"].startswith("parity"):
            continue
        if "tokens_per_s" not in r:
            print("| %s | %s |  |  |  |  |  |" % (r["label"], r.get("error", "failed")))
            continue
        s = SHAPES.get(r.get("shape"))
        mfu = "%.1f%%" % (100 * r["tokens_per_s"] * flops_per_token(s) / peak) if s and peak else "-"
        base = eager.get(r.get("shape"))
        print("| %s | %.0f | %s | %s | %s | %s | %.4f |" % (
            r["label"], r["tokens_per_s"], "%.2fx" % (r["tokens_per_s"] / base) if base else "-", mfu,
            gib(r.get("device_peak_allocated_bytes")), gib(r.get("device_peak_reserved_bytes")), r["final_loss"]))
    for r in rows:
        if r.get("impl") == "parity":
            print("\n%s: %d steps, max |loss gap| %.3g, max grad-norm relative gap %.3g" % (
                r["label"], r["steps"], r["max_loss_gap"], r["max_grad_norm_rel_gap"]))
        if r.get("impl") == "curves" and "steps" in r:
            print("%s: loss %.3f -> bf16 %.4f, fp8 %.4f; largest gap %.2f%% of bf16's loss, %.2f%% on average over "
                  "the last 50 steps" % (r["label"], r["first_loss"], r["final_losses"][0], r["final_losses"][1],
                                         100 * r["max_rel_gap"], 100 * r["mean_rel_gap_last_50"]))
        if r.get("impl") == "syncs":
            print("%s: %.1f aten::_local_scalar_dense and %.1f device-to-host copies per step (%d steps recorded)" % (
                r["label"], r["local_scalar_dense_per_step"], r["dtoh_copies_per_step"], r["recorded_steps"]))
    by_label = {r["label"]: r for r in rows if r.get("impl") == "accel-host"}
    for bf16, fp8 in [("accel gpt-small bf16", "accel gpt-small fp8"), ("accel llama-wide bf16", "accel llama-wide fp8")]:
        if "losses" in by_label.get(bf16, {}) and "losses" in by_label.get(fp8, {}):
            gap = max(abs(p - q) for p, q in zip(by_label[bf16]["losses"], by_label[fp8]["losses"]))
            print("%s vs bf16: max |loss gap| over %d steps %.4f" % (fp8, len(by_label[fp8]["losses"]), gap))


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["accel", "parity", "curves", "syncs", "table"])
    p.add_argument("files", nargs="*")
    p.add_argument("--label", default="")
    p.add_argument("--shape", default="")
    p.add_argument("--metrics", default="")
    p.add_argument("--rc", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_intermixed_args(argv)
    {"accel": accel, "parity": parity, "curves": curves, "syncs": syncs, "table": table}[a.mode](a)


if __name__ == "__main__":
    main(sys.argv[1:])
