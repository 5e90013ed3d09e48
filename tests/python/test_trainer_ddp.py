"""varpack's datasets under HF Trainer on 2 CPU processes over gloo, against one process:

  - a tiny Llama trained by varpack.trainer.Trainer from a Parquet file through
    BalancedPackedDataset (and through PackedFileDataset) has, step by step, the loss of one
    process that runs every rank's rows of each step together (relative 1e-5);
  - a run resumed from its mid-epoch checkpoint (weights, optimizer, scheduler, RNG, the trainer
    state that places the data, and the dataset's state) reproduces the uninterrupted run's
    losses, and one process may not resume from the 2-rank checkpoint;
  - Trainer runs PackedStream (max_steps) and a persistent DataLoader worker follows its epochs;
  - over an epoch, BalancedPackedDataset, PackedFileDataset and PackedStream give every rank the
    same number of steps and every sample's tokens exactly once across the ranks, with rank and
    world size from torch.distributed;
  - varpack.loss.data_parallel_loss under DDP gives one process's gradient, and
    examples/train_data_parallel.py gives the same losses under DDP (Accelerate) and FSDP2, and
    again after a stop and resume.
"""
import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import varpack
from varpack.sharding import distributed_defaults

from gloo_ranks import run_ranks

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))
CAPACITY = 64
VOCAB = 96
RELATIVE = 1e-5


def write_parquet(path):
    rng = np.random.default_rng(11)
    lengths = np.clip(rng.lognormal(np.log(20), 0.8, size=60).astype(int), 2, CAPACITY)
    ids = [rng.integers(1, VOCAB, size=n).astype(np.int32) for n in lengths]
    pq.write_table(pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))}), path)


def read_parquet_tokens(path, column="input_ids"):
    """The Parquet file's token lists as numpy samples, through varpack's Arrow reader."""
    tokens = varpack.read_tokens(str(path), column=column)
    return [np.asarray(tokens[i]) for i in range(len(tokens))]


def write_packed(samples, path):
    src = path.with_suffix(".jsonl")
    src.write_text("".join(json.dumps({"input_ids": s.tolist()}) + "\n" for s in samples))
    subprocess.run([str(CLI), "pack", str(src), "--capacity", str(CAPACITY), "--out", str(path), "--shuffle"],
                   check=True, capture_output=True)


def balanced(samples, rank=None, world=None):
    return varpack.BalancedPackedDataset(samples, CAPACITY, rank=rank, world_size=world, rows_per_rank=2,
                                         drop_last=False, seed=1)


def packed_file(path, rank=None, world=None):
    return varpack.PackedFileDataset(path, rank=rank, world_size=world, rows_per_rank=2, drop_last=False, seed=1)


class AllRanks:
    """One process's view of a 2-rank dataset: step s holds every rank's rows of step s."""

    def __init__(self, ds):
        self.ds = ds
        self.ds._batch = self._batch

    def _batch(self, step):
        ds = self.ds
        if isinstance(ds, varpack.BalancedPackedDataset):
            return ds.format.build(varpack.select_rows(ds.plan, np.concatenate(ds.balance.step(step))), ds.samples)
        return ds.format.emit(ds.rows_batch(ds.order[np.concatenate(ds.balance.step(step))]))


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    import varpack.hf

    varpack.hf.register()
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=CAPACITY,
                         pad_token_id=0, tie_word_embeddings=False)
    config._attn_implementation = "varpack"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def train(ds, out, epochs=2, save_steps=None, resume=None, **overrides):
    """Per-step losses of varpack.trainer.Trainer on `ds` (resumed from checkpoint `resume`;
    overrides: more TrainingArguments)."""
    import transformers
    import varpack.trainer

    losses = {}
    CpuTrainer = cpu_trainer()

    class Record(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses[state.global_step] = logs["loss"]

    args = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=epochs, learning_rate=3e-3, warmup_steps=0, logging_steps=1,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, report_to=[],
        use_cpu=True, seed=0, ddp_backend="gloo", disable_tqdm=True, **overrides)
    trainer = CpuTrainer(model=tiny_llama(), args=args, train_dataset=ds, callbacks=[Record()])
    trainer.train(resume_from_checkpoint=resume)
    return losses


