package replay

import (
	"log/slog"
	"sync"
	"time"
)

// overheads measures what the replay itself adds to the measured times, so that a
// difference from the simulator can be traced to its source. All durations are real time.
type overheads struct {
	mu sync.Mutex
	// dispatch: from Submit until the request went out (a place on the server, the send
	// lock, the prompt); headers: from sending until the response headers arrived (one round
	// trip, and the server's queuing of the request); pickup: from when an event happened
	// until the Driver received it.
	dispatch, headers, pickup spread
	// lag sums how late calls were sent after they could have been (a place on their server
	// free and nothing before them), and handling how long the Driver took to act on each
	// finished call (from its stream's end to its next request for an event); served sums
	// the finished calls' service times (sending to the stream's end). Their ratio is the
	// share of the servers' time the host's own delays cost.
	lag, handling, served time.Duration
	// server sums the lateness the servers report of themselves (emulators sharing the host).
	server time.Duration
	// sends spreads the lags of single sends.
	sends spread
}

// spread accumulates durations: their count, mean and maximum.
type spread struct {
	n        int
	sum, max time.Duration
}

func (s *spread) add(d time.Duration) {
	s.n++
	s.sum += d
	s.max = max(s.max, d)
}

func (s spread) mean() time.Duration {
	if s.n == 0 {
		return 0
	}
	return s.sum / time.Duration(s.n)
}

func (o *overheads) record(f func(o *overheads)) {
	o.mu.Lock()
	f(o)
	o.mu.Unlock()
}

// log writes the overheads, in real milliseconds, and what they come to in the experiment's
// time base at the given time scale.
func (o *overheads) log(scale float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dispatch.n == 0 && o.pickup.n == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slog.Info("replay overheads (real ms; x time scale in the results)", "time_scale", scale,
		"calls_sent", o.headers.n,
		"dispatch_mean_ms", ms(o.dispatch.mean()), "dispatch_max_ms", ms(o.dispatch.max),
		"headers_mean_ms", ms(o.headers.mean()), "headers_max_ms", ms(o.headers.max),
		"events", o.pickup.n, "pickup_mean_ms", ms(o.pickup.mean()), "pickup_max_ms", ms(o.pickup.max))
}

// HostLag is how much the replaying host's own delays cost a run: how late it sent calls
// after they could have gone (a place on their server free and nothing before them) and how
// late it acted on finished calls, against the calls' service time, all in real time. At time
// scale s the servers run s times faster than the experiment's clock while the host's delays
// do not shrink, so the share grows with s: a share above HostLagThresholdPct means the
// measured times are stretched by the host, not by the servers. Emulators report their own
// lateness (they share the host), which counts too. The share is a lower bound of the
// stretch: the network's and a real server's own delays are not seen.
type HostLag struct {
	Calls int `json:"calls"`
	// DispatchS and HandlingS are the delays summed (real seconds), ServedS the calls'
	// service times summed (sending to the stream's end).
	DispatchS float64 `json:"dispatch_s"`
	HandlingS float64 `json:"handling_s"`
	// ServerS is the lateness the servers reported of themselves (emulators on this host:
	// their finished requests' last tokens after their deadlines, summed).
	ServerS float64 `json:"server_s"`
	ServedS float64 `json:"served_s"`
	// MeanDispatchMS and MaxDispatchMS describe the sends' delays after the servers had room.
	MeanDispatchMS float64 `json:"mean_dispatch_ms"`
	MaxDispatchMS  float64 `json:"max_dispatch_ms"`
	// Pct is the delays' share of the service time, in percent.
	Pct float64 `json:"pct"`
	// TimeScale is the run's; FitTimeScale the largest that would keep Pct at half the
	// threshold, at the delays measured (0 when there is nothing to scale).
	TimeScale    float64 `json:"time_scale"`
	FitTimeScale float64 `json:"fit_time_scale,omitempty"`
}

// HostLagThresholdPct is the share of the servers' time above which the host's own delays
// are reported as bending the results.
const HostLagThresholdPct = 1.0

// Over reports whether the lag is above HostLagThresholdPct.
func (h HostLag) Over() bool { return h.Pct > HostLagThresholdPct }

// HostLag reports the run's host lag so far.
func (b *Backend) HostLag() HostLag {
	o := &b.over
	o.mu.Lock()
	defer o.mu.Unlock()
	h := HostLag{Calls: o.headers.n, DispatchS: o.lag.Seconds(), HandlingS: o.handling.Seconds(), ServerS: max(0, o.server.Seconds()),
		ServedS: o.served.Seconds(), TimeScale: b.cfg.TimeScale}
	if o.sends.n > 0 {
		h.MeanDispatchMS = float64(o.sends.mean().Microseconds()) / 1000
		h.MaxDispatchMS = float64(o.sends.max.Microseconds()) / 1000
	}
	if h.ServedS > 0 {
		h.Pct = 100 * (h.DispatchS + h.HandlingS + h.ServerS) / h.ServedS
		if h.Pct > 0 {
			h.FitTimeScale = b.cfg.TimeScale * HostLagThresholdPct / 2 / h.Pct
		}
	}
	return h
}
