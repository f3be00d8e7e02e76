package experiments

import "strings"

// OnlinePolicies are the policies `mosaic online` compares when queries arrive over time: the
// deployments people run (round-robin's models pinned with FCFS queues, data-parallel,
// MOSAIC's plan for the expected mix), shortest-expected-job-first on that plan, the online
// policy (re-planning, work stealing) alone and with PLAS on top, and Autellix's PLAS and
// ATLAS on MOSAIC's plan.
func OnlinePolicies() []PolicySpec {
	return []PolicySpec{
		{Name: "round-robin"},
		{Name: "data-parallel"},
		{Name: "mosaic"},
		{Name: "mosaic", Label: "mosaic+sjf", Dispatch: "sjf"},
		{Name: "online"},
		{Name: "online", Label: "online+plas", Dispatch: "plas"},
		{Name: "plas"},
		{Name: "atlas"},
	}
}

// ReplacePolicies makes the experiment compare ps instead of the policies its file lists; the
// file's [[policy]] keys no longer apply.
func (e *Experiment) ReplacePolicies(ps []PolicySpec) {
	e.Policies = ps
	e.ownPolicies = true
}

// fileHas reports whether the file gives key, leaving out the [[policy]] keys of a file whose
// policies were replaced.
func (e *Experiment) fileHas(key string) bool {
	if e.ownPolicies && (key == "policy" || strings.HasPrefix(key, "policy[")) {
		return false
	}
	return e.file.Has(key)
}
