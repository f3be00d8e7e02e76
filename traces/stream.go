package traces

import (
	"errors"
	"fmt"
	"io"
)

// Stream yields a generated workload's queries one at a time, in ID order: each exactly as the
// whole workload holds it (Generate or GenerateGraph, then Arrivals.Apply), from the same
// random draws in the same order, its calls numbered across the queries before it and its
// arrival applied. It keeps only what the generator needs between queries, so a workload of
// any size streams in constant memory; a caller that needs the totals of the whole workload
// asks Counts, which draws only what decides them.
//
// Only workloads whose queries can be drawn one by one stream: a MoA spec that routes by
// keyword, calibrates its vote model (VoteSpec.Unanimous, Majority) or fits its aggregator
// (AggregatorSpec.Fit) solves over every query first, and StreamMoA refuses it with
// ErrNotStreamable.
type Stream struct {
	name string
	n    int
	// next is the next query's index, firstID its first call's ID.
	next, firstID int
	draw          func(q *Query, qi int) error
	clock         *arrivalClock
	counts        func() (CallCounts, error)
	// queries is a block the next queries are carved from.
	queries []Query
}

// ErrNotStreamable says a workload cannot be drawn a query at a time.
var ErrNotStreamable = errors.New("the workload cannot be drawn a query at a time")

// CallCounts counts a workload's calls by layer (the index) and model (the experiment's name,
// "" for tool steps).
type CallCounts []map[string]int

// Total is the number of calls.
func (c CallCounts) Total() int {
	n := 0
	for _, byModel := range c {
		for _, k := range byModel {
			n += k
		}
	}
	return n
}

// add counts n calls of model in layer.
func (c *CallCounts) add(layer int, model string, n int) {
	for len(*c) <= layer {
		*c = append(*c, map[string]int{})
	}
	(*c)[layer][model] += n
}

// StreamMoA streams the workload Generate draws from spec and seed, with arrivals a applied
// (see Arrivals.Apply). It returns an error wrapping ErrNotStreamable for a spec that needs
// the whole workload first (see Stream).
func StreamMoA(spec GenSpec, seed uint64, a Arrivals) (*Stream, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	switch {
	case s.Keywords != nil:
		return nil, fmt.Errorf("workload %q: keyword routing is solved over every query: %w", s.Name, ErrNotStreamable)
	case s.Votes.Unanimous > 0 || s.Votes.Majority > 0:
		return nil, fmt.Errorf("workload %q: the vote model is calibrated over every query: %w", s.Name, ErrNotStreamable)
	case s.Aggregator.Fit != nil && s.Aggregator.Model != "":
		return nil, fmt.Errorf("workload %q: the aggregator's answers are fitted over every query: %w", s.Name, ErrNotStreamable)
	}
	p := &plan{spec: s, seed: seed, votes: s.Votes, acc: map[string][]float64{}}
	d := newDrawer(&p.spec, seed)
	// Every skill a query can have: an expert's accuracy on a skill does not depend on the
	// others, so knowing more of them changes no answer.
	if s.Questions != nil {
		for _, q := range s.Questions {
			p.addSkill(cmpOr(q.Category, q.Dataset))
		}
	} else {
		for _, sk := range s.Skills {
			p.addSkill(sk)
		}
	}
	b, err := p.newBuilder()
	if err != nil {
		return nil, err
	}
	clock, err := a.clock(seed)
	if err != nil {
		return nil, err
	}
	agg := genStream(seed, "aggregator")
	var pq planQuery
	st := &Stream{name: s.Name, n: d.queries(), clock: clock}
	st.draw = func(q *Query, qi int) error {
		if err := d.source(qi, &pq); err != nil {
			return err
		}
		d.route(&pq, nil)
		return b.query(q, qi, &pq, [2]float64{agg.Float64(), agg.Float64()})
	}
	st.counts = func() (CallCounts, error) {
		// The experts come from the skills and the routing alone: a fresh drawer reads those
		// two streams, and nothing else, as the queries' draws do.
		rd := newDrawer(&p.spec, seed)
		var c CallCounts
		experts := make([]int, len(s.Experts))
		for qi := range rd.queries() {
			cum := rd.cum(rd.skill(qi))
			for range s.K {
				experts[pickWeighted(cum, rd.routing.Float64())]++
			}
		}
		for e, n := range experts {
			if n > 0 {
				c.add(0, s.Experts[e].Name, n)
			}
		}
		if s.Aggregator.Model != "" {
			c.add(1, s.Aggregator.Model, rd.queries())
		}
		return c, nil
	}
	return st, nil
}

// cmpOr returns a, or b when a is empty.
func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// StreamGraph streams the workload GenerateGraph draws from spec and seed, with arrivals a
// applied (see Arrivals.Apply).
func StreamGraph(spec GraphSpec, seed uint64, a Arrivals) (*Stream, error) {
	g, err := newGraphGen(&spec, seed)
	if err != nil {
		return nil, err
	}
	clock, err := a.clock(seed)
	if err != nil {
		return nil, err
	}
	st := &Stream{name: spec.Name, n: g.queries(), clock: clock, draw: g.next}
	st.counts = func() (CallCounts, error) {
		// Every query is a copy of the template: its first query's calls, times the queries.
		first, err := StreamGraph(spec, seed, Arrivals{})
		if err != nil {
			return nil, err
		}
		q, err := first.Next()
		if err != nil {
			return nil, err
		}
		var c CallCounts
		for i := range q.Calls {
			c.add(q.Calls[i].Layer, q.Calls[i].Model, st.n)
		}
		return c, nil
	}
	return st, nil
}

// Name is the workload's name.
func (s *Stream) Name() string { return s.name }

// Len is the number of queries.
func (s *Stream) Len() int { return s.n }

// Counts counts the workload's calls by layer and model without drawing the queries.
func (s *Stream) Counts() (CallCounts, error) { return s.counts() }

// Next returns the next query, or io.EOF after the last. The query is the caller's.
func (s *Stream) Next() (*Query, error) {
	if s.next >= s.n {
		return nil, io.EOF
	}
	qi := s.next
	q := &carve(&s.queries, 1)[0]
	if err := s.draw(q, qi); err != nil {
		return nil, err
	}
	if err := q.finish(s.firstID); err != nil {
		return nil, fmt.Errorf("workload %q: query %d: %w", s.name, qi, err)
	}
	var err error
	if q.Arrival, err = s.clock.next(qi); err != nil {
		return nil, err
	}
	s.next++
	s.firstID += len(q.Calls)
	return q, nil
}
