"""Data-parallel training on a varpack dataset, DDP (through HF Accelerate) or FSDP2 (torch's
fully_shard), with the loss normalised over every rank's tokens and a resumable data position.

    torchrun --nproc_per_node=2 examples/train_data_parallel.py --wrap ddp --out OUT      # CPU: gloo
    torchrun --nproc_per_node=2 examples/train_data_parallel.py --wrap fsdp2 --out OUT
    torchrun --nproc_per_node=2 examples/train_data_parallel.py --wrap ddp --out OUT --resume  # goes on

What it takes, beside the model and optimizer:
  data    varpack.BalancedPackedDataset (or PackedFileDataset / PackedStream): rank-aware, so the
          loader is never handed to accelerator.prepare (which would shard it again) nor given a
          DistributedSampler; varpack.trainer.step_loader(ds) iterates it, to_device moves a batch.
  loss    varpack.loss.global_count(batch) all-reduces the step's predicted tokens once;
          data_parallel_loss divides this rank's summed token losses by it times the world size,
          so DDP's and FSDP's gradient averaging gives one process's gradient on all the rows.
  resume  ds.state_dict(steps_done) is saved with the weights; ds.load_state_dict puts the next
          pass at that step of that epoch, with any num_workers.

A Llama-style decoder (transformers, attn_implementation="varpack") on random token samples of
long-tailed lengths; rank 0 logs the loss per step and writes losses.json to --out.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib

import numpy as np
import torch
import torch.distributed as dist

import varpack
import varpack.hf
from varpack.loss import data_parallel_loss, global_count
from varpack.trainer import step_loader, to_device

log = logging.getLogger("train_data_parallel")
VOCAB = 256


def samples(n: int, capacity: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(capacity / 8), 1.0, size=n).astype(int), 2, capacity)
    return [rng.integers(1, VOCAB, size=k).astype(np.int32) for k in lengths]


def make_model(hidden: int, layers: int, capacity: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    varpack.hf.register()
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=max(1, hidden // 32), max_position_embeddings=capacity, pad_token_id=0,
                         tie_word_embeddings=False)
    config._attn_implementation = "varpack"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def wrap(model, kind: str, device: torch.device):
    """(model to call, optimizer, accelerator or None) for DDP through Accelerate or FSDP2."""
    if kind == "ddp":
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=device.type == "cpu")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)  # not the loader: it is sharded already
        return model, optimizer, accelerator
    from torch.distributed.fsdp import fully_shard

    model.to(device)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), None


def train(args) -> list[float]:
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() \
        else torch.device("cpu")
    ds = varpack.BalancedPackedDataset(samples(args.samples, args.capacity), args.capacity, rows_per_rank=2,
                                       drop_last=False, seed=1)
    model, optimizer, accelerator = wrap(make_model(args.hidden, args.layers, args.capacity), args.wrap, device)
    out = pathlib.Path(args.out)
    checkpoint = out / f"checkpoint-rank{dist.get_rank()}.pt"
    first_epoch = 0
    if args.resume:
        saved = torch.load(checkpoint, weights_only=False)
        (accelerator.unwrap_model(model) if accelerator else model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        ds.load_state_dict(saved["data"])
        first_epoch = saved["data"]["epoch"]
    losses = []
    for epoch in range(first_epoch, args.epochs):
        ds.set_epoch(epoch)  # keeps a loaded mid-epoch position for its own epoch
        for done, batch in enumerate(step_loader(ds, num_workers=args.workers), start=1):
            batch = to_device(batch, device)
            count = global_count(batch)  # one all-reduce: the step's predicted tokens on every rank
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            loss = data_parallel_loss(logits, batch["labels"], count)
            (accelerator.backward(loss) if accelerator else loss.backward())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            reported = loss.detach().clone()
            dist.all_reduce(reported)
            losses.append(float(reported) / dist.get_world_size())
            if dist.get_rank() == 0:
                log.info("epoch %d step %d: loss %.5f", epoch, len(losses), losses[-1])
            if args.stop_after and len(losses) == args.stop_after:
                save(checkpoint, model, optimizer, ds, done, accelerator)
                return losses
    if args.stop_after:
        raise SystemExit(f"train_data_parallel: --stop-after {args.stop_after}, but the run has only {len(losses)} "
                         "steps; nothing was saved")
    return losses


def save(path: pathlib.Path, model, optimizer, ds, steps_done: int, accelerator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = (accelerator.unwrap_model(model) if accelerator else model).state_dict()
    torch.save({"model": state, "optimizer": optimizer.state_dict(), "data": ds.state_dict(steps_done)}, path)


def main(argv=None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=80)
    parser.add_argument("--capacity", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--stop-after", type=int, default=0, help="save a checkpoint after this many steps and stop")
    parser.add_argument("--resume", action="store_true", help="go on from the checkpoint in --out")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    losses = train(args)
    if dist.get_rank() == 0:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"losses-{args.wrap}{'-resumed' if args.resume else ''}.json").write_text(json.dumps(losses))
    return losses


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
