// Package traces holds the vocabulary of work: workloads of call graphs (queries, calls and
// what each call reads), the length distributions they are drawn from, arrivals, and the
// answers and votes that decide gates. What happened to the work, the execution trace shared by
// simulation and replay, is package results.
//
// Workloads come from three places: Generate draws a synthetic Mixture-of-Agents workload
// (skill-based routing with skewed expert demand, per-model length distributions, a vote model
// whose agreement shares CalibrateVotes fits to targets), ImportAnswers builds one whose expert
// answers are real model answers (an AnswerSet such as RouterBench's ARC-Challenge answers), and
// ReadJSONL loads one saved with WriteJSONL. ReadQuestions reads the real question lists
// (prompt lengths, skill categories, gold answers) generators draw from; Stats summarises a
// workload (demand per model, length percentiles, vote patterns, accuracies).
package traces