def cpu_trainer():
    import transformers
    import varpack.trainer

    class CpuTrainer(varpack.trainer.Trainer):
        # accelerate places a multi-process CPU run on device cpu:RANK, which torch.load cannot map
        # the optimizer's checkpoint to (transformers 5.17, torch 2.13): load it on "cpu".
        def _load_optimizer_and_scheduler(self, checkpoint):
            with mock.patch.object(transformers.TrainingArguments, "device", property(lambda _: torch.device("cpu"))):
                super()._load_optimizer_and_scheduler(checkpoint)

    return CpuTrainer


def exactly_once(path, samples):
    """Per dataset: the tokens of every sample segment of this rank's steps over one epoch (a
    stream numbers samples within its buffer, so a sample is known by its tokens)."""
    import varpack.trainer

    datasets = {"balanced": balanced(samples), "file": packed_file(path),
                "stream": varpack.PackedStream(samples, CAPACITY, rows_per_batch=2, buffer_size=16, seed=1,
                                               return_segments=True)}
    out = {}
    for name, ds in datasets.items():
        ds.format.return_segments = True
        ds.set_epoch(1)
        out[name] = [[tuple(b["input_ids"][0, i:j].tolist())
                      for i, j, s in zip(cu, cu[1:], b["segment_sample"].tolist()) if s >= 0]
                     for b in varpack.trainer.step_loader(ds) for cu in [b["cu_seq_lens_q"].tolist()]]
    return out


def gradient_of_data_parallel_loss(rank, world, samples):
    """Per normalisation, the gradient of data_parallel_loss on this rank's rows of step 0 under DDP."""
    from varpack.loss import data_parallel_loss, global_count

    grads = {}
    for normalization in ("token", "sample"):
        model = tiny_llama()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        batch = balanced(samples)[0]
        count = global_count(batch, normalization)
        logits = ddp(**{k: v for k, v in batch.items() if k != "labels"}).logits
        data_parallel_loss(logits, batch["labels"], count, normalization=normalization,
                           cu_seqlens=batch["cu_seq_lens_q"]).backward()
        grads[normalization] = {name: p.grad.clone() for name, p in model.named_parameters()}
    return grads


def set_env(rank, world):
    # What torchrun sets: accelerate reads it to find the process group run_ranks made.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")


def on_two_ranks(rank, world, tmp):
    set_env(rank, world)
    tmp = pathlib.Path(tmp)
    samples = read_parquet_tokens(tmp / "data.parquet")
    result = {"exactly_once": exactly_once(tmp / "packed.bin", samples),
              "grads": gradient_of_data_parallel_loss(rank, world, samples)}
    steps = len(balanced(samples))
    result["steps_per_epoch"] = steps
    result["balanced"] = train(balanced(samples), tmp / "run", save_steps=steps + 2)
    result["resumed"] = train(balanced(samples), tmp / "run", resume=str(tmp / "run" / f"checkpoint-{steps + 2}"))
    # A persistent DataLoader worker must follow Trainer's set_epoch into the second epoch.
    result["file"] = train(packed_file(tmp / "packed.bin"), tmp / "file", dataloader_num_workers=1,
                           dataloader_persistent_workers=True)
    result["stream"] = train(varpack.PackedStream(samples, CAPACITY, rows_per_batch=2, buffer_size=16, seed=1),
                             tmp / "stream", max_steps=6)
    result["example"] = run_example(tmp / "example")
    return result


def run_example(out):
    """examples/train_data_parallel.py's per-step losses (3 epochs of 2 steps): DDP through
    Accelerate, FSDP2, and FSDP2 stopped after 3 steps (mid-epoch) then resumed from its checkpoint."""
    import train_data_parallel

    options = ["--out", str(out), "--samples", "40", "--hidden", "32", "--layers", "1", "--epochs", "3"]
    return {"ddp": train_data_parallel.main(["--wrap", "ddp", *options]),
            "fsdp2": train_data_parallel.main(["--wrap", "fsdp2", *options]),
            "stopped": train_data_parallel.main(["--wrap", "fsdp2", "--stop-after", "3", *options]),
            "resumed": train_data_parallel.main(["--wrap", "fsdp2", "--resume", *options])}


