package replay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// profileSeed seeds the profiling prompts.
const profileSeed = 0x70726f66696c65 // "profile"

// Measurement is one batch of a profiling sweep: Batch requests of Length prompt and Output
// output tokens sent together; Latency is the time until the last finished (scaled by the
// time scale, in seconds).
type Measurement struct {
	Length, Output, Batch int
	Latency               float64
}

// Profiled is what a profiling run measured: the batch latencies, and, for a server that loads
// models through its API (Ollama), the times its loads took (seconds, scaled).
type Profiled struct {
	Batches []Measurement
	Loads   []float64
}

// ProfileConfig says what to measure.
type ProfileConfig struct {
	URL, Model, APIKey string
	Lengths, Batches   []int
	// Outputs are the output lengths to sweep with each prompt length; 0 stands for the
	// prompt's length (the default, {0}: prompt = output). A short output beside the equal
	// one separates a prompt token's cost from a generated one's.
	Outputs []int
	// TimeScale converts the server's real time to model time (an emulator's --time-scale).
	TimeScale float64
	// Warmup requests sent before measuring (a cold server is slower at first).
	Warmup int
	// API is the server's protocol (default APIOpenAI); PromptWords the words of text prompts
	// (APIOllama; default DefaultPromptWords).
	API         API
	PromptWords int
	// Loads is how many times to unload and load the model and time the load (APIOllama
	// only: a vLLM server serves one model for its life).
	Loads int
	// Progress, when set, is called after each measurement.
	Progress func(Measurement)
}

// Profile measures batch latencies over the sweep of lengths x batch sizes against one
// OpenAI-compatible server (or Ollama): the offline profiling step that `mosaic profile` fits
// the cost model's coefficients to; with Loads, also how long the server takes to load the
// model.
func Profile(ctx context.Context, pc ProfileConfig) (Profiled, error) {
	if pc.TimeScale <= 0 {
		pc.TimeScale = 1
	}
	pc.API = pc.API.orDefault()
	if pc.PromptWords <= 0 {
		pc.PromptWords = DefaultPromptWords
	}
	var prof Profiled
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	if status, err := probeHealth(ctx, hc, pc.URL, pc.API); status != http.StatusOK {
		why := fmt.Sprintf("HTTP %d", status)
		if err != nil {
			why = err.Error()
		}
		return prof, fmt.Errorf("%s does not answer GET %s with 200: %s", pc.URL, pc.API.healthPath(), why)
	}
	ids, err := servedModels(ctx, hc, pc.URL, pc.APIKey)
	if err != nil {
		return prof, fmt.Errorf("%s: %w", pc.URL, err)
	}
	found := false
	for _, id := range ids {
		found = found || id == pc.Model || (pc.API == APIOllama && sameOllamaModel(id, pc.Model))
	}
	if !found {
		return prof, fmt.Errorf("%s serves %v, not %q", pc.URL, ids, pc.Model)
	}
	if pc.Loads > 0 && !pc.API.loadsThroughAPI() {
		return prof, fmt.Errorf("the %s API loads no models: a server serves one for its life (measure its start-up instead)", pc.API)
	}
	for i := range pc.Loads {
		if err := ollamaUnload(ctx, hc, pc.URL, pc.Model); err != nil {
			return prof, err
		}
		began := time.Now()
		if err := ollamaLoad(ctx, hc, pc.URL, pc.Model); err != nil {
			return prof, err
		}
		d := time.Since(began).Seconds() * pc.TimeScale
		prof.Loads = append(prof.Loads, d)
		slog.Info("measured a load", "model", pc.Model, "load", i+1, "of", pc.Loads, "seconds", d)
	}
	sent := 0 // requests so far: each gets its own prompt, so no prefix cache serves it
	if pc.Warmup > 0 {
		slog.Info("warming up", "requests", pc.Warmup)
		if _, err := batch(ctx, hc, pc, 64, 64, pc.Warmup, &sent); err != nil {
			return prof, fmt.Errorf("warm-up: %w", err)
		}
	}
	outputs := pc.Outputs
	if len(outputs) == 0 {
		outputs = []int{0}
	}
	for _, l := range pc.Lengths {
		for _, o := range outputs {
			if o == 0 {
				o = l
			}
			for _, b := range pc.Batches {
				d, err := batch(ctx, hc, pc, l, o, b, &sent)
				if err != nil {
					return prof, fmt.Errorf("L=%d out=%d B=%d: %w", l, o, b, err)
				}
				m := Measurement{Length: l, Output: o, Batch: b, Latency: d.Seconds() * pc.TimeScale}
				prof.Batches = append(prof.Batches, m)
				if pc.Progress != nil {
					pc.Progress(m)
				}
			}
		}
	}
	return prof, nil
}

// batch sends b requests of l prompt and out output tokens at once and returns the time
// until the last finished. Every request has a prompt of its own (drawn from a stream numbered
// by *sent), so a server's prefix cache cannot shorten a prefill.
func batch(ctx context.Context, hc *http.Client, pc ProfileConfig, l, out, b int, sent *int) (time.Duration, error) {
	reqs := make([]request, b)
	for i := range reqs {
		reqs[i] = request{Model: pc.Model, MaxTokens: out, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}, promptTokens: l}
		if pc.API == APIOllama {
			reqs[i].Prompt = PromptText(profileSeed, *sent, 0, l-1, 0, pc.PromptWords) // and the BOS token
			seed := 0
			reqs[i].Seed = &seed
		} else {
			reqs[i].Prompt = PromptIDs(profileSeed, *sent, 0, l, 0, 0)
			reqs[i].MinTokens, reqs[i].IgnoreEOS = out, true
		}
		*sent++
	}
	start := time.Now()
	errs := make([]error, b)
	var wg sync.WaitGroup
	for i := range b {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = complete(ctx, hc, pc.URL, pc.APIKey, reqs[i], Timeouts{})
			if errs[i] != nil && ctx.Err() == nil {
				errs[i] = fmt.Errorf("request %d of the batch: %w", i, errs[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
