package experiments

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
	"github.com/mosaic-sched/mosaic/traces"
)

// policyBuild is what a policy's factory may use: the experiment (for errors located at a
// key), the key of the policy's table ("policy[i]") and the output-length distributions that
// differ from the models' own.
type policyBuild struct {
	e       *Experiment
	key     string
	outputs map[policies.LayerModel]traces.LengthDist
	// online says queries arrive over time: the offline policies then serve each call as it
	// becomes ready (online.New under their names) instead of stage by stage.
	online bool
	// dispatch is the [[policy]]'s dispatch key ("" when not given).
	dispatch string
}

// served returns the constructor of a policy served online: o with the dispatch order the
// [[policy]] gives, else order.
func (b policyBuild) served(o online.Options, order string) func() policies.Policy {
	o.Outputs = b.outputs
	o.Order = cmp.Or(b.dispatch, order)
	return func() policies.Policy { return online.New(o) }
}

// static is a static deployment's options: placed once, no stealing, no re-planning.
func static(name, placement string) online.Options {
	return online.Options{Name: name, Placement: placement, Steal: -1, Replan: -1}
}

// errorf returns an error located at the policy's own option key.
func (b policyBuild) errorf(option, format string, args ...any) error {
	return b.e.errorf(b.key+"."+option, format, args...)
}

// policyKind is a registered policy: its name, what it does, and its factory, which checks
// the policy's own options and returns the policy's constructor.
type policyKind struct {
	name, summary string
	// section is the key of the policy's options table in its [[policy]] table ("" when it
	// takes none), and optionType the table's type, for listings.
	section    string
	optionType reflect.Type
	// given reports whether the [[policy]] table holds the policy's options table.
	given func(*PolicySpec) bool
	build func(b policyBuild, spec *PolicySpec) (func() policies.Policy, error)
}

// kind registers a policy whose options table, of type O, is selected from a [[policy]] table
// by opts (nil for a policy without options). The factory gets the options decoded (their
// zero value when the table is absent), so each policy reads only its own typed options.
func kind[O any](name, summary, section string, opts func(*PolicySpec) *O, build func(b policyBuild, o O) (func() policies.Policy, error)) policyKind {
	k := policyKind{name: name, summary: summary, section: section,
		given: func(*PolicySpec) bool { return false },
		build: func(b policyBuild, _ *PolicySpec) (func() policies.Policy, error) {
			var zero O
			return build(b, zero)
		}}
	if opts != nil {
		k.optionType = reflect.TypeFor[O]()
		k.given = func(s *PolicySpec) bool { return opts(s) != nil }
		k.build = func(b policyBuild, s *PolicySpec) (func() policies.Policy, error) {
			var o O
			if p := opts(s); p != nil {
				o = *p
			}
			b.key += "." + section
			return build(b, o)
		}
	}
	return k
}

// noOptions is the options type of a policy that takes none.
type noOptions struct{}

