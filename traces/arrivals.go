package traces

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// Arrival processes.
const (
	// ArrivalsPoisson draws exponential gaps: a memoryless stream at Rate.
	ArrivalsPoisson = "poisson"
	// ArrivalsGamma draws gamma gaps of mean 1/Rate and coefficient of variation CV: CV = 1 is
	// Poisson, CV > 1 bursty, CV < 1 smoother than Poisson.
	ArrivalsGamma = "gamma"
	// ArrivalsTrace replays the gaps of a real trace's timestamps, scaled to Rate.
	ArrivalsTrace = "trace"
)

// Arrivals says when the queries of a workload reach the system. The zero value (Rate 0, no
// trace) is an offline batch: every query at time 0.
type Arrivals struct {
	// Process is ArrivalsPoisson (the default when Rate > 0), ArrivalsGamma or ArrivalsTrace.
	Process string
	// Rate is the mean arrival rate in queries per second. With a trace, 0 keeps the trace's
	// own rate.
	Rate float64
	// CV is the gamma process's coefficient of variation of the gaps (> 0).
	CV float64
	// Gaps are a trace's inter-arrival times in seconds (see ReadTimestamps), replayed in
	// order and from the start again when the workload has more queries.
	Gaps []float64
}

// Offline reports whether the arrivals are an offline batch.
func (a Arrivals) Offline() bool { return a.Process != ArrivalsTrace && a.Rate == 0 }

// Validate reports the first problem with the settings.
func (a Arrivals) Validate() error {
	switch a.Process {
	case "", ArrivalsPoisson:
		if !(a.Rate >= 0) || math.IsInf(a.Rate, 0) {
			return fmt.Errorf("arrival rate must be a non-negative number of queries per second, got %g", a.Rate)
		}
	case ArrivalsGamma:
		if !(a.Rate > 0) || math.IsInf(a.Rate, 0) {
			return fmt.Errorf("gamma arrivals need a positive rate, got %g", a.Rate)
		}
		if !(a.CV > 0) || math.IsInf(a.CV, 0) {
			return fmt.Errorf("gamma arrivals need a positive coefficient of variation, got %g", a.CV)
		}
	case ArrivalsTrace:
		if len(a.Gaps) == 0 {
			return errors.New("trace arrivals need a trace with at least two timestamps")
		}
		if !(a.Rate >= 0) || math.IsInf(a.Rate, 0) {
			return fmt.Errorf("arrival rate must be a non-negative number of queries per second, got %g", a.Rate)
		}
	default:
		return fmt.Errorf("unknown arrival process %q (known: %s, %s, %s)", a.Process, ArrivalsPoisson, ArrivalsGamma, ArrivalsTrace)
	}
	return nil
}

// Apply sets the arrival time of every query of wl, in query order, from the stream
// "arrivals" of seed; each query arrives one gap after the previous one (the first one gap
// after time 0). Times have microsecond resolution.
func (a Arrivals) Apply(wl *Workload, seed uint64) error {
	c, err := a.clock(seed)
	if err != nil {
		return err
	}
	for i := range wl.Queries {
		if wl.Queries[i].Arrival, err = c.next(i); err != nil {
			return err
		}
	}
	return nil
}

// arrivalClock draws the arrival times of a workload's queries one at a time, in query order
// (Apply, and a Stream's queries).
type arrivalClock struct {
	a Arrivals
	r *rand.Rand
	// scale stretches a trace's gaps to the rate; now is the last arrival in seconds.
	scale, now float64
}

// clock validates the settings and returns the clock of seed's arrivals.
func (a Arrivals) clock(seed uint64) (*arrivalClock, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	c := &arrivalClock{a: a, scale: 1}
	if a.Offline() {
		return c, nil
	}
	c.r = genStream(seed, "arrivals")
	if a.Process == ArrivalsTrace && a.Rate > 0 {
		mean := 0.0
		for _, g := range a.Gaps {
			mean += g
		}
		mean /= float64(len(a.Gaps))
		c.scale = 1 / (a.Rate * mean)
	}
	return c, nil
}

// next is the arrival time of query i, the one after the last drawn (0 offline).
func (c *arrivalClock) next(i int) (time.Duration, error) {
	a := &c.a
	if a.Offline() {
		return 0, nil
	}
	var gap float64
	switch a.Process {
	case ArrivalsGamma:
		k := 1 / (a.CV * a.CV)
		gap = gammaDraw(c.r, k) / (k * a.Rate)
	case ArrivalsTrace:
		gap = a.Gaps[i%len(a.Gaps)] * c.scale
	default:
		gap = c.r.ExpFloat64() / a.Rate
	}
	c.now += gap
	t := time.Duration(math.Round(c.now*1e6)) * time.Microsecond
	if t > MaxArrival {
		return 0, &LateArrivalError{Query: i, At: t}
	}
	return t, nil
}

// LateArrivalError says a query would arrive after MaxArrival.
type LateArrivalError struct {
	Query int
	At    time.Duration
}

func (e *LateArrivalError) Error() string {
	return fmt.Sprintf("query %d would arrive at %v, later than %v: raise the rate", e.Query, e.At, MaxArrival)
}

// gammaDraw draws Gamma(shape k, scale 1) by Marsaglia and Tsang's method (boosted by U^(1/k)
// for k < 1).
func gammaDraw(r *rand.Rand, k float64) float64 {
	if k < 1 {
		return gammaDraw(r, k+1) * math.Pow(r.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// timestampLayouts are the textual timestamp forms ReadTimestamps accepts besides plain
// seconds (the Azure LLM inference traces write "2023-11-16 18:15:46.6805900").
var timestampLayouts = []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano}

// ReadTimestamps reads a column of arrival timestamps from a CSV file (seconds as numbers, or
// dates such as the Azure traces' "2023-11-16 18:15:46.6805900") and returns the gaps between
// consecutive rows in seconds, after sorting the times. Errors name the file, line and column.
func ReadTimestamps(path, column string) ([]float64, error) {
	r, err := csvx.Open(path, csvx.Options{TrimHeader: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if !r.Has(column) {
		return nil, r.Errorf(0, "no column %q (columns: %s)", column, strings.Join(r.Header(), ", "))
	}
	var times []float64
	for r.Next() {
		v := strings.TrimSpace(r.Str(column))
		if s, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(s) && !math.IsInf(s, 0) {
			times = append(times, s)
			continue
		}
		var t time.Time
		var err error
		for _, layout := range timestampLayouts {
			if t, err = time.Parse(layout, v); err == nil {
				break
			}
		}
		if err != nil {
			r.Failf(column, "%q is neither seconds nor a timestamp like 2023-11-16 18:15:46.68", v)
		}
		times = append(times, float64(t.UnixNano())/1e9)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(times) < 2 {
		return nil, fmt.Errorf("%s: column %s has %d timestamps, need at least 2", path, column, len(times))
	}
	slices.Sort(times)
	gaps := make([]float64, len(times)-1)
	for i := range gaps {
		gaps[i] = times[i+1] - times[i]
	}
	if times[len(times)-1] == times[0] {
		return nil, fmt.Errorf("%s: column %s: every timestamp is the same", path, column)
	}
	return gaps, nil
}
