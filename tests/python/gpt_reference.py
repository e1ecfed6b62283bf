"""GPT-2 written with torch.nn, the reference accel-host is checked against.

Independent of accel's code: the architecture, AdamW parameter groups,
clipping and LR schedule are written here from their definitions. Parameter
names match accel's checkpoints (GPT-2's names, nn.Linear [out, in] layout).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.gelu = nn.GELU(approximate="tanh")

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp.c_proj(self.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, seq_len, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def learning_rate(step, total, lr, min_lr, warmup, schedule):
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    p = min(max((step - warmup) / max(1, total - warmup - 1), 0.0), 1.0)
    if schedule == "linear":
        return min_lr + (lr - min_lr) * (1 - p)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))


def make_optimizer(model, lr, betas, eps, weight_decay):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps, foreach=False)


def sequential_micro_batches(tokens, step, global_batch, grad_accum, seq_len):
    """accel's --data-order sequential with one rank: batch k is windows
    [k*B, (k+1)*B) of seq_len+1 tokens; micro-step m takes the m-th slice."""
    window = seq_len + 1
    num_windows = len(tokens) // window
    per_micro = global_batch // grad_accum
    for m in range(grad_accum):
        first = step * global_batch + m * per_micro
        rows = [tokens[((first + i) % num_windows) * window:][:window] for i in range(per_micro)]
        batch = torch.from_numpy(np.stack(rows).astype(np.int64))
        yield batch[:, :-1], batch[:, 1:]
