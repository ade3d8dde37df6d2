"""Property tests for the block pool and the KV-cache manager.

A hypothesis state machine plays the scheduler: requests with shared prefixes (tiny token alphabet,
so hits and duplicate blocks are common) are admitted with prefix hits and chunked prefills, grow by
decoding, get preempted and finish, on small pools under both free orders (`BlockPool`'s, and the
classic one of `minivllm.testing.ClassicFreeOrderBlockPool`). After every operation the pool's
bookkeeping is checked; a failed `allocate_slots` must leave everything exactly as it was; at the
end everything freed means every block free. Prefix-cache stats count admissions only (as vLLM
0.33): a lookup whose allocation fails adds nothing.
"""
from collections import Counter

import pytest
from hypothesis import event, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from minivllm.core.block_pool import (BlockPool, FreeKVCacheBlockQueue, KVCacheBlock,
    get_request_block_hasher)
from minivllm.core.kv_cache_manager import KVCacheManager
from minivllm.request import Request
from minivllm.testing.block_pool import ClassicFreeOrderBlockPool

ids = lambda blocks: [b.block_id for b in blocks]


# ------------------------------------------------------------ FreeKVCacheBlockQueue unit tests
def walk_backward(q):
    out, b = [], q.fake_free_list_tail.prev_free_block
    while b is not q.fake_free_list_head: out.append(b.block_id); b = b.prev_free_block
    return out[::-1]

def test_queue_initial_order_and_links():
    blocks = [KVCacheBlock(i) for i in range(4)]
    q = FreeKVCacheBlockQueue(blocks)
    assert ids(q.get_all_free_blocks()) == walk_backward(q) == [0, 1, 2, 3]
    assert q.num_free_blocks == len(q) == 4
    assert all(b.prev_free_block is not None and b.next_free_block is not None for b in blocks)

def test_queue_remove_middle_head_tail():
    blocks = [KVCacheBlock(i) for i in range(5)]
    q = FreeKVCacheBlockQueue(blocks)
    for i in (2, 0, 4): q.remove(blocks[i])
    assert ids(q.get_all_free_blocks()) == walk_backward(q) == [1, 3]
    assert blocks[2].prev_free_block is None and blocks[2].next_free_block is None
    with pytest.raises(RuntimeError): q.remove(blocks[2])           # not in the queue any more

def test_queue_popleft_empty_raises():
    q = FreeKVCacheBlockQueue([KVCacheBlock(0)])
    assert q.popleft().block_id == 0
    with pytest.raises(ValueError, match="No free blocks"): q.popleft()
    assert q.get_all_free_blocks() == [] and q.num_free_blocks == 0
    q.append(KVCacheBlock(7))                                    # usable again after being empty
    assert ids(q.get_all_free_blocks()) == [7]

def test_queue_popleft_n_append_n_prepend_n():
    blocks = [KVCacheBlock(i) for i in range(6)]
    q = FreeKVCacheBlockQueue(blocks)
    popped = q.popleft_n(3)
    assert ids(popped) == [0, 1, 2] and all(b.next_free_block is None for b in popped)
    q.append_n([blocks[1], blocks[0]]); q.prepend_n([blocks[2]])
    assert ids(q.get_all_free_blocks()) == walk_backward(q) == [2, 3, 4, 5, 1, 0]
    q.prepend_n([]); q.append_n([])
    assert q.num_free_blocks == 6

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8),
       st.lists(st.tuples(st.sampled_from("remove popleft append prepend".split()),
                          st.integers(0, 100)), max_size=40))
