// Package policies will hold the contract every scheduling policy is written against (Policy,
// View, Action, Event), the Driver that runs the Mixture-of-Agents pipeline over any Backend,
// the aggregation rules, and one subpackage per policy. It is empty until the MoA pipeline
// lands; see DESIGN.md.
package policies
