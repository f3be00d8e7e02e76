// Package traces holds the vocabulary of work and of what happened to it: length distributions
// that workloads are drawn from, and (as the MoA pipeline grows) workloads, queries, calls and
// the execution-trace schema shared by simulation and replay.
package traces