def test_queue_matches_list_model(n, ops):
    blocks = [KVCacheBlock(i) for i in range(n)]
    q, model = FreeKVCacheBlockQueue(blocks), list(range(n))
    for op, k in ops:
        outside = [b for b in blocks if b.block_id not in model]
        if op == "remove" and model:
            bid = model[k % len(model)]; q.remove(blocks[bid]); model.remove(bid)
        elif op == "popleft":
            if model: assert q.popleft().block_id == model.pop(0)
            else:
                with pytest.raises(ValueError): q.popleft()
        elif op == "append" and outside:
            b = outside[k % len(outside)]; q.append_n([b]); model.append(b.block_id)
        elif op == "prepend" and outside:
            chosen = outside[: 1 + k % len(outside)]; q.prepend_n(chosen); model[:0] = ids(chosen)
        assert ids(q.get_all_free_blocks()) == walk_backward(q) == model
        assert q.num_free_blocks == len(model)


# ------------------------------------------------------------ BlockPool unit tests
def test_pool_null_block_and_failed_get_new_blocks():
    pool = BlockPool(5)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 4
    assert ids(pool.get_new_blocks(2)) == [1, 2]
    before = ids(pool.free_block_queue.get_all_free_blocks())
    with pytest.raises(ValueError): pool.get_new_blocks(3)
    assert ids(pool.free_block_queue.get_all_free_blocks()) == before
    assert pool.get_usage() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one usable block"): BlockPool(1)

def test_free_orders_today_and_classic():
    "Today: unhashed freed blocks to the head, hashed ones to the tail. Classic: all to the tail."
    def free_order(pool):
        held = pool.get_new_blocks(3)                               # blocks 1, 2, 3; 2 is hashed
        held[1].block_hash = b"h"; pool.cached_block_hash_to_block.insert(b"h", held[1])
        pool.free_blocks(reversed(held))                            # tail first: 3, 2, 1
        return ids(pool.free_block_queue.get_all_free_blocks())
    assert free_order(BlockPool(6)) == [3, 1, 4, 5, 2]
    assert free_order(ClassicFreeOrderBlockPool(6)) == [4, 5, 3, 2, 1]


# ------------------------------------------------------------ state checks shared by the machine
def pool_state(kvm):
    "Everything a failed allocate_slots must leave unchanged."
    pool = kvm.block_pool
    link = lambda b: b.block_id if b is not None else None
    return (tuple((b.ref_cnt, b.block_hash, link(b.prev_free_block), link(b.next_free_block))
                  for b in pool.blocks),
            tuple(ids(pool.free_block_queue.get_all_free_blocks())), pool.get_num_free_blocks(),
            frozenset((k, b.block_id) for k, b in pool.cached_block_hash_to_block.iter_blocks()),
            tuple(sorted((r, tuple(ids(bs))) for r, bs in kvm.req_to_blocks.items())),
            tuple(sorted(kvm.num_cached_block.items())))

def check_pool(kvm, requests):
    "The pool's bookkeeping invariants: free queue, holders, ref counts, hash map, usage, hashes."
    pool, N = kvm.block_pool, kvm.block_pool.num_gpu_blocks
    free = ids(pool.free_block_queue.get_all_free_blocks())
    assert free == walk_backward(pool.free_block_queue), "free queue links broken"
    assert len(free) == len(set(free)) == pool.get_num_free_blocks()
    holders = Counter(b.block_id for blocks in kvm.req_to_blocks.values() for b in blocks)
    # free queue + held blocks = all blocks but the null block, disjoint
    assert set(free).isdisjoint(holders) and set(free) | set(holders) == set(range(1, N))
    # each ref count equals the number of holders
    for b in pool.blocks[1:]: assert b.ref_cnt == holders.get(b.block_id, 0), (b, holders)
    # hashed block <-> in the hash map (under its own hash)
    mapped = {(k, b.block_id) for k, b in pool.cached_block_hash_to_block.iter_blocks()}
    hashed = {(b.block_hash, b.block_id) for b in pool.blocks if b.block_hash is not None}
    assert mapped == hashed
    assert pool.null_block.block_hash is None and 0 not in holders
    if not kvm.enable_caching: assert not hashed
    assert pool.get_usage() == pytest.approx(1 - len(free) / (N - 1))
    for req in requests:
        assert len(req.block_hashes) == req.num_tokens // kvm.block_size
        blocks = kvm.req_to_blocks.get(req.request_id, [])
        assert len(blocks) * kvm.block_size >= min(req.num_computed_tokens, kvm.max_model_len)
        n_cached = kvm.num_cached_block.get(req.request_id, 0)
        assert n_cached <= len(blocks)
        if kvm.enable_caching:  # the request's cached blocks hold its own chain of hashes
            assert [b.block_hash for b in blocks[:n_cached]] == req.block_hashes[:n_cached]
        common = kvm.get_num_common_prefix_blocks(req.request_id)
        assert all(b.ref_cnt == len(kvm.req_to_blocks) for b in blocks[:common])


