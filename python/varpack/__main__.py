"""`python -m varpack calibrate` and `export`: the Python side of varpack's command line. calibrate
needs a PyTorch model (the C++ `varpack` command packs and reports without one); it writes the cost
model that `varpack stats --cost-model FILE`, varpack.CostModel.load and the balancer read. export
writes packed rows as Parquet with the columns TRL's SFTTrainer takes (varpack.export), from token
data it plans or from a packed .bin file that `varpack pack` wrote:

    python -m varpack export data.parquet --capacity 4096 --out rows.parquet [--seed 1 --epoch 0]
    python -m varpack export packed.bin --out rows.parquet --keep-order

    python -m varpack calibrate --model my_pkg.models:build --capacity 16384 --out calibration.json
    python -m varpack calibrate --model examples/train_ddp.py:anchor_model --capacity 32768 \\
        --device cuda --autocast bf16 --out calibration.json

--model names a function returning the model (module:function, or path/to/file.py:function); it
is called with no arguments and the model is moved to --device. Exit status 1 with one
"varpack: error:" line for bad input, 2 for bad usage.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import pathlib
import sys
from contextlib import nullcontext

import torch

from .calibrate import calibrate, row_compositions

AUTOCAST = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class UsageError(ValueError):
    """Bad usage (an option's value): exit status 2, where bad input exits 1."""


class Parser(argparse.ArgumentParser):
    """argparse with the command's one-line errors: "varpack: error: ..." and exit status 2."""

    def error(self, message):
        print(f"varpack: error: {message}; see '{self.prog} --help'", file=sys.stderr)
        sys.exit(2)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def load_factory(spec: str):
    """The function named by "module:function" or "path/to/file.py:function"."""
    module_name, _, function = spec.rpartition(":")
    if not module_name or not function:
        raise UsageError(f"--model {spec!r}: give module:function or path/to/file.py:function")
    if module_name.endswith(".py"):
        path = pathlib.Path(module_name)
        if not path.is_file():
            raise UsageError(f"--model {spec!r}: no file {path}")
        sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
        loader = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[path.stem] = module  # dataclasses and pickling look a class's module up there
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = getattr(module, function, None)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {module_name} has no function {function!r}")
    return factory


def calibrate_command(args) -> int:
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        raise UsageError(f"--device {args.device!r}: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA GPU; "
                         "use --device cpu")
    model = load_factory(args.model)()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--model {args.model}: the function returned {type(model).__name__}, not a "
                         "torch.nn.Module")
    model = model.to(device)
    model.train()
    result = calibrate(model, args.capacity, device=device, autocast=AUTOCAST[args.autocast],
                       repeats=args.repeats, warmup=args.warmup,
                       compositions=row_compositions(args.capacity, args.min_length))
    result.save(args.out)
    m = result.cost_model
    print(f"{args.out}: cost per row = {m.overhead * 1e3:.3f} ms + {m.alpha * 1e6:.4g} us/token + "
          f"{m.beta * 1e12:.4g} ps/token^2 ({result.device}, {len(result.points)} rows)")
    for (lengths, seconds), error in zip(result.points, result.residuals()):
        print(f"  {len(lengths):3d} x {lengths[0]:6d} tokens: {seconds * 1e3:9.2f} ms  (fit {error:+.1%})")
    return 0


def export_command(args) -> int:
    from . import export
    from .packed_file import MAGIC, PackedFile
    from .packing import plan
    from .token_files import read_tokens

    if args.keep_order and args.epoch is not None:
        raise ValueError("--epoch has no effect with --keep-order (it seeds the shuffle)")
    order = "planner" if args.keep_order else "shuffle"
    epoch = args.epoch or 0
    with open(args.input, "rb") if os.path.isfile(args.input) else nullcontext() as f:
        packed = f is not None and f.read(len(MAGIC)) == MAGIC  # a Megatron PREFIX.bin is token data
    if packed:
        if args.capacity is not None:
            raise ValueError(f"--capacity: {args.input} is packed already (its rows are kept); "
                             "give token data to plan new rows")
        source, samples = PackedFile(args.input), None
    else:
        if args.capacity is None:
            raise ValueError("--capacity is required to plan rows from token data")
        samples = read_tokens(args.input, column=args.column, labels=args.labels)
        source = plan(samples.lengths, args.capacity, algorithm=args.algorithm, overlong=args.overlong)
    rows = export.write_parquet(source, samples, args.out, order=order, seed=args.seed, epoch=epoch)
    kept = "the packed file's" if samples is None else "the planner's"
    how = f"in {kept} order (--keep-order)" if args.keep_order else \
        f"shuffled with seed {args.seed}, epoch {epoch} (--keep-order keeps the planner's order)"
    print(f"{args.out}: {rows} packed rows from {args.input}, {how}")
    return 0


def main(argv=None) -> int:
    parser = Parser(prog="python -m varpack", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cal = commands.add_parser("calibrate", help="time packed rows on your model and device and fit "
                              "c + alpha*tokens + beta*sum(len^2) per row",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cal.add_argument("--model", required=True, help="module:function or file.py:function returning the model")
    cal.add_argument("--capacity", type=positive, required=True, help="tokens per packed row, as in training")
    cal.add_argument("--out", default="calibration.json", help="the cost model's JSON (default: %(default)s)")
    cal.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    cal.add_argument("--autocast", choices=sorted(AUTOCAST), default="bf16" if torch.cuda.is_available() else "none")
    cal.add_argument("--repeats", type=positive, default=3, help="timed runs per row (the median counts)")
    cal.add_argument("--warmup", type=non_negative, default=1, help="untimed runs per row first")
    cal.add_argument("--min-length", type=positive, default=16, help="shortest sample in a timed row")
    exp = commands.add_parser("export", help="write packed rows as Parquet with the columns TRL's "
                              "SFTTrainer takes (input_ids, labels, position_ids, seq_lengths)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    exp.add_argument("input", help="token data (Parquet, Arrow, a datasets folder, DATA.npy, Megatron) "
                     "to plan, or a packed .bin from `varpack pack` whose rows are exported")
    exp.add_argument("--out", "-o", required=True, help="the Parquet file to write")
    exp.add_argument("--capacity", "-L", type=positive, help="tokens per row (token data only)")
    exp.add_argument("--column", default="input_ids", help="Arrow input: the token ids' column")
    exp.add_argument("--labels", help="Arrow input: a column of labels (ids or -100), if any")
    exp.add_argument("--algorithm", "-a", default="bfd", choices=("ffd", "bfd", "histogram", "none"))
    exp.add_argument("--overlong", default="error", choices=("error", "truncate", "split"),
                     help="samples longer than L")
    order = exp.add_mutually_exclusive_group()
    order.add_argument("--seed", type=int, default=0, help="seed of the row shuffle (default: %(default)s)")
    order.add_argument("--keep-order", action="store_true",
                       help="keep the rows' order (by default they are shuffled per seed and epoch)")
    exp.add_argument("--epoch", type=int, help="epoch mixed into the shuffle's seed (default 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return calibrate_command(args) if args.command == "calibrate" else export_command(args)
    except UsageError as error:
        print(f"varpack: error: {error}", file=sys.stderr)
        return 2
    except (ValueError, OSError, ImportError, RuntimeError) as error:
        message = " ".join(str(error).split())  # one line, whatever the model's error looked like
        print(f"varpack: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
