// Package emulate is an OpenAI-compatible HTTP server that behaves like one GPU worker running
// vLLM, without a GPU: requests go into the simulator's own engine model (sim.Engine), stepped in
// real time with iteration durations from the cost model (sim.CostModel). `mosaic emulate` runs
// it as a process; tests and the replay code start it in-process with New and Start.
//
// # Time
//
// One goroutine owns the engine. While the engine has work it runs iterations back to back and
// keeps a virtual clock v, the sum of the iteration durations; the tokens of an iteration are
// delivered at the real instant epoch + v/S, where S is the time scale (S > 1 runs faster than
// real time). The schedule is absolute, so timer jitter never accumulates. Iterations shorter
// than the timer granularity are computed back to back and their tokens delivered together at
// the deadline of the last of them (never before an iteration's own deadline; at most about a
// millisecond after it). Requests join the engine between iterations, as in vLLM; a request that
// reaches an idle engine moves the virtual clock to its arrival (real time since epoch x S).
//
// # What a request costs
//
// The prompt length is the number of whitespace-separated words of the prompt (completions:
// `prompt` as a string, or a list of one string; chat: the contents of all messages), or the
// number of token IDs when `prompt` is a list of integers (or a list of one such list), as
// mosaic replay sends it. The output length is `max_tokens` (or
// `max_completion_tokens`), which is required: the emulator always produces exactly that many
// tokens, each the text " tok", as vLLM does with `ignore_eos: true` (accepted and implied;
// `min_tokens` is accepted and needs no effect).
//
// # Prefix caching
//
// With Config.PrefixCaching (ConfigFor and `mosaic emulate` turn it on, as vLLM V1 does;
// `--no-enable-prefix-caching` turns it off) the emulator models vLLM's automatic prefix caching for token-ID prompts: a prompt
// whose leading full KV blocks (Engine.BlockSize tokens each) match blocks of prompts already
// prefilled skips their prefill, always computing at least its last token; the cache forgets
// the least recently used blocks beyond the KV cache's size. The engine sees the prompt less
// its cached tokens; usage still reports the whole prompt, and /metrics count the lookups in
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (tokens) and the setting
// in vllm:cache_config_info. Word prompts are never cached.
//
// Two things isolate caches, as in vLLM V1, so that runs sharing a server (one scheduling
// policy after another) are not served from each other's blocks:
//
//   - A request's `cache_salt` (completions and chat completions) salts its blocks: vLLM adds
//     the salt to the hash of a prompt's first block, and every later block's hash chains
//     through it (sim.BlockHashesSalted), so requests share cached blocks only when their salts
//     are equal (or both absent). A salt that is not a non-empty string is refused with 400 and
//     vLLM's message "Parameter 'cache_salt' must be a non-empty string if provided."; one
//     longer than 128 characters or holding '@', '/', '\' or NUL with vLLM main's "Parameter
//     'cache_salt' must be at most 128 characters and must not contain ...". Without prefix
//     caching, or with a word prompt, a valid salt has nothing to change.
//   - POST /reset_prefix_cache forgets every cached block at the engine's next step boundary
//     and then answers 200 with an empty body, as vLLM's development endpoint does (vLLM
//     serves it only with VLLM_SERVER_DEV_MODE=1; the emulator always, without the API key).
//     As in vLLM the reset is refused, dropping nothing but still answering 200, while running
//     requests hold KV blocks, unless ?reset_running_requests=true preempts them first (to be
//     recomputed); ?reset_external=true has no connector cache to reset here. The counters
//     keep counting across a reset; mosaic:emulate_prefix_cache_resets_total and
//     mosaic:emulate_prefix_cache_reset_refusals_total count resets made and refused.
//     Server.ResetPrefixCache does the same in-process and says which.
//
// The vLLM sources and versions followed are cited on cacheSalt, handleResetPrefixCache and
// sim.BlockHashesSalted.
//
// # Other routes
//
// GET /version answers {"version": Config.Version}, as vLLM does with its own version.
// /metrics count requests received but not yet taken into the engine as waiting.
//
// When a client disconnects, its request is aborted at the next iteration boundary (it leaves
// the batch and frees its KV blocks), as vLLM does.
package emulate
