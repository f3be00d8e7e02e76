package experiments

import (
	"slices"
	"sort"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/mosaic"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/traces"
)

// policyContext is what a policy constructor may use: the output-length distributions that
// differ from the models' own, and the policy's own table of the experiment file.
type policyContext struct {
	outputs map[mosaic.Key]traces.LengthDist
	spec    PolicySpec
	key     string // "policy[i]", for errors
}

// factory validates a policy's options and returns its constructor.
type factory func(e *Experiment, pc policyContext) (func() policies.Policy, error)

// registry maps policy names to factories.
var registry = map[string]factory{
	roundrobin.Name: func(e *Experiment, pc policyContext) (func() policies.Policy, error) {
		if err := onlyOptions(e, pc); err != nil {
			return nil, err
		}
		return func() policies.Policy { return roundrobin.New() }, nil
	},
	dataparallel.Name: func(e *Experiment, pc policyContext) (func() policies.Policy, error) {
		if err := onlyOptions(e, pc); err != nil {
			return nil, err
		}
		return func() policies.Policy { return dataparallel.New() }, nil
	},
	mosaic.Name: func(e *Experiment, pc policyContext) (func() policies.Policy, error) {
		if err := onlyOptions(e, pc, "solver_time_limit", "order", "prefetch"); err != nil {
			return nil, err
		}
		o := mosaic.Options{Outputs: pc.outputs, TimeLimit: pc.spec.SolverTimeLimit}
		if err := checkTimeLimit(e, pc); err != nil {
			return nil, err
		}
		switch pc.spec.Order {
		case "", mosaic.OrderLongestFirst, mosaic.OrderPlain:
			o.Order = pc.spec.Order
		default:
			return nil, e.errorf(pc.key+".order", "unknown order %q (known: %s, %s)", pc.spec.Order, mosaic.OrderLongestFirst, mosaic.OrderPlain)
		}
		if pc.spec.Prefetch != nil {
			o.NoPrefetch = !*pc.spec.Prefetch
		}
		return func() policies.Policy { return mosaic.New(o) }, nil
	},
	mosaic.PipelineName: func(e *Experiment, pc policyContext) (func() policies.Policy, error) {
		if err := onlyOptions(e, pc, "solver_time_limit"); err != nil {
			return nil, err
		}
		if err := checkTimeLimit(e, pc); err != nil {
			return nil, err
		}
		o := mosaic.Options{Outputs: pc.outputs, TimeLimit: pc.spec.SolverTimeLimit, Pipeline: true}
		return func() policies.Policy { return mosaic.New(o) }, nil
	},
	online.Name: func(e *Experiment, pc policyContext) (func() policies.Policy, error) {
		if err := onlyOptions(e, pc, "solver_time_limit", "replan", "max_in_flight"); err != nil {
			return nil, err
		}
		if err := checkTimeLimit(e, pc); err != nil {
			return nil, err
		}
		o := online.Options{Outputs: pc.outputs, TimeLimit: pc.spec.SolverTimeLimit, MaxInFlight: pc.spec.MaxInFlight}
		if r := pc.spec.Replan; r != nil {
			switch {
			case *r == 0:
				return nil, e.errorf(pc.key+".replan", "must not be zero: give how often to check the mix (\"60s\"), or \"-1s\" for never")
			case *r > 0 && *r < time.Millisecond:
				return nil, e.errorf(pc.key+".replan", "%v is too short; write a duration with its unit, e.g. \"60s\" (a bare number means nanoseconds)", *r)
			}
			o.Replan = *r
		}
		if pc.spec.MaxInFlight < 0 || (pc.spec.MaxInFlight == 0 && e.has(pc.key+".max_in_flight")) {
			return nil, e.errorf(pc.key+".max_in_flight", "must be positive, got %d", pc.spec.MaxInFlight)
		}
		return func() policies.Policy { return online.New(o) }, nil
	},
}

// checkTimeLimit rejects a solver time limit too short to be meant.
func checkTimeLimit(e *Experiment, pc policyContext) error {
	if t := pc.spec.SolverTimeLimit; t != 0 && t < time.Millisecond {
		return e.errorf(pc.key+".solver_time_limit", "%v is too short; write a duration with its unit, e.g. \"10s\"", t)
	}
	return nil
}

// onlyOptions rejects the policy options that the named policy does not take.
func onlyOptions(e *Experiment, pc policyContext, takes ...string) error {
	s := pc.spec
	for _, o := range []struct {
		key string
		set bool
	}{
		{"solver_time_limit", s.SolverTimeLimit != 0}, {"order", s.Order != ""}, {"prefetch", s.Prefetch != nil},
		{"replan", s.Replan != nil}, {"max_in_flight", s.MaxInFlight != 0 || e.has(pc.key+".max_in_flight")},
	} {
		if o.set && !slices.Contains(takes, o.key) {
			return e.errorf(pc.key+"."+o.key, "the %s policy has no option %q", s.Name, o.key)
		}
	}
	return nil
}

// PolicyDoc describes a policy for listings: its name, what it does and the options of its
// [[policy]] table besides those every policy takes.
type PolicyDoc struct {
	Name, Summary string
	Options       []string
}

// CommonPolicyOptions are the [[policy]] keys every policy takes.
var CommonPolicyOptions = []string{"name", "label", "threshold", "dynamic_threshold", "early_exit", "overlap"}

// Policies lists the registered policies, by name.
func Policies() []PolicyDoc {
	docs := map[string]PolicyDoc{
		roundrobin.Name:     {Summary: "the paper's baseline: model i on worker i mod W, a worker serves its models in turn, layer by layer with a barrier"},
		dataparallel.Name:   {Summary: "every worker loads every model of a layer in turn and serves 1/W of its calls"},
		mosaic.Name:         {Summary: "MOSAIC: an ILP places models and assigns calls per layer (stage), from profiled costs", Options: []string{"solver_time_limit", "order", "prefetch"}},
		mosaic.PipelineName: {Summary: "MOSAIC's placement without the stage barrier: workers done with a stage serve the next layer's ready calls", Options: []string{"solver_time_limit"}},
		online.Name:         {Summary: "places models for the expected mix and dispatches each call as it becomes ready (work stealing, re-planning on drift)", Options: []string{"solver_time_limit", "replan", "max_in_flight"}},
	}
	var out []PolicyDoc
	for _, n := range policyNames() {
		d := docs[n]
		d.Name = n
		out = append(out, d)
	}
	return out
}

func policyNames() []string {
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
