package traces

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/mosaic-sched/mosaic/internal/csvx"
)

// LengthDist draws token counts.
type LengthDist interface {
	// Sample draws one length, always in [1, Max()].
	Sample(r *rand.Rand) int
	// Mean is the distribution's mean after truncation, as far as it is known in closed form
	// (the untruncated mean for lognormals).
	Mean() float64
	// Max is the largest length the distribution returns.
	Max() int
	// String describes the distribution for tables and logs.
	String() string
}

// Fixed always returns the same length.
type Fixed int

// Sample implements LengthDist.
func (f Fixed) Sample(*rand.Rand) int { return int(f) }

// Mean implements LengthDist.
func (f Fixed) Mean() float64 { return float64(f) }

// Max implements LengthDist.
func (f Fixed) Max() int { return int(f) }

func (f Fixed) String() string { return fmt.Sprintf("fixed %d", int(f)) }

// z99 is the 0.99 quantile of the standard normal distribution.
const z99 = 2.3263478740408408

// LogNormal is a lognormal length distribution, truncated to [MinLen, MaxLen] by clamping.
// Heavy-tailed outputs of reasoning models are modelled this way. CapShare is the share of
// runaway generations (repetition loops) that run to MaxLen, a spike measured outputs show
// beside the lognormal body.
type LogNormal struct {
	Mu, Sigma      float64
	MinLen, MaxLen int
	CapShare       float64
	mean, p99      float64
}

// NewLogNormalSigma returns the lognormal exp(Normal(mu, sigma)) truncated to [minLen, maxLen].
func NewLogNormalSigma(mu, sigma float64, minLen, maxLen int) (*LogNormal, error) {
	switch {
	case !(sigma > 0) || sigma > 5:
		return nil, fmt.Errorf("sigma must be in (0, 5], got %g", sigma)
	case math.IsNaN(mu) || math.IsInf(mu, 0):
		return nil, fmt.Errorf("the log-scale mean must be finite, got %g", mu)
	case minLen < 1:
		return nil, errors.New("min must be at least 1")
	case maxLen < minLen:
		return nil, fmt.Errorf("max (%d) must be at least min (%d)", maxLen, minLen)
	}
	return &LogNormal{Mu: mu, Sigma: sigma, MinLen: minLen, MaxLen: maxLen, mean: math.Exp(mu + sigma*sigma/2), p99: math.Exp(mu + z99*sigma)}, nil
}

// WithCapShare returns a copy whose draws run to MaxLen with probability share.
func (l *LogNormal) WithCapShare(share float64) (*LogNormal, error) {
	if !(share >= 0 && share < 1) {
		return nil, fmt.Errorf("cap share must be in [0, 1), got %g", share)
	}
	cp := *l
	cp.CapShare = share
	return &cp, nil
}

// NewLogNormal solves for the lognormal with the given mean and p99:
// mean = exp(mu + sigma^2/2) and p99 = exp(mu + z99*sigma), so
// sigma = z99 - sqrt(z99^2 - 2 ln(p99/mean)), which needs mean < p99 <= e^(z99^2/2) * mean (about 15 x).
func NewLogNormal(mean, p99 float64, minLen, maxLen int) (*LogNormal, error) {
	switch {
	case !(mean > 0):
		return nil, errors.New("mean must be positive")
	case !(p99 > mean):
		return nil, fmt.Errorf("p99 (%g) must be larger than the mean (%g)", p99, mean)
	case minLen < 1:
		return nil, errors.New("min must be at least 1")
	case maxLen < minLen:
		return nil, fmt.Errorf("max (%d) must be at least min (%d)", maxLen, minLen)
	}
	d := z99*z99 - 2*math.Log(p99/mean)
	if d < 0 {
		return nil, fmt.Errorf("p99/mean = %.1f is too large for a lognormal (at most %.1f)", p99/mean, math.Exp(z99*z99/2))
	}
	sigma := z99 - math.Sqrt(d)
	return &LogNormal{Mu: math.Log(mean) - sigma*sigma/2, Sigma: sigma, MinLen: minLen, MaxLen: maxLen, mean: mean, p99: p99}, nil
}

