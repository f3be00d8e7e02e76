// Package plots draws paper-style figures from results folders (see docs/experiments.md, "Results
// folder"), simulated and replayed alike, and exports a run's timeline as a Chrome trace.
//
// Render reads one or more folders and writes each figure as its own file:
//
//   - speedup: per-stage speedups (expert, aggregator, end-to-end) per policy, grouped by
//     experiment, with error bars where several seeds share an (experiment, mode, policy);
//   - sim-vs-replay: per experiment (and per replay setup, where it was replayed on several),
//     each policy's end-to-end makespan and end-to-end speedup over the baseline, simulated
//     and measured, with the simulator's makespan error in percent and the measured speedup
//     less the simulated one above each pair; a caption names the engine and the hardware
//     measured (from run.json), and notes the replay rows left out because their calls
//     failed and the partial ones shown, marked "*" (skipped without replay rows);
//   - threshold-tradeoff: aggregator skip rate and accuracy against the threshold T, with
//     never-skip (T = +Inf) at the right end, labelled "never";
//   - timeline-LABEL: one lane per worker and policy, intervals coloured by model, loads
//     hatched, idle time grey (the straggler picture);
//   - output-length-LABEL: output-length CDFs per model, log x axis;
//   - expert-demand-LABEL: expert calls per model, sorted, max/min ratio in the title.
//
// One style serves all: the Okabe-Ito colour-blind-safe palette, Liberation Sans at print
// sizes (7-8 pt at the nominal width), axis labels with units, legends in a strip above the
// data, one-column (3.5 in) or two-column (7 in) widths, 300-DPI PNG and PDF (fonts
// embedded) by default, SVG on request.
//
// The data behind each figure is prepared by an exported function that tests can check
// against the CSV values: SpeedupData, SimVsReplayData, TradeoffData, TimelineData,
// OutputLengthData (with CDF) and DemandData. Load also reads a replay's engine and hardware
// from its run.json (Results.Setup). WriteChromeTrace writes the timeline in the
// Chrome trace event format, which Perfetto (ui.perfetto.dev) and chrome://tracing open.
package plots