// policyKinds returns the registered policies, sorted by name. Adding a policy means a
// policyKind here and, when it takes options, their typed table in PolicySpec.
func policyKinds() []policyKind {
	return []policyKind{
		attained(online.OrderATLAS, "Autellix's ATLAS: PLAS by the attained service along the longest path to the call in its graph, for programs that fan out",
			func(s *PolicySpec) *AttainedOptions { return s.Atlas }),
		kind[noOptions](dataparallel.Name, "every worker loads every model of a layer in turn and serves 1/W of its calls; online: every model on every worker, each call to the least loaded", "", nil,
			func(b policyBuild, _ noOptions) (func() policies.Policy, error) {
				if b.online {
					return b.served(static(dataparallel.Name, online.PlaceEverywhere), online.OrderFCFS), nil
				}
				return func() policies.Policy { return dataparallel.New() }, nil
			}),
		kind(placement.Name, "MOSAIC: an ILP places models and assigns calls per layer (stage), from profiled costs; online: its plan for the expected mix, each call dispatched when ready", "mosaic",
			func(s *PolicySpec) *MosaicOptions { return s.Mosaic },
			func(b policyBuild, o MosaicOptions) (func() policies.Policy, error) {
				opts := placement.Options{Outputs: b.outputs}
				var err error
				if opts.TimeLimit, err = solverTimeLimit(b, o.SolverTimeLimit); err != nil {
					return nil, err
				}
				if b.online {
					for key, given := range map[string]bool{"order": o.Order != "", "prefetch": o.Prefetch != nil} {
						if given {
							return nil, b.errorf(key, "is an option of the offline batch's stages; queries arriving over time are served per call (MOSAIC's plan for the expected mix, each call dispatched when it is ready)")
						}
					}
					so := static(placement.Name, online.PlaceMosaic)
					so.TimeLimit = opts.TimeLimit
					return b.served(so, online.OrderFCFS), nil
				}
				switch o.Order {
				case "", placement.OrderLongestFirst, placement.OrderPlain:
					opts.Order = o.Order
				default:
					return nil, b.errorf("order", "unknown order %q (known: %s, %s)", o.Order, placement.OrderLongestFirst, placement.OrderPlain)
				}
				if o.Prefetch != nil {
					opts.NoPrefetch = !*o.Prefetch
				}
				return func() policies.Policy { return placement.New(opts) }, nil
			}),
		kind(online.Name, "places models for the expected mix and dispatches each call as it becomes ready (work stealing, re-planning on drift)", "online",
			func(s *PolicySpec) *OnlineOptions { return s.Online },
			func(b policyBuild, o OnlineOptions) (func() policies.Policy, error) {
				opts := online.Options{MaxInFlight: o.MaxInFlight}
				var err error
				if opts.TimeLimit, err = solverTimeLimit(b, o.SolverTimeLimit); err != nil {
					return nil, err
				}
				if r := o.Replan; r != nil {
					switch {
					case *r == 0:
						return nil, b.errorf("replan", "must not be zero: give how often to check the mix (\"60s\"), or \"-1s\" for never")
					case *r > 0 && *r < time.Millisecond:
						return nil, b.errorf("replan", "%v is too short; write a duration with its unit, e.g. \"60s\" (a bare number means nanoseconds)", *r)
					}
					opts.Replan = *r
				}
				if o.MaxInFlight < 0 || (o.MaxInFlight == 0 && b.e.has(b.key+".max_in_flight")) {
					return nil, b.errorf("max_in_flight", "must be positive, got %d", o.MaxInFlight)
				}
				return b.served(opts, online.OrderDeepest), nil
			}),
		kind(placement.PipelineName, "MOSAIC's placement without the stage barrier: workers done with a stage serve the next layer's ready calls (offline batches only)", "pipeline",
			func(s *PolicySpec) *PipelineOptions { return s.Pipeline },
			func(b policyBuild, o PipelineOptions) (func() policies.Policy, error) {
				if b.online {
					return nil, b.e.errorf(strings.TrimSuffix(b.key, ".pipeline")+".name", "pipeline lifts the stage barrier of an offline batch; queries arriving over time are served per call by mosaic (MOSAIC's plan, each call dispatched when ready) or online")
				}
				opts := placement.Options{Outputs: b.outputs, Pipeline: true}
				var err error
				if opts.TimeLimit, err = solverTimeLimit(b, o.SolverTimeLimit); err != nil {
					return nil, err
				}
				return func() policies.Policy { return placement.New(opts) }, nil
			}),
		attained(online.OrderPLAS, "Autellix's PLAS: each model's calls by their program's attained service (least first, in levels), with anti-starvation; placed as MOSAIC plans for the expected mix (plas.placement)",
			func(s *PolicySpec) *AttainedOptions { return s.Plas }),
		kind[noOptions](roundrobin.Name, "the paper's baseline: model i on worker i mod W, a worker serves its models in turn, layer by layer with a barrier; online: the same models pinned, each call queued FCFS on its model's worker", "", nil,
			func(b policyBuild, _ noOptions) (func() policies.Policy, error) {
				if b.online {
					return b.served(static(roundrobin.Name, online.PlaceRoundRobin), online.OrderFCFS), nil
				}
				return func() policies.Policy { return roundrobin.New() }, nil
			}),
	}
}

