package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/mosaic-sched/mosaic/plots"
)

func runPlot(args []string, stdout io.Writer) error {
	fs := newFlagSet("plot", flag.ContinueOnError)
	out := fs.String("o", "figures", "folder for the figures")
	formats := fs.String("format", "png,pdf", "file formats: png, pdf, svg (comma-separated)")
	columns := fs.Int("columns", 1, "figure width: 1 (one column, 3.5 in) or 2 (two columns, 7 in)")
	dpi := fs.Int("dpi", 300, "resolution of PNG files")
	std := fs.Bool("std", false, "error bars show the standard deviation over seeds (default: min-max)")
	family := fs.String("family", "", "restrict the threshold trade-off figure to one policy family (e.g. mosaic)")
	chrome := fs.Bool("chrome-trace", false, "also write each run's timeline in the Chrome trace format (timeline-*.json, for Perfetto)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic plot RESULTS_DIR... [-o FIGDIR] [--format png,pdf,svg] [--columns 1|2] [--chrome-trace]\n\n"+
			"Draws the figures of one or more results folders (mosaic sim -o, mosaic replay -o): speedups per stage,\n"+
			"GPU timelines, output-length CDFs, simulated vs measured makespans, the threshold trade-off, expert demand.")
		fs.PrintDefaults()
	}
	dirs, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("%w: want at least one results folder", errUsage)
	}
	if *dpi < 10 || *dpi > 2400 {
		return fmt.Errorf("%w: --dpi %d: give a resolution from 10 to 2400 dots per inch", errUsage, *dpi)
	}
	width, err := plots.ColumnWidth(*columns)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	opt := plots.Options{Formats: strings.Split(*formats, ","), Width: width, DPI: *dpi, Family: *family, ChromeTrace: *chrome}
	if *std {
		opt.Spread = plots.SpreadStd
	}
	if parseOnly {
		return nil
	}
	figs, err := plots.Render(dirs, *out, opt)
	if err != nil {
		return err
	}
	for _, f := range figs {
		if f.Skipped != "" {
			slog.Info("figure skipped", "figure", f.Name, "reason", f.Skipped)
			continue
		}
		fmt.Fprintf(stdout, "%-32s %s\n", f.Name, strings.Join(f.Files, " "))
	}
	return nil
}
