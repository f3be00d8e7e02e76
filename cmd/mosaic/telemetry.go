package main

import "time"

// startTelemetry starts GPU telemetry into path; it returns nil when telemetry is unavailable.
var startTelemetry = func(path string, start time.Time, scale float64, every time.Duration) func() { return nil }
