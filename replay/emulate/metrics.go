package emulate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/mosaic-sched/mosaic/sim"
)

// metrics are the Prometheus series /metrics exposes, named as vLLM names them.
type metrics struct {
	mu    sync.Mutex
	label string // `model_name="..."`
	cache string // the labels of vllm:cache_config_info
	v     metricValues
}

type metricValues struct {
	running, waiting int
	kvUsage          float64

	promptTokens, generationTokens int64
	successLength, successStop     int64
	preemptions                    int64
	lag, maxLag                    float64 // seconds a delivery came after its deadline: latest, worst
	lagSum                         float64 // the sum over deliveries
	finishLag                      float64 // the sum over finished requests of their last delivery's lag
	deliveries                     int64
	received                       int64 // requests accepted into the engine
	injectedErrors                 int64
	injectedDisconnects            int64
	prefixQueries, prefixHits      int64 // prompt tokens looked up in the prefix cache, and found
	prefixResets                   int64 // POST /reset_prefix_cache calls that reset the cache
	prefixResetRefusals            int64 // and that found KV blocks in use, dropping nothing
}

// extra are the values the server adds when the metrics are read.
type extra struct {
	arriving     int64 // requests received and not yet in the engine (waiting too)
	connections  int64
	maxConnected int64
}

func (m *metrics) init(model string, eng sim.EngineConfig, prefixCaching bool) {
	m.label = `model_name="` + escapeLabel(model) + `"`
	pc := "False"
	if prefixCaching {
		pc = "True"
	}
	m.cache = fmt.Sprintf(`block_size="%d",enable_prefix_caching="%s",num_gpu_blocks="%d"`, eng.BlockSize, pc, eng.NumBlocks)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// setQueue records the engine's queue after admissions.
func (m *metrics) setQueue(eng *sim.Engine) {
	m.mu.Lock()
	m.v.running, m.v.waiting, m.v.kvUsage = eng.Running(), eng.Waiting(), eng.KVUsage()
	st := eng.Stats()
	m.v.prefixQueries, m.v.prefixHits = st.PrefixQueried, st.PrefixHit
	m.mu.Unlock()
}

// update records delivered iterations and the engine's state at their deadline.
func (m *metrics) update(eng *sim.Engine, prompt, generated int64, length, stop, preempted int, lag float64) {
	m.mu.Lock()
	m.v.lag, m.v.maxLag = lag, max(m.v.maxLag, lag)
	m.v.lagSum += lag
	m.v.finishLag += lag * float64(length+stop)
	m.v.deliveries++
	m.v.running, m.v.waiting, m.v.kvUsage = eng.Running(), eng.Waiting(), eng.KVUsage()
	st := eng.Stats()
	m.v.prefixQueries, m.v.prefixHits = st.PrefixQueried, st.PrefixHit
	m.v.promptTokens += prompt
	m.v.generationTokens += generated
	m.v.successLength += int64(length)
	m.v.successStop += int64(stop)
	m.v.preemptions += int64(preempted)
	m.mu.Unlock()
}

// lags returns the mean and the largest delivery lag so far, in seconds.
func (m *metrics) lags() (mean, worst float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.v.deliveries > 0 {
		mean = m.v.lagSum / float64(m.v.deliveries)
	}
	return mean, m.v.maxLag
}

// count adds to a counter of the emulator's own.
func (m *metrics) count(f func(v *metricValues)) {
	m.mu.Lock()
	f(&m.v)
	m.mu.Unlock()
}

// write prints the series in the Prometheus text format.
func (m *metrics) write(w io.Writer, x extra) error {
	m.mu.Lock()
	c, label := m.v, m.label
	m.mu.Unlock()
	c.waiting += int(x.arriving)
	var b strings.Builder
	series := func(name, kind, help string, values ...string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
		for _, v := range values {
			b.WriteString(name)
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	plain := func(v float64) string { return "{" + label + "} " + num(v) }
	series("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", plain(float64(c.running)))
	series("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", plain(float64(c.waiting)))
	series("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", plain(c.kvUsage))
	series("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage (the name before vLLM 0.10). 1 means 100 percent usage.", plain(c.kvUsage))
	series("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", plain(float64(c.promptTokens)))
	series("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", plain(float64(c.generationTokens)))
	series("vllm:request_success_total", "counter", "Count of successfully processed requests.",
		`{finished_reason="length",`+label+"} "+num(float64(c.successLength)),
		`{finished_reason="stop",`+label+"} "+num(float64(c.successStop)))
	series("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.", plain(float64(c.preemptions)))
	series("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", plain(float64(c.prefixQueries)))
	series("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", plain(float64(c.prefixHits)))
	series("vllm:cache_config_info", "gauge", "Information of the KV cache configuration.", "{"+m.cache+"} 1")
	series("mosaic:emulate_lag_seconds", "gauge", "Real seconds the latest tokens were delivered after their deadline.", plain(c.lag))
	series("mosaic:emulate_max_lag_seconds", "gauge", "Most real seconds tokens were delivered after their deadline.", plain(c.maxLag))
	series("mosaic:emulate_lag_seconds_total", "counter", "Real seconds deliveries of tokens came after their deadlines, summed.", plain(c.lagSum))
	series("mosaic:emulate_finish_lag_seconds_total", "counter", "Real seconds finished requests' last tokens were delivered after their deadlines, summed over the requests: what the host's lateness added to their service.", plain(c.finishLag))
	series("mosaic:emulate_deliveries_total", "counter", "Deliveries of tokens (one per iteration, or per run of iterations shorter than a timer tick).", plain(float64(c.deliveries)))
	series("mosaic:emulate_requests_total", "counter", "Requests the emulator accepted into its engine.", plain(float64(c.received)))
	series("mosaic:emulate_injected_errors_total", "counter", "Requests answered with an injected HTTP 500.", plain(float64(c.injectedErrors)))
	series("mosaic:emulate_injected_disconnects_total", "counter", "Requests whose connection was dropped mid-stream by an injected fault.", plain(float64(c.injectedDisconnects)))
	series("mosaic:emulate_prefix_cache_resets_total", "counter", "Prefix-cache resets (POST /reset_prefix_cache) that dropped every cached block.", plain(float64(c.prefixResets)))
	series("mosaic:emulate_prefix_cache_reset_refusals_total", "counter", "Prefix-cache resets refused, dropping nothing, because running requests held KV blocks.", plain(float64(c.prefixResetRefusals)))
	series("mosaic:emulate_open_connections", "gauge", "Client connections open now.", plain(float64(x.connections)))
	series("mosaic:emulate_max_open_connections", "gauge", "Most client connections open at once.", plain(float64(x.maxConnected)))
	_, err := io.WriteString(w, b.String())
	return err
}
