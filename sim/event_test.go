package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/sim"
)

func TestQueueOrder(t *testing.T) {
	type ev struct {
		at   time.Duration
		name string
	}
	tests := []struct {
		name string
		in   []ev
		want []string
	}{
		{"empty", nil, nil},
		{"in time order", []ev{{1, "a"}, {2, "b"}, {3, "c"}}, []string{"a", "b", "c"}},
		{"reverse time order", []ev{{3, "c"}, {2, "b"}, {1, "a"}}, []string{"a", "b", "c"}},
		{"same time is FIFO", []ev{{5, "a"}, {5, "b"}, {5, "c"}, {5, "d"}}, []string{"a", "b", "c", "d"}},
		{"ties among other times", []ev{
			{7, "x1"}, {3, "a1"}, {7, "x2"}, {0, "zero"}, {3, "a2"}, {7, "x3"}, {3, "a3"},
		}, []string{"zero", "a1", "a2", "a3", "x1", "x2", "x3"}},
		{"many ties", func() []ev {
			var in []ev
			for i := range 100 {
				in = append(in, ev{time.Duration(i % 3), fmt.Sprintf("%d@%d", i, i%3)})
			}
			return in
		}(), func() []string {
			var out []string
			for r := range 3 {
				for i := range 100 {
					if i%3 == r {
						out = append(out, fmt.Sprintf("%d@%d", i, r))
					}
				}
			}
			return out
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q sim.Queue[string]
			for _, e := range tt.in {
				q.Schedule(e.at, e.name)
			}
			require.Equal(t, len(tt.in), q.Len())
			var got []string
			var seqs []uint64
			var ats []time.Duration
			last := time.Duration(0)
			for q.Len() > 0 {
				peek, ok := q.Peek()
				require.True(t, ok)
				e, ok := q.Pop()
				require.True(t, ok)
				require.Equal(t, peek, e, "Peek returns what Pop removes")
				require.GreaterOrEqual(t, e.At, last, "time went backwards")
				require.Equal(t, e.At, q.Now(), "Pop advances Now to the event's time")
				last = e.At
				got = append(got, e.Payload)
				seqs = append(seqs, e.Seq)
				ats = append(ats, e.At)
			}
			assert.Equal(t, tt.want, got)
			// Sequence numbers follow scheduling order, so ties pop in increasing Seq.
			for i := 1; i < len(seqs); i++ {
				if ats[i] == ats[i-1] {
					assert.Greater(t, seqs[i], seqs[i-1], "ties pop in scheduling order")
				}
			}
		})
	}
}

func TestQueueClock(t *testing.T) {
	var q sim.Queue[int]
	assert.Zero(t, q.Now())
	_, ok := q.Pop()
	assert.False(t, ok, "Pop on an empty queue")
	_, ok = q.Peek()
	assert.False(t, ok, "Peek on an empty queue")

	q.Schedule(10*time.Second, 1)
	q.Schedule(20*time.Second, 2)
	_, _ = q.Peek()
	assert.Zero(t, q.Now(), "Peek does not advance the clock")

	e, ok := q.Pop()
	require.True(t, ok)
	assert.Equal(t, 1, e.Payload)
	assert.Equal(t, 10*time.Second, q.Now())

	// Scheduling at now is allowed and runs before later events.
	q.Schedule(10*time.Second, 3)
	e, _ = q.Pop()
	assert.Equal(t, 3, e.Payload)
	assert.Equal(t, 10*time.Second, q.Now())

	assert.Panics(t, func() { q.Schedule(10*time.Second-1, 4) }, "scheduling in the past")
	assert.Equal(t, 1, q.Len(), "a rejected event is not queued")

	e, _ = q.Pop()
	assert.Equal(t, 2, e.Payload)
	assert.Equal(t, 20*time.Second, q.Now())
	_, ok = q.Pop()
	assert.False(t, ok)
	assert.Equal(t, 20*time.Second, q.Now(), "popping an empty queue leaves the clock alone")
}