// Sample implements LengthDist.
func (l *LogNormal) Sample(r *rand.Rand) int {
	if l.CapShare > 0 && r.Float64() < l.CapShare {
		return l.MaxLen
	}
	v := math.Round(math.Exp(l.Mu + l.Sigma*r.NormFloat64()))
	return int(min(max(v, float64(l.MinLen)), float64(l.MaxLen)))
}

// Mean implements LengthDist: the untruncated body's mean, mixed with the cap spike.
func (l *LogNormal) Mean() float64 { return (1-l.CapShare)*l.mean + l.CapShare*float64(l.MaxLen) }

// Max implements LengthDist.
func (l *LogNormal) Max() int { return l.MaxLen }

func (l *LogNormal) String() string {
	s := fmt.Sprintf("lognormal mean %.4g p99 %.4g max %d", l.mean, l.p99, l.MaxLen)
	if l.CapShare > 0 {
		s += fmt.Sprintf(", %.3g%% at max", 100*l.CapShare)
	}
	return s
}

// Uniform draws integers uniformly from [Lo, Hi].
type Uniform struct{ Lo, Hi int }

// Sample implements LengthDist.
func (u Uniform) Sample(r *rand.Rand) int { return u.Lo + r.IntN(u.Hi-u.Lo+1) }

// Mean implements LengthDist.
func (u Uniform) Mean() float64 { return float64(u.Lo+u.Hi) / 2 }

// Max implements LengthDist.
func (u Uniform) Max() int { return u.Hi }

func (u Uniform) String() string { return fmt.Sprintf("uniform %d-%d", u.Lo, u.Hi) }

// Empirical draws lengths uniformly from observed values (clamped to [1, MaxLen]).
type Empirical struct {
	Values []int // sorted
	Source string
	MaxLen int
	mean   float64
}

// NewEmpirical builds an empirical distribution from observed values; maxLen <= 0 keeps the
// largest observed value as the maximum.
func NewEmpirical(values []int, source string, maxLen int) (*Empirical, error) {
	var vs []int
	for _, v := range values {
		if v >= 1 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("%s: no positive lengths", source)
	}
	sort.Ints(vs)
	if maxLen <= 0 {
		maxLen = vs[len(vs)-1]
	}
	e := &Empirical{Values: vs, Source: source, MaxLen: maxLen}
	for _, v := range vs {
		e.mean += float64(min(v, maxLen))
	}
	e.mean /= float64(len(vs))
	return e, nil
}

// Sample implements LengthDist.
func (e *Empirical) Sample(r *rand.Rand) int { return min(e.Values[r.IntN(len(e.Values))], e.MaxLen) }

// Mean implements LengthDist.
func (e *Empirical) Mean() float64 { return e.mean }

// Max implements LengthDist.
func (e *Empirical) Max() int { return min(e.Values[len(e.Values)-1], e.MaxLen) }

func (e *Empirical) String() string {
	return fmt.Sprintf("empirical %s (%d values, mean %.0f)", e.Source, len(e.Values), e.mean)
}

// ReadColumn reads the integer values of one column of a CSV file with a header; errors name
// the file, the line and the column.
func ReadColumn(path, column string) ([]int, error) {
	r, err := csvx.Open(path, csvx.Options{TrimHeader: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if !r.Has(column) {
		return nil, r.Errorf(0, "no column %q (columns: %s)", column, strings.Join(r.Header(), ", "))
	}
	var out []int
	for r.Next() {
		v, err := strconv.ParseFloat(strings.TrimSpace(r.Str(column)), 64)
		if err != nil {
			r.Fail(column, "is not a number")
		}
		out = append(out, int(math.Round(v)))
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
