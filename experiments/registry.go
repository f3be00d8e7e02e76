package experiments

import (
	"sort"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/dataparallel"
	"github.com/mosaic-sched/mosaic/policies/roundrobin"
)

// registry maps policy names to constructors taking the aggregator model's name.
var registry = map[string]func(aggregator string) policies.Policy{
	roundrobin.Name:   func(agg string) policies.Policy { return roundrobin.New(agg) },
	dataparallel.Name: func(agg string) policies.Policy { return dataparallel.New(agg) },
}

func policyNames() []string {
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
