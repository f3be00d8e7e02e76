// Package traces holds the vocabulary of work and of what happened to it: length distributions
// that workloads are drawn from, and (as the MoA pipeline grows) workloads, queries, calls and
// the execution-trace schema shared by simulation and replay.
//
// Workloads come from three places: Generate draws a synthetic Mixture-of-Agents workload
// (skill-based routing with skewed expert demand, per-model length distributions, a vote model
// whose agreement shares CalibrateVotes fits to targets), ImportAnswers builds one whose expert
// answers are real model answers (an AnswerSet such as RouterBench's ARC-Challenge answers), and
// ReadJSONL loads one saved with WriteJSONL. ReadQuestions reads the real question lists
// (prompt lengths, skill categories, gold answers) generators draw from; Stats summarises a
// workload (demand per model, length percentiles, vote patterns, accuracies).
package traces
