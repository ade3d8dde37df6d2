"""The input batch's whole-batch host work (issue 21, item 5): `bookkeeping_sync` and
`update_states` written with numpy give what the per-row methods give."""
import numpy as np
import pytest

from minivllm.core.sched.output import CachedRequestData, SchedulerOutput
from minivllm.sampling_params import SamplingParams
from minivllm.worker.gpu_input_batch import (CachedRequestState, InputBatch, bookkeeping_sync,
                                             update_states)

PEN = SamplingParams(temperature=0, repetition_penalty=1.2)
PLAIN = SamplingParams(temperature=0)


def make_batch(n=6, max_model_len=16):
    batch, reqs = InputBatch(n, max_model_len, 64, 4, vocab_size=32), {}
    for i in range(n):
        s = CachedRequestState(f"r{i}", [1 + i, 2, 3], PEN if i % 2 else PLAIN, None, [i], 3,
                               [5] * (i % 3))
        reqs[s.req_id] = s
        batch.add_request(s)
    return batch, reqs


def test_bookkeeping_sync_equals_the_per_row_appends():
    batch, reqs = make_batch()
    ref, ref_reqs = make_batch()
    sampled, discard = [7, 8, 9, 10, 11, 12], np.array([2, 5])
    valid = bookkeeping_sync(reqs, batch, sampled, discard)
    assert valid == [[7], [8], [], [10], [11], []]
    for row, ids in enumerate(valid):                 # the per-row way
        if ids:
            ref.append_token_ids(row, ids)
            ref_reqs[f"r{row}"].output_token_ids.extend(ids)
    assert np.array_equal(batch.token_ids_cpu, ref.token_ids_cpu)
    assert np.array_equal(batch.num_tokens_no_spec, ref.num_tokens_no_spec)
    assert np.array_equal(batch.output_bin_counts.numpy(), ref.output_bin_counts.numpy())
    assert batch.output_bin_counts[1, 8] == 1 and batch.output_bin_counts[0].sum() == 0
    assert batch.output_bin_counts[5, 12] == 0                           # discarded: not counted
    assert {r: s.output_token_ids for r, s in reqs.items()} == {
        r: s.output_token_ids for r, s in ref_reqs.items()}


def test_bookkeeping_sync_refuses_to_overflow_max_model_len():
    batch, reqs = make_batch(n=2, max_model_len=5)
    bookkeeping_sync(reqs, batch, [1, 1], [])                 # rows hold 4 and 5 tokens now
    assert batch.num_tokens_no_spec[:2].tolist() == [4, 5]
    with pytest.raises(ValueError, match="max_model_len=5"):
        bookkeeping_sync(reqs, batch, [1, 1], [])
    bookkeeping_sync(reqs, batch, [2, 1], [1])                # the full row is a partial prefill
    assert batch.token_ids_cpu[0, 4] == 2


def test_update_states_drops_unscheduled_rows_and_updates_the_rest():
    batch, reqs = make_batch()
    ids = ["r0", "r2", "r5"]
    so = SchedulerOutput(scheduled_new_reqs=[], scheduled_cached_reqs=CachedRequestData(
        req_ids=ids, num_computed_tokens=[3, 4, 5], new_block_ids=[None, [40], None]),
        num_scheduled_tokens=dict.fromkeys(ids, 1), total_num_scheduled_tokens=3,
        finished_req_ids={"r1"})
    update_states(reqs, batch, so)
    assert sorted(batch.req_ids) == ids and "r1" not in reqs and "r3" in reqs
    rows = [batch.req_id_to_index[r] for r in ids]
    assert batch.num_computed_tokens_cpu[rows].tolist() == [3, 4, 5]
    assert reqs["r2"].block_ids == [2, 40]
    row = batch.req_id_to_index["r2"]
    assert batch.block_table.block_table[row, :2].tolist() == [2, 40]
