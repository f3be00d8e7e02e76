package sim

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Arrival is a request that reaches the engine at a point in virtual time.
type Arrival struct {
	At time.Duration
	Request
}

// RequestTimes records when a request first produced a token and when it finished.
type RequestTimes struct {
	ID          uint64
	Arrival     time.Duration
	FirstToken  time.Duration
	Finish      time.Duration
	Preemptions int
}

// BatchResult summarises one engine serving a set of requests.
type BatchResult struct {
	// Makespan is the time from 0 until the last request finished.
	Makespan     time.Duration
	Requests     int
	OutputTokens int64
	Stats        Stats
	// Times holds per-request times, in the order the requests were given.
	Times []RequestTimes
}

// OutputThroughput is output tokens per second over the makespan.
func (r BatchResult) OutputThroughput() float64 {
	if r.Makespan <= 0 {
		return 0
	}
	return float64(r.OutputTokens) / r.Makespan.Seconds()
}

// ErrStalled is returned when an engine makes no progress although it has work.
var ErrStalled = errors.New("sim: engine stalled with work queued")

// Serve runs the requests on eng, which must be idle, in virtual time from 0 until all have
// finished. Arrivals at the same instant are queued in the order given. It uses Advance, so steady decode phases cost
// one step of the loop each, not one per token.
func Serve(eng *Engine, reqs []Arrival) (BatchResult, error) {
	if !eng.Idle() {
		return BatchResult{}, errors.New("sim: Serve needs an idle engine")
	}
	order := make([]int, len(reqs))
	index := make(map[uint64]int, len(reqs))
	res := BatchResult{Requests: len(reqs), Times: make([]RequestTimes, len(reqs))}
	for i, r := range reqs {
		order[i] = i
		if _, dup := index[r.ID]; dup {
			return res, fmt.Errorf("duplicate request id %d", r.ID)
		}
		index[r.ID] = i
		res.Times[i] = RequestTimes{ID: r.ID, Arrival: r.At}
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].At < reqs[order[b]].At })
	var now time.Duration
	next, idle := 0, 0
	for next < len(order) || !eng.Idle() {
		for next < len(order) && reqs[order[next]].At <= now {
			if err := eng.Add(reqs[order[next]].Request); err != nil {
				return res, err
			}
			next++
		}
		if eng.Idle() {
			now = reqs[order[next]].At
			continue
		}
		var horizon time.Duration
		if next < len(order) {
			horizon = reqs[order[next]].At - now
		}
		it := eng.Advance(horizon)
		if it.Steps == 0 && len(it.Preempted) == 0 {
			if idle++; idle > 2 {
				return res, ErrStalled
			}
			continue
		}
		idle = 0
		now += it.Duration
		for _, id := range it.FirstToken {
			res.Times[index[id]].FirstToken = now
		}
		for _, p := range it.Produced {
			res.OutputTokens += int64(p.Tokens)
		}
		for _, id := range it.Finished {
			res.Times[index[id]].Finish = now
		}
		for _, id := range it.Preempted {
			res.Times[index[id]].Preemptions++
		}
	}
	res.Makespan = now
	res.Stats = eng.Stats()
	return res, nil
}
