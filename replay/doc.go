// Package replay will hold the real Backend: an OpenAI-compatible streaming client driving vLLM
// servers (or `mosaic emulate`), the worker lifecycle, GPU telemetry and the profiler. It is
// empty until replay lands; see DESIGN.md.
package replay
