"""HF Trainer on 2 gloo processes against one process on every rank's rows: the largest relative
per-step loss gap, with varpack's setup (varpack.trainer.Trainer, transformers' global token count)
and, as the peer in the same run, the same ranks with average_tokens_across_devices=False (each
rank's own mean, then DDP's average: what training gives without the global count).

    python bench/distributed/trainer_parity.py        # CPU, about a minute

The runs are those of tests/python/test_trainer_ddp.py (tiny Llama, Parquet samples through
BalancedPackedDataset), which checks the first number against 1e-5.
"""
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import test_trainer_ddp as runs  # noqa: E402
from multiprocess import run_ranks  # noqa: E402


def two_ranks(rank, world, tmp):
    runs.set_env(rank, world)
    samples = runs.read_parquet_tokens(pathlib.Path(tmp) / "data.parquet")
    return {"global": runs.train(runs.balanced(samples), pathlib.Path(tmp) / "global"),
            "per_rank": runs.train(runs.balanced(samples), pathlib.Path(tmp) / "per_rank",
                                   average_tokens_across_devices=False)}


def one_rank(rank, world, tmp):
    runs.set_env(rank, world)
    samples = runs.read_parquet_tokens(pathlib.Path(tmp) / "data.parquet")
    return runs.train(runs.AllRanks(runs.balanced(samples, 0, 2)).ds, pathlib.Path(tmp) / "one")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        runs.write_parquet(tmp / "data.parquet")
        (tmp / "two").mkdir()
        (tmp / "one").mkdir()
        two = run_ranks(two_ranks, 2, tmp / "two", str(tmp))[0]
        one = run_ranks(one_rank, 1, tmp / "one", str(tmp))[0]
    for name, losses in two.items():
        print(f"{name:9s} {len(losses)} steps, max relative loss gap to one process: "
              f"{runs.relative_gap(losses, one):.2e}")


if __name__ == "__main__":
    main()
