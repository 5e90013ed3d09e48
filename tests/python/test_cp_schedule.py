"""The (dp, cp) schedule (varpack.cp_schedule): every document runs exactly once, long ones over an
aligned power-of-two group whose ranks each hold at most a row's tokens, no rank takes more than its
slots, and each step's predicted loads are nearly even."""
import numpy as np
import pytest

from varpack.cp_schedule import cp_group_size, cp_schedule


def test_every_document_once_in_aligned_groups_within_slots():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 1.2, size=3000), 1, 20000).astype(np.int64)
    lengths[:5] = [0, 1, 4096, 4097, 16384]
    sched = cp_schedule(lengths, ranks=8, rows_per_rank=2, capacity=4096, window_steps=4, seed=1)
    seen = []
    for s, (rows, cps, slots) in enumerate(sched.steps):
        assert slots.shape == (8, 2)
        for j, w in enumerate(cps):
            assert w.first_rank % w.size == 0 and w.size == cp_group_size(int(lengths[w.doc]), 4096, 8)
            assert -(-lengths[w.doc] // w.size) <= 4096
            assert (slots[w.first_rank:w.first_rank + w.size, w.slot] == -2 - j).all()  # one slot on all
            assert (slots == -2 - j).sum() == w.size
            seen.append(int(w.doc))
        for r in rows:
            for row in r:
                pieces = sched.rows.pieces[sched.rows.row_begin[row]:sched.rows.row_begin[row + 1]]
                seen += pieces[:, 0].tolist()
    assert sorted(seen) == np.flatnonzero(lengths > 0).tolist()  # the planner places no empty document
    assert set(sched.long.tolist()) == set(np.flatnonzero(lengths > 4096).tolist())
    full = [s for s, (_, _, slots) in enumerate(sched.steps) if (slots != -1).all()]
    loads = sched.predicted[full]
    assert (loads.max(axis=1) / loads.mean(axis=1)).mean() < 1.1
    mine = sched.for_rank(3)
    assert len(mine) == len(sched.steps) and all(len(step) == 2 for step in mine)
    assert all(0 <= e[2] < e[1].size for step in mine for e in step if e[0] == "cp")


def test_a_document_too_long_for_every_rank_is_refused():
    with pytest.raises(ValueError, match="needs 8 ranks of 100 tokens, more than the 4 ranks"):
        cp_schedule([50, 701], ranks=4, rows_per_rank=1, capacity=100)


def test_the_ranks_parts_hold_every_token_once():
    from varpack.cp_schedule import rank_batches
    from varpack.context_parallel import CPLayout
    rng = np.random.default_rng(2)
    lengths = np.array([3, 700, 40, 90, 260, 5, 77, 1000, 64, 12])
    samples = [rng.integers(0, 1000, size=n) for n in lengths]
    sched = cp_schedule(lengths, ranks=4, rows_per_rank=2, capacity=256, window_steps=2)
    tokens = {d: [] for d in range(len(lengths))}
    for rank in range(4):
        for step in rank_batches(sched, samples, rank):
            assert len(step) == 2
            for entry in step:
                if entry[0] == "row":
                    ids, cu = entry[1]["input_ids"], entry[1]["cu_seqlens"]
                    for s, a, b in zip(entry[1]["segment_sample"], cu[:-1], cu[1:]):
                        tokens[int(s)].append(ids[a:b])
                elif entry[0] == "cp":
                    work, batch = entry[1], entry[2]
                    layout = CPLayout.decode(batch["cp_layout"])
                    order = layout.global_index(rank - work.first_rank)
                    tokens[work.doc].append((order, batch["input_ids"][0]))
    for d, parts in tokens.items():
        if lengths[d] > 256:
            whole = np.zeros(lengths[d], dtype=np.int64)
            for order, ids in parts:
                whole[order] = ids.numpy()
            assert sum(len(o) for o, _ in parts) == lengths[d]
        else:
            whole = np.concatenate([p.numpy() for p in parts])
        assert np.array_equal(whole, samples[d])


# ---------------------------------------------------------------- the schedule run on 4 processes

DOCS = [30, 200, 45, 90, 12, 400, 60, 25, 110, 7]


def doc_samples():
    rng = np.random.default_rng(5)
    return [rng.integers(0, 64, size=n) for n in DOCS]


def scheduled_step_on_rank(rank, world):
    """One training step of the schedule's slots under FSDP2, CP documents over their blocks."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import varpack
    from test_cp_variants import TinyModel
    from varpack.context_parallel import cp_varlen_attention
    from torch.distributed.device_mesh import init_device_mesh
    from varpack.cp_schedule import cp_meshes, rank_batches

    sched = cp_schedule(DOCS, ranks=world, rows_per_rank=2, capacity=128, window_steps=2)
    meshes = cp_meshes(sched, "cpu")
    assert sorted(meshes) == [2, 4] and meshes[2].shape == (2, 2) and meshes[4].shape == (1, 4)
    model = TinyModel()
    everyone = init_device_mesh("cpu", (world,))  # FSDP2 shards over every rank, DP and CP alike
    for block in model.blocks:
        fully_shard(block, mesh=everyone)
    fully_shard(model, mesh=everyone)
    ce = torch.nn.functional.cross_entropy
    total = torch.zeros(())
    for step in rank_batches(sched, doc_samples(), rank):
        for entry in step:
            if entry[0] == "row":
                batch = entry[1]
                cu, longest = batch["cu_seqlens"], batch["max_seqlen"]

                def attention(q, k, v, cu=cu, longest=longest):
                    return varpack.flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)

                targets = torch.cat([batch["labels"][1:], torch.tensor([-100])])
                loss = ce(model(batch["input_ids"], attention), targets, reduction="sum")
            elif entry[0] == "cp":
                work, batch = entry[1], entry[2]

                mesh = meshes[work.size]
                assert list(mesh.get_coordinate()) == [work.first_rank // work.size, rank - work.first_rank], mesh.get_coordinate()

                def attention(q, k, v, code=batch["cp_layout"], mesh=mesh):
                    return cp_varlen_attention(q, k, v, code, group=mesh)

                loss = ce(model(batch["input_ids"][0], attention), batch["shift_labels"][0], reduction="sum")
            else:  # idle: a forward and backward all the same, for FSDP's collectives
                loss = model(torch.zeros(1, dtype=torch.long), lambda q, k, v: v.repeat_interleave(2, 1)).sum() * 0
            loss.backward()
            total += loss.detach()
    dist.all_reduce(total)
    # FSDP2 averages over the ranks; the step's loss is a sum over them.
    return float(total), torch.cat([p.grad.full_tensor().reshape(-1) for p in model.parameters()]) * world


def test_the_schedule_trains_like_one_process(tmp_path):
    import torch
    import varpack
    from gloo_ranks import run_ranks
    from test_cp_variants import TinyModel

    results = run_ranks(scheduled_step_on_rank, 4, tmp_path)
    model = TinyModel()
    total = torch.zeros(())
    for doc in doc_samples():
        ids = torch.as_tensor(doc)
        cu = torch.tensor([0, len(doc)], dtype=torch.int32)
        logits = model(ids, lambda q, k, v: varpack.flash_attn_varlen_func(q, k, v, cu, cu, len(doc), len(doc),
                                                                          causal=True))
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="sum")
        loss.backward()
        total += loss.detach()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    for loss, rank_grads in results:
        assert loss == pytest.approx(float(total), rel=1e-5)
        torch.testing.assert_close(rank_grads, grads, rtol=1e-4, atol=1e-5)


def test_the_planner_marks_the_documents_for_context_parallelism():
    import varpack
    lengths = [5, 300, 0, 64, 65, 10]
    plan = varpack.plan(lengths, 64, overlong="cp")
    assert plan.stats["context_parallel_samples"] == 2 and plan.stats["tokens"] == 5 + 64 + 10
    assert sorted(set(plan.pieces[:, 0].tolist())) == [0, 3, 5]