def on_one_rank(rank, world, tmp):
    set_env(rank, world)
    tmp = pathlib.Path(tmp)
    samples = read_parquet_tokens(tmp / "data.parquet")
    result = {"balanced": train(AllRanks(balanced(samples, 0, 2)).ds, tmp / "one"),
              "file": train(AllRanks(packed_file(tmp / "packed.bin", 0, 2)).ds, tmp / "one_file")}
    # The 2-rank run's checkpoint holds its data layout: one rank may not resume from it.
    checkpoint = max((tmp / "run").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    try:
        train(balanced(samples), tmp / "run", resume=str(checkpoint))
        result["refused"] = None
    except ValueError as error:
        result["refused"] = str(error)
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not CLI.exists():
        pytest.skip(f"{CLI} not built (run scripts/setup.sh)")
    tmp = tmp_path_factory.mktemp("trainer")
    write_parquet(tmp / "data.parquet")
    write_packed(read_parquet_tokens(tmp / "data.parquet"), tmp / "packed.bin")
    two = run_ranks(on_two_ranks, 2, tmp_path_factory.mktemp("two"), str(tmp))
    one = run_ranks(on_one_rank, 1, tmp_path_factory.mktemp("one"), str(tmp))[0]
    return two, one, read_parquet_tokens(tmp / "data.parquet")


def relative_gap(a, b):
    assert a.keys() == b.keys() and a
    return max(abs(a[s] - b[s]) / abs(b[s]) for s in b)


@pytest.mark.parametrize("dataset", ["balanced", "file"])
def test_two_ranks_train_as_one_process_on_all_rows(runs, dataset):
    two, one, _ = runs
    assert two[0][dataset] == two[1][dataset]  # every rank logs the mean over ranks
    assert len(one[dataset]) >= 5
    assert relative_gap(two[0][dataset], one[dataset]) < RELATIVE


def test_trainer_runs_a_stream_on_both_ranks(runs):
    two, _, _ = runs
    assert sorted(two[0]["stream"]) == list(range(1, 7)) and two[0]["stream"] == two[1]["stream"]


def test_resumed_run_reproduces_the_uninterrupted_losses(runs):
    two, _, _ = runs
    full, resumed = two[0]["balanced"], two[0]["resumed"]
    k = two[0]["steps_per_epoch"] + 2
    assert sorted(resumed) == [s for s in sorted(full) if s > k]
    assert relative_gap(resumed, {s: full[s] for s in resumed}) < 1e-6


def test_resume_with_another_world_size_is_refused(runs):
    _, one, _ = runs
    assert "saved with world_size=2, this dataset has world_size=1" in one["refused"]


@pytest.mark.parametrize("dataset", ["balanced", "file", "stream"])
def test_every_row_once_across_ranks(runs, dataset):
    two, _, samples = runs
    per_rank = [r["exactly_once"][dataset] for r in two]
    assert len(per_rank[0]) == len(per_rank[1]) > 0
    seen = [segment for steps in per_rank for step in steps for segment in step]
    assert sorted(seen) == sorted(tuple(s.tolist()) for s in samples)


@pytest.mark.parametrize("normalization", ["token", "sample"])
def test_data_parallel_loss_gives_one_process_gradient(runs, normalization):
    from varpack.loss import weighted_loss

    two, _, samples = runs
    model = tiny_llama()
    ds = AllRanks(balanced(samples, 0, 2)).ds
    ds.format.return_loss_weights, ds.format.loss_normalization = True, normalization
    step = ds[0]
    # One process on every rank's rows, through the batch builder's own weights (each sums to 1).
    logits = model(**{k: v for k, v in step.items() if k not in ("labels", "loss_weight")}).logits
    weighted_loss(logits, step["labels"], step["loss_weight"]).backward()
    for name, p in model.named_parameters():
        for rank in two:
            torch.testing.assert_close(rank["grads"][normalization][name], p.grad, rtol=1e-5, atol=1e-7)


def test_example_ddp_and_fsdp2_agree_and_resume(runs):
    two, _, _ = runs
    example = two[0]["example"]
    assert len(example["ddp"]) == 6 and example["ddp"] == two[1]["example"]["ddp"]
    np.testing.assert_allclose(example["fsdp2"], example["ddp"], rtol=1e-5)
    assert example["stopped"] == example["fsdp2"][:3]
    np.testing.assert_allclose(example["resumed"], example["fsdp2"][3:], rtol=1e-6)


def test_distributed_defaults_without_a_process_group():
    assert distributed_defaults(None, None, "x") == (0, 1)
