package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCommandLine runs mosaic on arbitrary command lines (arguments separated by NUL) with
// every command stopping once its flags, arguments and --set/--sweep overrides are parsed
// and checked (parseOnly): none may panic, the exit status is 0, 1 or 2, and a failure says
// why on stderr. EXP in an argument stands for a small experiment file and OUT for a scratch
// folder, so that overrides reach a real experiment.
//
//	go test ./cmd/mosaic -run '^$' -fuzz FuzzCommandLine -fuzztime 1000000x -fuzzminimizetime 100x
func FuzzCommandLine(f *testing.F) {
	for _, line := range []string{
		"sim\x00EXP\x00--seed\x003\x00--set\x00workload.queries=5",
		"sim\x00EXP\x00--set\x00workload.arrival_rate=-1",
		"sim\x00EXP\x00--set\x00policy.0.threshold=0.5\x00--set\x00engine.max_num_seqs=x",
		"sim\x00EXP\x00-o\x00OUT\x00--sweep\x00seed=1,2\x00--sweep\x00workload.queries=3,4\x00--shard\x002/3",
		"sim\x00--shard\x00auto\x00--sweep\x00seed=1,2\x00-o\x00OUT",
		"sim\x00EXP\x00--policy\x00mosaic\x00--sweep\x00seed=1",
		"replay\x00EXP\x00-o\x00OUT\x00--resume",
		"plan\x00EXP\x00--policy\x00mosaic",
		"plot\x00--dpi\x00-5\x00OUT",
		"plot\x00OUT\x00--columns\x003\x00--format\x00gif",
		"merge\x00OUT\x00OUT\x00-o\x00OUT",
		"paper\x00--seeds\x000\x00EXP",
		"sensitivity\x00EXP\x00--seeds\x00-1",
		"faster-moa\x00EXP\x00--set\x00workload.dense=maybe",
		"trace\x00gen\x00EXP\x00-o\x00OUT",
		"trace\x00stats\x00EXP",
		"trace\x00convert\x00EXP\x00-o\x00EXP",
		"trace\x00votecheck\x00EXP\x00--options\x000",
		"calibrate\x00--data\x00EXP\x00--gpus\x001,x\x00--holdout\x00gpu=H100",
		"calibrate\x00--splitwise\x00EXP\x00--fit",
		"emulate\x00--gpu\x00A100-80GB\x00--model\x00llama-3-8b\x00--time-scale\x000\x00--load-time\x00-1s",
		"emulate\x00--gpu\x00A100-80GB\x00--model\x00qwen2.5-7b\x00--listen\x000.0.0.0:80\x00--tensor-parallel-size\x003",
		"profile\x00--endpoint\x00http://x\x00--model\x00m\x00--gpu\x00H100-80GB\x00--lengths\x001,,2",
		"catalog\x00gpus",
		"catalog\x00nothing",
		"help\x00sim",
		"--version",
		"simm",
		"",
	} {
		f.Add(line)
	}
	exp, err := filepath.Abs(e2eExperiment)
	if err != nil {
		f.Fatal(err)
	}
	out := f.TempDir()
	parseOnly = true
	f.Cleanup(func() { parseOnly = false })
	logger := slog.Default()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	f.Cleanup(func() { slog.SetDefault(logger) })
	// A scratch working folder: relative paths the fuzzer invents land there.
	wd, err := os.Getwd()
	if err != nil {
		f.Fatal(err)
	}
	if err := os.Chdir(out); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = os.Chdir(wd) })

	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		if line == "" {
			args = nil
		}
		for i, a := range args {
			args[i] = strings.ReplaceAll(strings.ReplaceAll(a, "EXP", exp), "OUT", out)
		}
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		switch {
		case code < 0 || code > 2:
			t.Fatalf("mosaic %q: exit status %d", args, code)
		case code != 0 && stderr.Len() == 0:
			t.Fatalf("mosaic %q: exit status %d and nothing on stderr", args, code)
		}
	})
}

// Every numeric flag out of its range is a usage error that names the flag (exit status 2),
// never a silent default or a panic later.
func TestFlagRanges(t *testing.T) {
	exp, err := filepath.Abs(e2eExperiment)
	if err != nil {
		t.Fatal(err)
	}
	parseOnly = true
	defer func() { parseOnly = false }()
	em := "emulate --gpu A100-80GB --model llama-3-8b "
	pr := "profile --endpoint http://127.0.0.1:1 --model m --arch llama-3-8b --gpu A100-80GB "
	for _, tt := range []struct{ line, flag string }{
		{"calibrate --cpu-overheads EXP --context -5", "--context"},
		{"calibrate --data EXP --gpus 1,x", "--gpus"},
		{em + "--time-scale 0", "--time-scale"},
		{em + "--time-scale -1", "--time-scale"},
		{em + "--max-num-seqs 0", "--max-num-seqs"},
		{em + "--max-batched-tokens -1", "--max-batched-tokens"},
		{em + "--gpu-memory-utilization 1.5", "utilization"},
		{em + "--block-size 0", "--block-size"},
		{em + "--tensor-parallel-size 3", "tensor parallel"},
		{em + "--unload-time -1s", "--unload-time"},
		{em + "--load-time -1s", "--load-time"},
		{em + "--fault-error-rate 2", "error rate"},
		{em + "--fault-stall-rate 0.5", "stall"},
		{em + "--fault-crash-after -1", "crash-after"},
		{em + "--fault-wrong-tokens 1.5", "wrong-tokens"},
		{em + "--fault-disconnect-rate 7", "disconnect"},
		{"paper --seeds 0 EXP", "--seeds"},
		{"sensitivity --seeds -1 EXP", "--seeds"},
		{"plot --dpi -5 x", "--dpi"},
		{"plot --dpi 0 x", "--dpi"},
		{"plot --columns 0 x", "columns"},
		{pr + "--time-scale 0", "--time-scale"},
		{pr + "--warmup -1", "--warmup"},
		{pr + "--max-num-seqs 0", "--max-num-seqs"},
		{pr + "--max-batched-tokens 10", "--max-batched-tokens"},
		{pr + "--gpu-memory-utilization 0", "--gpu-memory-utilization"},
		{pr + "--lengths 1,,2", "--lengths"},
		{"trace check-votes EXP --options 1", "--options"},
		{"sim EXP --shard 3/2 --sweep seed=1,2 -o x", "shard"},
		{"sim EXP --seed -1", "seed"},
	} {
		args := strings.Fields(strings.ReplaceAll(tt.line, "EXP", exp))
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.flag) {
			t.Errorf("mosaic %s: exit status %d (want 2), stderr %q (want it to name %s)", tt.line, code, stderr.String(), tt.flag)
		}
	}
}