func TestQueueSequenceNumbers(t *testing.T) {
	var q sim.Queue[string]
	q.Schedule(2, "b")
	q.Schedule(1, "a")
	q.Schedule(2, "c")
	var got []sim.Event[string]
	for q.Len() > 0 {
		e, _ := q.Pop()
		got = append(got, e)
	}
	assert.Equal(t, []sim.Event[string]{
		{At: 1, Seq: 1, Payload: "a"},
		{At: 2, Seq: 0, Payload: "b"},
		{At: 2, Seq: 2, Payload: "c"},
	}, got)
}

// TestQueueRandom interleaves schedules and pops and checks the order against the definition:
// every pop returns the pending event with the smallest (time, sequence).
func TestQueueRandom(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := sim.Stream(seed, "queue-test")
		var q sim.Queue[int]
		type key struct {
			at  time.Duration
			seq int
		}
		var pending []key
		n := 0
		for range 5000 {
			if rng.IntN(3) > 0 || len(pending) == 0 {
				at := q.Now() + time.Duration(rng.IntN(5))
				q.Schedule(at, n)
				pending = append(pending, key{at, n})
				n++
				continue
			}
			best := 0
			for i, k := range pending {
				if k.at < pending[best].at || (k.at == pending[best].at && k.seq < pending[best].seq) {
					best = i
				}
			}
			e, ok := q.Pop()
			require.True(t, ok)
			require.Equal(t, pending[best].seq, e.Payload)
			require.Equal(t, pending[best].at, e.At)
			pending = append(pending[:best], pending[best+1:]...)
		}
		require.Equal(t, len(pending), q.Len())
	}
}

func TestStream(t *testing.T) {
	draw := func(seed uint64, name string, n int) []uint64 {
		r := sim.Stream(seed, name)
		out := make([]uint64, n)
		for i := range out {
			out[i] = r.Uint64()
		}
		return out
	}
	t.Run("deterministic", func(t *testing.T) {
		for _, seed := range []uint64{0, 1, 42} {
			for _, name := range []string{"", "lengths", "routing"} {
				assert.Equal(t, draw(seed, name, 100), draw(seed, name, 100), "seed %d name %q", seed, name)
			}
		}
	})
	t.Run("names and seeds give different streams", func(t *testing.T) {
		streams := map[string][]uint64{
			"7/lengths":  draw(7, "lengths", 1000),
			"7/routing":  draw(7, "routing", 1000),
			"7/":         draw(7, "", 1000),
			"8/lengths":  draw(8, "lengths", 1000),
			"7/lengths2": draw(7, "lengths2", 1000),
		}
		for a, sa := range streams {
			for b, sb := range streams {
				if a >= b {
					continue
				}
				same := 0
				for i := range sa {
					if sa[i] == sb[i] {
						same++
					}
				}
				assert.Zero(t, same, "streams %s and %s share values", a, b)
				// Nor is one a shifted copy of the other at a small offset.
				for shift := 1; shift < 10; shift++ {
					assert.NotEqual(t, sa[shift:], sb[:len(sb)-shift], "%s is %s shifted by %d", a, b, shift)
				}
			}
		}
	})
	t.Run("drawing from one name leaves another unchanged", func(t *testing.T) {
		want := draw(3, "routing", 50)
		lengths := sim.Stream(3, "lengths")
		routing := sim.Stream(3, "routing")
		var got []uint64
		for i := range 50 {
			for range i % 7 {
				lengths.Uint64()
			}
			got = append(got, routing.Uint64())
		}
		assert.Equal(t, want, got)
	})
	t.Run("roughly uniform", func(t *testing.T) {
		r := sim.Stream(11, "uniform")
		const n, bins = 100_000, 10
		var hist [bins]int
		for range n {
			hist[r.IntN(bins)]++
		}
		for b, c := range hist {
			assert.InDelta(t, n/bins, c, 5*100, "bin %d", b) // about 5 standard deviations
		}
	})
}
