package solver

import (
	"sort"
	"time"
)

// SolveHeuristic plans without lp_solve: longest-processing-time-first placement of model
// replicas, growing the replica count of the model on the critical worker while that lowers the
// makespan, then moving calls between a model's replicas to even out their workers.
func SolveHeuristic(p Problem) *Plan {
	start := time.Now()
	reps := make([]int, len(p.Items))
	for m := range reps {
		reps[m] = 1
	}
	best := p.lpt(reps)
	for {
		t := p.Evaluate(best)
		crit := argmax(t)
		// Try one more replica of each model on the critical worker; keep the best try.
		grow, span := -1, maxOf(t)
		var next [][]int
		for m, it := range p.Items {
			if best[m][crit] == 0 || reps[m] >= min(it.replicas(p.Workers), p.allowedCount(it)) {
				continue
			}
			reps[m]++
			c := p.lpt(reps)
			reps[m]--
			if s := maxOf(p.Evaluate(c)); s < span-1e-9 {
				grow, span, next = m, s, c
			}
		}
		if grow < 0 {
			break
		}
		reps[grow]++
		best = next
	}
	p.improve(best)
	wt := p.Evaluate(best)
	return &Plan{Counts: best, WorkerTime: wt, Makespan: maxOf(wt), Status: Heuristic, Method: MethodHeuristic, SolveTime: time.Since(start)}
}

func argmax(xs []float64) int {
	i := 0
	for j, x := range xs {
		if x > xs[i] {
			i = j
		}
	}
	return i
}

// lpt places reps[m] near-equal shares of every model, largest job first, each on the allowed
// worker (without another share of the same model) where it would finish earliest.
func (p *Problem) lpt(reps []int) [][]int {
	type job struct {
		m, calls int
		time     float64
	}
	var jobs []job
	for m, it := range p.Items {
		r := reps[m]
		for i := 0; i < r; i++ {
			share := it.Calls / r
			if i < it.Calls%r {
				share++
			}
			jobs = append(jobs, job{m: m, calls: share, time: p.bestTime(it, share)})
		}
	}
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].time > jobs[j].time })
	counts := make([][]int, len(p.Items))
	for m := range counts {
		counts[m] = make([]int, p.Workers)
	}
	load := make([]float64, p.Workers)
	for w := range load {
		load[w] = p.offset(w)
	}
	for _, j := range jobs {
		it := p.Items[j.m]
		bestW, bestT := -1, 0.0
		for w := 0; w < p.Workers; w++ {
			if !it.allowed(w) || counts[j.m][w] > 0 {
				continue
			}
			t := load[w] + it.loadOn(w) + it.CurveOn(w).At(j.calls)
			if bestW < 0 || t < bestT {
				bestW, bestT = w, t
			}
		}
		if bestW < 0 { // more shares than allowed workers: merge into the earliest one
			for w := 0; w < p.Workers; w++ {
				if it.allowed(w) && (bestW < 0 || load[w] < load[bestW]) {
					bestW = w
				}
			}
			c := it.CurveOn(bestW)
			load[bestW] -= c.At(counts[j.m][bestW])
			counts[j.m][bestW] += j.calls
			load[bestW] += c.At(counts[j.m][bestW])
			continue
		}
		counts[j.m][bestW] = j.calls
		load[bestW] = bestT
	}
	return counts
}

// rebalance moves calls of a replicated model from its replica on the latest worker to its
// replica on the earliest one while that lowers the later of the two.
func (p *Problem) rebalance(counts [][]int) {
	for pass := 0; pass < 50; pass++ {
		t := p.Evaluate(counts)
		moved := false
		for m, it := range p.Items {
			hi, lo := -1, -1
			for w := 0; w < p.Workers; w++ {
				if counts[m][w] == 0 {
					continue
				}
				if hi < 0 || t[w] > t[hi] {
					hi = w
				}
				if lo < 0 || t[w] < t[lo] {
					lo = w
				}
			}
			if hi < 0 || hi == lo || counts[m][hi] <= 1 {
				continue
			}
			// Move the largest number of calls (halving steps) that still helps.
			for step := counts[m][hi] / 2; step >= 1; step /= 2 {
				ch, cl := it.CurveOn(hi), it.CurveOn(lo)
				nh := t[hi] - ch.At(counts[m][hi]) + ch.At(counts[m][hi]-step)
				nl := t[lo] - cl.At(counts[m][lo]) + cl.At(counts[m][lo]+step)
				if max(nh, nl) < t[hi]-1e-9 {
					counts[m][hi] -= step
					counts[m][lo] += step
					t[hi], t[lo] = nh, nl
					moved = true
					break
				}
			}
		}
		if !moved {
			return
		}
	}
}

// improve lowers the makespan of a plan by local moves that never raise it: replicas of a
// model trade calls (rebalance), and a replica moves whole to another worker where that helps.
func (p *Problem) improve(counts [][]int) {
	p.rebalance(counts)
	for iter := 0; iter < 200; iter++ {
		span := maxOf(p.Evaluate(counts))
		moved := false
		for m, it := range p.Items {
			for from := 0; from < p.Workers && !moved; from++ {
				x := counts[m][from]
				if x == 0 {
					continue
				}
				for to := 0; to < p.Workers; to++ {
					if to == from || counts[m][to] > 0 || !it.allowed(to) {
						continue
					}
					counts[m][from], counts[m][to] = 0, x
					trial := cloneCounts(counts)
					p.rebalance(trial)
					if maxOf(p.Evaluate(trial)) < span-1e-9 {
						copy2(counts, trial)
						moved = true
						break
					}
					counts[m][from], counts[m][to] = x, 0
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			return
		}
	}
}

func cloneCounts(c [][]int) [][]int {
	out := make([][]int, len(c))
	for i := range c {
		out[i] = append([]int(nil), c[i]...)
	}
	return out
}

func copy2(dst, src [][]int) {
	for i := range src {
		copy(dst[i], src[i])
	}
}
