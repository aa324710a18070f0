#!/usr/bin/env python3
"""An independent baseline for the copy probe: a plain pre-LayerNorm GPT in PyTorch.

    /usr/bin/python3 scripts/copy_probe/plain_gpt.py CORPUS_DIR [--layers 2] [--steps 3000]

Needs Debian's PyTorch (`apt-get install python3-torch`; scripts/setup.sh does not install it,
nothing else in mnemo uses it).

Learned absolute positions, causal attention over 128-byte windows, no memory; the same width,
batch, learning rate, warm-up and cosine schedule as the mnemo-train run it is compared with
(docs/results/training_speed.md). Prints `step train_bpb validation_bpb seconds` every 200
steps; the first 4 files (sorted) are the validation split.
"""
import argparse
import glob
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.ff1, self.ff2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(width // self.heads)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        y = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        x = x + self.out(y.transpose(1, 2).reshape(b, t, width))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, length):
        super().__init__()
        self.embedding = nn.Embedding(256, width)
        self.position = nn.Embedding(length, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0, 0.02)

    def forward(self, x):
        h = self.embedding(x) + self.position(torch.arange(x.size(1)))
        for block in self.blocks:
            h = block(h)
        return self.norm(h) @ self.embedding.weight.t()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    files = sorted(glob.glob(args.corpus + "/*.txt"))
    data = [torch.tensor(list(open(f, "rb").read()), dtype=torch.long) for f in files]
    validation, train = data[:4], data[4:]

    def batch(source, pick):
        rows = []
        for _ in range(args.batch):
            doc = pick.choice(source)
            i = pick.randrange(len(doc) - args.length - 1)
            rows.append(doc[i:i + args.length + 1])
        x = torch.stack(rows)
        return x[:, :-1], x[:, 1:]

    model = Gpt(args.layers, args.width, args.heads, args.length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    start = time.time()
    for step in range(1, args.steps + 1):
        if step < args.warmup:
            lr = args.lr * step / args.warmup
        else:
            progress = (step - args.warmup) / max(1, args.steps - args.warmup)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch(train, rng)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 200 == 0:
            with torch.no_grad():
                vx, vy = batch(validation, random.Random(step))
                held = F.cross_entropy(model(vx).reshape(-1, 256), vy.reshape(-1)).item()
            print(step, round(loss.item() / math.log(2), 3), round(held / math.log(2), 3),
                  round(time.time() - start), flush=True)


if __name__ == "__main__":
    main()
