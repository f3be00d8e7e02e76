package sim

import (
	"container/list"
	"hash/maphash"
)

// The engine's model of vLLM's automatic prefix caching (EngineConfig.PrefixCaching): every
// full block of a computed prompt is kept in the KV cache under a hash that identifies its
// tokens and all tokens before it; a new prompt whose leading full blocks are cached reuses
// them and prefills only the rest (always at least its last token, as vLLM does). Blocks
// referenced by a running sequence stay; unreferenced ones remain in the free pool, reusable
// until an allocation needs their space, the least recently used first.

// cachedBlock is one full prompt block in the cache.
type cachedBlock struct {
	hash uint64
	refs int           // running sequences that use it
	lru  *list.Element // in prefixCache.free while refs == 0
}

// prefixCache holds the cached blocks of one engine.
type prefixCache struct {
	blocks map[uint64]*cachedBlock
	free   *list.List // unreferenced blocks, most recently released at the front
	// queried and hit count prompt tokens looked up and found (vLLM's
	// prefix_cache_queries / prefix_cache_hits).
	queried, hit int64
}

func newPrefixCache() *prefixCache {
	return &prefixCache{blocks: map[uint64]*cachedBlock{}, free: list.New()}
}

// hashSeed makes the derived block hashes of Request.PrefixKey stable within a process.
var hashSeed = maphash.MakeSeed()

// blockHash is the identity of full prompt block i of r: its Blocks' hash, or one derived
// from the shared prefix (PrefixKey, the same for every request that carries it) while the
// block lies within PrefixTokens, and from the request itself beyond.
func (r *Request) blockHash(i int, size int) uint64 {
	if r.Blocks != nil {
		return r.Blocks[i]
	}
	var h maphash.Hash
	h.SetSeed(hashSeed)
	var b [17]byte
	key := r.ID
	b[16] = 1
	if r.PrefixKey != 0 && (i+1)*size <= r.PrefixTokens {
		key, b[16] = r.PrefixKey, 0
	}
	for j := range 8 {
		b[j] = byte(key >> (8 * j))
		b[8+j] = byte(uint64(i) >> (8 * j))
	}
	h.Write(b[:])
	return h.Sum64()
}

// fullBlocks is the number of full blocks of r's prompt that may be cached.
func (r *Request) fullBlocks(size int) int {
	if r.Blocks != nil {
		return min(len(r.Blocks), r.PromptTokens/size)
	}
	return r.PromptTokens / size
}

// BlockHashes returns the chained hash of each full block of a prompt given as token IDs: the
// Request.Blocks of a prompt whose tokens are known (equal blocks behind equal prefixes hash
// alike, whatever follows). It is BlockHashesSalted with no salt.
func BlockHashes(ids []int, size int) []uint64 { return BlockHashesSalted(ids, size, "") }

// BlockHashesSalted is BlockHashes for a request that carries vLLM's cache_salt: the salt is
// an extra key of the prompt's first block only, and since every block's hash chains through
// its parent's, every block of a salted prompt differs from the same prompt's unsalted or
// differently salted blocks, while prompts with the same salt share their prefixes as
// unsalted ones do. This is vLLM V1's scheme: in vllm/v1/core/kv_cache_utils.py,
// generate_block_hash_extra_keys adds request.cache_salt to the extra keys when
// start_token_idx == 0 and the salt is non-empty, and hash_block_tokens hashes (parent hash,
// block tokens, extra keys) (read at vllm-project/vllm commit 001cabc1be16). An empty salt is no
// salt, as there (vLLM's API refuses one); the unsalted hashes are those BlockHashes always gave.
func BlockHashesSalted(ids []int, size int, salt string) []uint64 {
	out := make([]uint64, 0, len(ids)/size)
	var h maphash.Hash
	h.SetSeed(hashSeed)
	var buf [8]byte
	prev := uint64(0)
	for start := 0; start+size <= len(ids); start += size {
		h.Reset()
		for j := range 8 {
			buf[j] = byte(prev >> (8 * j))
		}
		h.Write(buf[:])
		for _, id := range ids[start : start+size] {
			for j := range 8 {
				buf[j] = byte(uint64(id) >> (8 * j))
			}
			h.Write(buf[:])
		}
		if start == 0 && salt != "" {
			// After the block's fixed-length tokens: the salt's length, then the salt.
			for j := range 8 {
				buf[j] = byte(uint64(len(salt)) >> (8 * j))
			}
			h.Write(buf[:])
			h.WriteString(salt)
		}
		prev = h.Sum64()
		out = append(out, prev)
	}
	return out
}

