// Package sim is MOSAIC's simulator core: a model of one vLLM-like inference engine, the cost
// model that says how long its iterations and model loads take on a given GPU, the catalogs of
// GPUs, models and engine presets the cost model reads, the profile of fitted coefficients, and
// the discrete-event clock that the simulated cluster (package simulated) runs on.
//
// # The pieces
//
//   - The engine model. Engine is a continuous-batching engine written as a pure state
//     machine, in the style of etcd-io/raft: no clock, no goroutines, no I/O. The caller adds
//     requests (Add) and asks for the next iteration (Step, or Advance, which covers a steady
//     decode phase of many identical iterations in closed form); each call returns an
//     Iteration that says how long it took and which sequences produced tokens, got their
//     first token, finished, were admitted or were preempted. The caller owns time: Serve and
//     simulated step engines in virtual time, replay/emulate in real time, with the same
//     engine. The scheduler follows vLLM: max_num_seqs, a token budget per
//     iteration, chunked prefill (or vLLM V0's prefill-first scheduling), a paged KV cache
//     with a watermark, and preemption by recomputation of the most recently admitted
//     sequence when a running one needs a block and none is free (EngineConfig).
//   - The cost model. CostModel binds a Model to a GPU (or a tensor-parallel group of them,
//     WithTP) and Coefficients, and predicts an iteration's duration from the work of its
//     batch (Batch: tokens, attention pairs, KV traffic, sequences) as a two-part roofline
//     plus all-reduces and CPU overheads; its doc comment gives the formula with units. It
//     also gives a model's load time and the KV-cache blocks that fit beside its weights
//     (KVBlocks, which EngineConfig.WithKVCache uses to size an engine).
//   - The catalogs. Catalog holds the GPUs (peak FLOP/s, HBM bandwidth, memory,
//     interconnect), the models (architectures from their config.json) and the EnginePresets
//     (one engine version's scheduler defaults and measured CPU overheads) an experiment may
//     name; the built-in ones are embedded from catalog/*.toml (DefaultCatalog), and a user's
//     TOML file extends them (Catalog.AddFile).
//   - The profile. Profile holds the fitted Coefficients of each measured GPU and a default
//     set for the others (DefaultProfile: catalog/profile.toml, written by
//     `mosaic calibrate --fit`; LoadProfile reads a user's). Package sim/calibrate fits them.
//   - Prefix caching. With EngineConfig.PrefixCaching the engine keeps the full KV blocks of
//     computed prompts under chained hashes of their tokens, as vLLM's automatic prefix
//     caching does, and a prompt that starts with cached blocks prefills only the rest
//     (Request.Blocks, Request.PrefixKey, BlockHashes).
//   - The event core. Queue is a virtual clock with events ordered by (time, sequence
//     number); Stream gives each subsystem of a seeded run its own random source. There is no
//     wall clock and no global random source, so the same seed gives the same results.
//
// How they fit: a GPU and a Model from the Catalog, with Profile.For(gpu)'s Coefficients
// (through EnginePreset.Apply when an engine preset was chosen), make a CostModel
// (NewCostModel); DefaultEngine's scheduler settings (or a preset's: EnginePreset.Budget),
// with the KV cache that EngineConfig.WithKVCache sizes for that CostModel, are the
// EngineConfig; NewEngine(cfg, cost) is an idle Engine. Serve runs one over a list of timed
// Arrivals (calibration, and the MOSAIC policy's offline profile, do so); simulated runs
// one per model loaded on each of its workers. Package experiments does this resolution for an
// experiment file; the policies read the same CostModel in their ModelInfo.
//
// # Reading guide
//
// Start with the examples in example_test.go (Example serves three requests on an engine built
// from the catalog; ExampleEngine steps one by hand) and the scenario scripts in testdata,
// basic.txt first: an engine's steps one by one, each with its expected output and a comment
// that says what to look for (scenario_test.go describes their commands). Then read, in this
// order:
//
//  1. engine.go, its exported half: EngineConfig, Request, Iteration, Engine and its doc
//     comment, Add, Step, Advance; then generalStep, scheduleRunning and admit, the scheduler
//     written plainly, one pass over the batch per iteration.
//  2. batch.go: Serve, the smallest driver of an engine, and what it records.
//  3. cost.go: Coefficients, Batch and the CostModel doc comment (the formula), then
//     NewCostModel and IterationSeconds; LoadTime and KVBlocks at the end.
//  4. catalog.go, preset.go and profile.go, with the TOML files in catalog/ beside them.
//  5. event.go and rand.go: the event queue and the seeded streams.
//  6. The rest of engine.go (the closed-form decode stretches: analyse, decodeStretch,
//     SteadyPlan, RunSteady), then fastpath.go: the fast path that keeps plain decoders
//     grouped, so that an iteration costs in the sequences that are not plain decodes rather
//     than in the batch. It must give exactly what the general path gives, which
//     TestFastPathMatchesGeneral checks; skip it on a first reading.
//  7. prefix.go: prefix caching, and Grow in engine.go: open requests, whose prompt grows
//     while their inputs still run (prefill-decode overlap).
//
// Then simulated, which runs engines on the workers of a simulated cluster behind the
// policies' Backend contract, and sim/calibrate, which compares the cost model with
// measurements and fits its coefficients.
package sim