# ------------------------------------------------------------ the scheduler-like state machine
PREFIXES = [[1, 2, 1, 2, 1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 0, 0, 0, 0],
            [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]]
MAX_MODEL_LEN = 40
prompts = st.builds(lambda prefix, keep, tail: (prefix[:keep] + tail)[:MAX_MODEL_LEN - 4] or [0],
                    st.sampled_from(PREFIXES), st.integers(3, 12),
                    st.lists(st.integers(0, 2), max_size=8))

class KVCacheMachine(RuleBasedStateMachine):
    "Drives a KVCacheManager the way the scheduler does and checks the pool after every step."

    @initialize(num_blocks=st.integers(2, 20), block_size=st.sampled_from([1, 2, 4]),
                caching=st.sampled_from([True, True, True, False]), classic=st.booleans(),
                first=st.lists(prompts, min_size=1, max_size=4))
    def setup(self, num_blocks, block_size, caching, classic, first):
        self.kvm = KVCacheManager(num_blocks, block_size, MAX_MODEL_LEN, enable_caching=caching,
                                  log_stats=True)
        if classic: self.kvm.block_pool = ClassicFreeOrderBlockPool(num_blocks, caching)
        self.hasher = get_request_block_hasher(block_size)
        self.waiting, self.running, self.n = [], [], 0
        self.expected_stats = Counter()          # what the admissions so far should have recorded
        for prompt in first: self.add_request(prompt)

    def all_requests(self): return self.waiting + self.running

    def try_allocate(self, req, num_new_tokens, hit_tokens=0, hits=None, lookahead=0):
        "allocate_slots; on None assert nothing changed, on success advance num_computed_tokens."
        before = pool_state(self.kvm)
        new = self.kvm.allocate_slots(req, num_new_tokens, hit_tokens, hits,
                                      num_lookahead_tokens=lookahead)
        if new is None:
            event("allocate_slots returned None")
            assert pool_state(self.kvm) == before, "failed allocate_slots changed state"
            return False
        assert set(ids(new.blocks)) <= set(self.kvm.get_block_ids(req.request_id))
        req.num_computed_tokens += hit_tokens + num_new_tokens
        return True

    @rule(prompt=prompts)
    def add_request(self, prompt):
        self.waiting.append(Request(f"r{self.n}", prompt, block_hasher=self.hasher)); self.n += 1

    @rule(pick=st.integers(0, 100), chunk=st.integers(1, 40))
    def admit(self, pick, chunk):
        if not self.waiting: return
        req = self.waiting[pick % len(self.waiting)]
        hits, hit_tokens = self.kvm.get_computed_blocks(req)
        assert hit_tokens % self.kvm.block_size == 0 and hit_tokens <= req.num_tokens - 1
        assert hit_tokens == len(hits) * self.kvm.block_size
        if hit_tokens: event("prefix hit")
        if any(b.ref_cnt == 0 for b in hits.blocks): event("hit on a free cached block")
        num_new = min(chunk, req.num_tokens - hit_tokens)            # chunked prefill
        num_tokens, preempted = req.num_tokens, req.num_preemptions > 0
        if self.try_allocate(req, num_new, hit_tokens, hits):
            self.kvm.record_prefix_cache_stats(req, hit_tokens)   # the scheduler: at admission only
            if self.kvm.enable_caching:
                pre = "preempted_" if preempted else ""
                self.expected_stats.update({pre + "requests": 1, pre + "queries": num_tokens,
                                            pre + "hits": hit_tokens})
            self.waiting.remove(req); self.running.append(req)

    @rule(pick=st.integers(0, 100), chunk=st.integers(1, 40), token=st.integers(0, 2),
          lookahead=st.integers(0, 2))
    def step(self, pick, chunk, token, lookahead):
        if not self.running: return
        req = self.running[pick % len(self.running)]
        if req.num_computed_tokens == req.num_tokens:      # decode: sample a token, schedule it
            if req.num_tokens >= MAX_MODEL_LEN: return
            req.append_output_token_ids(token)
        num_new = min(chunk, req.num_tokens - req.num_computed_tokens)
        if not self.try_allocate(req, num_new, lookahead=lookahead): self.preempt_request(req)

    def preempt_request(self, req):
        self.kvm.free(req)
        req.num_computed_tokens, req.num_preemptions = 0, req.num_preemptions + 1
        self.running.remove(req); self.waiting.insert(0, req)

    @rule(pick=st.integers(0, 100))
    def preempt(self, pick):
        if self.running: self.preempt_request(self.running[pick % len(self.running)])

    @rule(pick=st.integers(0, 100))
    def finish(self, pick):
        if not self.running: return
        req = self.running.pop(pick % len(self.running))
        self.kvm.free(req)
        assert req.request_id not in self.kvm.req_to_blocks
        assert req.request_id not in self.kvm.num_cached_block

    @rule()
    def reset_prefix_cache(self):
        assert self.kvm.reset_prefix_cache() == (not self.running)
        if not self.running: assert len(self.kvm.block_pool.cached_block_hash_to_block) == 0

    @rule()
    def stats(self):
        s = self.kvm.make_prefix_cache_stats()
        assert 0 <= s.hits <= s.queries and 0 <= s.preempted_hits <= s.preempted_queries
        keys = ("requests", "queries", "hits",
                "preempted_requests", "preempted_queries", "preempted_hits")
        got = {k: getattr(s, k) for k in keys}
        assert got == {k: self.expected_stats[k] for k in got}, (got, self.expected_stats)
        self.expected_stats = Counter()

    @invariant()
    def pool_is_consistent(self):
        if hasattr(self, "kvm"): check_pool(self.kvm, self.running)

    def teardown(self):
        if not hasattr(self, "kvm"): return
        for req in self.running: self.kvm.free(req)
        pool = self.kvm.block_pool
        assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1 and self.kvm.usage == 0
        assert self.kvm.req_to_blocks == {} and self.kvm.num_cached_block == {}
        check_pool(self.kvm, [])
        assert self.kvm.reset_prefix_cache()

KVCacheMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=50, deadline=None)
TestKVCacheMachine = KVCacheMachine.TestCase


# ------------------------------------------------------------ prefix-hit properties
@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.lists(st.integers(0, 2), min_size=1, max_size=30),
       st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_hit_is_longest_common_block_prefix(block_size, first, second):
    "After `first` is cached, `second` hits its longest block-aligned common prefix (< num_tokens)."
    kvm, hasher = KVCacheManager(64, block_size, 64), get_request_block_hasher(block_size)
    a = Request("a", first, block_hasher=hasher)
    assert kvm.allocate_slots(a, a.num_tokens) is not None
    b = Request("b", second, block_hasher=hasher)
    _, hit = kvm.get_computed_blocks(b)
    common = next((i for i, (x, y) in enumerate(zip(first, second)) if x != y),
                  min(len(first), len(second)))
    expected = block_size * min(common // block_size, len(first) // block_size,
                                (len(second) - 1) // block_size)
    assert hit == expected