// hits returns how many leading full blocks of s's prompt are cached (so that at least its last
// prompt token is computed) and how many of those are unreferenced (they leave the free pool
// when s takes them).
func (e *Engine) hits(s *seqState) (blocks, unreferenced int) {
	c := e.prefix
	if c == nil || s.cached > 0 || s.computed > 0 {
		return 0, 0
	}
	bs := e.cfg.BlockSize
	limit := min(s.req.fullBlocks(bs), (s.req.PromptTokens-1)/bs)
	for i := range limit {
		b := c.blocks[s.req.blockHash(i, bs)]
		if b == nil {
			break
		}
		blocks++
		if b.refs == 0 {
			unreferenced++
		}
	}
	return blocks, unreferenced
}

// take makes s reuse its first n cached prompt blocks.
func (e *Engine) take(s *seqState, n int) {
	c := e.prefix
	c.queried += int64(s.req.PromptTokens)
	c.hit += int64(n * e.cfg.BlockSize)
	for i := range n {
		b := c.blocks[s.req.blockHash(i, e.cfg.BlockSize)]
		if b.refs == 0 {
			c.free.Remove(b.lru)
			b.lru = nil
			e.free--
			e.evictable--
		}
		b.refs++
	}
	s.cached = n
	s.computed = n * e.cfg.BlockSize
}

// register puts s's newly computed full prompt blocks in the cache, moving them from the
// sequence's own blocks to the cache's; a block another sequence cached meanwhile stays the
// sequence's own.
func (e *Engine) register(s *seqState) {
	c := e.prefix
	bs := e.cfg.BlockSize
	full := min(s.req.fullBlocks(bs), s.computed/bs)
	for i := s.cached; i < full && s.cached == i; i++ {
		h := s.req.blockHash(i, bs)
		if c.blocks[h] != nil {
			return
		}
		c.blocks[h] = &cachedBlock{hash: h, refs: 1}
		s.cached++
		s.blocks--
	}
}

// release drops s's references to its cached blocks: those no longer used join the free pool,
// most recently used first.
func (e *Engine) release(s *seqState) {
	c := e.prefix
	if c == nil || s.cached == 0 {
		return
	}
	bs := e.cfg.BlockSize
	// The last block first, so that a prompt's leading blocks are evicted last.
	for i := s.cached - 1; i >= 0; i-- {
		b := c.blocks[s.req.blockHash(i, bs)]
		b.refs--
		if b.refs == 0 {
			b.lru = c.free.PushFront(b)
			e.free++
			e.evictable++
		}
	}
	s.cached = 0
}

// reclaim evicts unreferenced cached blocks, least recently used first, until the free pool
// covers them (an allocation took their space).
func (e *Engine) reclaim() {
	c := e.prefix
	if c == nil {
		return
	}
	for e.free < e.evictable {
		old := c.free.Back()
		b := old.Value.(*cachedBlock)
		c.free.Remove(old)
		delete(c.blocks, b.hash)
		e.evictable--
	}
}

// ResetPrefixCache forgets every cached prompt block, so that no later prompt reuses a block
// computed before, as vLLM's BlockPool.reset_prefix_cache does (vllm/v1/core/block_pool.py,
// reached from Scheduler.reset_prefix_cache through KVCacheManager.reset_prefix_cache). Like
// vLLM it refuses, changing nothing, while any KV block is in use (a running sequence holds
// blocks; PreemptAll frees them first): it then returns false and the number of blocks in use.
// The lookup counters (Stats.PrefixQueried and PrefixHit) keep counting. Without prefix caching
// there is nothing to forget, but a busy engine still refuses, as vLLM's does. The blocks it
// drops were unreferenced, so the free pool and KVUsage stay as they were.
func (e *Engine) ResetPrefixCache() (ok bool, used int) {
	if used = e.cfg.NumBlocks - e.free; used > 0 {
		return false, used
	}
	if c := e.prefix; c != nil {
		clear(c.blocks)
		c.free.Init()
		e.evictable = 0
	}
	e.plan.ok = false
	return true, 0
}

// PreemptAll preempts every running sequence, the most recently admitted first, as vLLM's
// Scheduler.reset_prefix_cache does with reset_running_requests before it resets the cache:
// each frees its KV blocks and goes back to the front of the queue, the oldest first, to be
// recomputed (prompt and output so far) when admitted again. It returns the preempted IDs;
// they count in Stats.Preemptions but appear in no Iteration.
func (e *Engine) PreemptAll() []uint64 {
	if len(e.running) == 0 {
		return nil
	}
	e.plan.ok = false
	e.sync()
	ids := make([]uint64, 0, len(e.running))
	for len(e.running) > 0 {
		s := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.free += s.blocks
		e.release(s)
		s.blocks, s.computed, s.chunk = 0, 0, 0
		s.preemptions++
		e.preemptions++
		e.front = append(e.front, s)
		ids = append(ids, s.req.ID)
	}
	e.rebuild()
	return ids
}
