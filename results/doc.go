// Package results is what a run leaves behind: the execution trace's schema, one for simulated
// and replayed runs, and the writer of a results folder.
//
// A results folder holds summary.csv (one SummaryRow per experiment, mode and policy: the
// headline figures, speedups over the first policy, and whether they may be used, Status),
// calls.csv (one CallRow per LLM call that ran), queries.csv (one QueryRow per query and
// policy) and workers.csv (one WorkerRow per interval of a worker's time), with run.json and
// host.json beside them. Times are seconds from the start of the run, written with
// microsecond resolution, so files written by the simulator with the same seed are
// byte-identical. The readers (ReadCallsCSV and siblings) are strict: an error names the file,
// the line and the column; columns added after a folder was written read with their defaults.
//
// A Dir owns a results folder while a command writes it: an exclusive OS lock held for the
// writer's life (released by the kernel when the process ends, however it ends), whole-file
// writes through a temporary file renamed into place (Write), whole files written as their
// rows come, in sections joined in order and renamed into place once complete (OpenStream,
// for a streamed simulation's calls, queries and worker intervals), rows appended as they are
// measured (Append), and the supersession of one policy's rows when it runs again (Supersede,
// for a resumed replay). Every command that writes a results folder (`mosaic sim -o`, sweeps,
// `mosaic merge`, `mosaic replay`) writes it through a Dir, so two processes never write one
// folder at once and a folder never holds two rows for one call.
//
// Reading guide: schema.go (the rows and their headers), read.go (the readers), dir.go and
// lock.go (the writer), stream.go (tables written as their rows come), sensitivity.go (a
// sensitivity analysis's rows).
package results