// attained registers a program-aware policy of Autellix's: a static deployment whose queues
// follow order (online.OrderPLAS or OrderATLAS).
func attained(order, summary string, opts func(*PolicySpec) *AttainedOptions) policyKind {
	return kind(order, summary, order, opts, func(b policyBuild, o AttainedOptions) (func() policies.Policy, error) {
		so := static(order, cmp.Or(o.Placement, online.PlaceMosaic))
		if !slices.Contains(online.Placements, so.Placement) {
			return nil, b.errorf("placement", "unknown placement %q (known: %s)", o.Placement, strings.Join(online.Placements, ", "))
		}
		if b.dispatch != "" {
			return nil, b.e.errorf(strings.TrimSuffix(b.key, "."+order)+".dispatch", "the %s policy orders its queues itself; dispatch is for the other policies", order)
		}
		if o.Quantum < 0 || o.Quantum != 0 && o.Quantum < time.Millisecond {
			return nil, b.errorf("quantum", "%v is too short; write a duration with its unit, e.g. \"10s\"", o.Quantum)
		}
		so.Quantum = o.Quantum.Seconds()
		if o.Starve != nil {
			if *o.Starve == 0 || math.IsNaN(*o.Starve) {
				return nil, b.errorf("starve", "must be positive (a ratio of wait to attained service), or negative for never, got %g", *o.Starve)
			}
			so.Starve = *o.Starve
		}
		return b.served(so, order), nil
	})
}

// lookupPolicy returns the registered policy of that name.
func lookupPolicy(name string) (policyKind, bool) {
	for _, k := range policyKinds() {
		if k.name == name {
			return k, true
		}
	}
	return policyKind{}, false
}

// buildPolicy checks a [[policy]] table's policy-specific options and returns the policy's
// constructor: the named policy reads its own options table, and a table meant for another
// policy is an error.
func buildPolicy(k policyKind, b policyBuild, spec *PolicySpec) (func() policies.Policy, error) {
	for _, other := range policyKinds() {
		if other.name != k.name && other.given(spec) {
			key := b.key + "." + other.section
			if !b.e.has(key) {
				if keys := b.e.file.Keys(key); len(keys) > 0 {
					key = keys[0] // a dotted key (online.replan = ...): name it and its line
				}
			}
			return nil, b.e.errorf(key, "options of the %s policy in a [[policy]] of %s (%s)", other.name, k.name, optionsOf(k))
		}
	}
	return k.build(b, spec)
}

// optionsOf says which options a policy takes.
func optionsOf(k policyKind) string {
	if k.section == "" {
		return "it takes none besides the common ones"
	}
	return "its own are " + strings.Join(k.options(), ", ")
}

// options lists the policy's own option keys, as written in a [[policy]] table
// ("mosaic.order").
func (k policyKind) options() []string {
	if k.optionType == nil {
		return nil
	}
	var out []string
	for i := range k.optionType.NumField() {
		if tag := tomlName(k.optionType.Field(i)); tag != "" {
			out = append(out, k.section+"."+tag)
		}
	}
	return out
}

// solverTimeLimit checks a policy's solver time limit: 0 keeps the default, and a limit
// under a millisecond is a unit mistake (a bare number means nanoseconds).
func solverTimeLimit(b policyBuild, t time.Duration) (time.Duration, error) {
	if t < 0 || t != 0 && t < time.Millisecond {
		return 0, b.errorf("solver_time_limit", "%v is too short; write a duration with its unit, e.g. \"10s\" or \"500ms\"", t)
	}
	return t, nil
}

// PolicyDoc describes a policy for listings: its name, what it does and the options of its
// [[policy]] table besides those every policy takes.
type PolicyDoc struct {
	Name, Summary string
	Options       []string
}

// CommonPolicyOptions are the [[policy]] keys every policy takes: PolicySpec's keys but the
// policies' own options tables.
var CommonPolicyOptions = commonPolicyOptions()

func commonPolicyOptions() []string {
	sections := map[string]bool{}
	for _, k := range policyKinds() {
		sections[k.section] = true
	}
	var out []string
	t := reflect.TypeFor[PolicySpec]()
	for i := range t.NumField() {
		if tag := tomlName(t.Field(i)); tag != "" && !sections[tag] {
			out = append(out, tag)
		}
	}
	return out
}

// Policies lists the registered policies, by name, with their own options.
func Policies() []PolicyDoc {
	var out []PolicyDoc
	for _, k := range policyKinds() {
		out = append(out, PolicyDoc{Name: k.name, Summary: k.summary, Options: k.options()})
	}
	return out
}

func policyNames() []string {
	var names []string
	for _, k := range policyKinds() {
		names = append(names, k.name)
	}
	return names
}
