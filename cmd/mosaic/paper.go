package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/mosaic-sched/mosaic/experiments"
)

func runPaper(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("paper", flag.ContinueOnError)
	ref := fs.String("reference", "", "the paper's figures (default: the built-in experiments/paper/reference.toml)")
	out := fs.String("o", "", "also write the table (markdown) to this file")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mosaic paper [--reference FILE] [-o table.md] RESULTS_DIR...\n\nCompares results folders of experiments/paper/*.toml with the paper's reported figures.")
		fs.PrintDefaults()
	}
	dirs, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("%w: want at least one results folder", errUsage)
	}
	refs, err := experiments.LoadReferences(*ref)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := experiments.PaperTable(&b, refs, dirs); err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			return err
		}
		slog.Info("table written", "file", *out)
	}
	_, err = stdout.Write(b.Bytes())
	return err
}
