# MOSAIC — build, run and test. `make run` and `make test` install what is missing themselves.

GO        ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
export CGO_ENABLED := 1
export CGO_CFLAGS := -I/usr/include/lpsolve -Wno-deprecated-declarations
export CGO_LDFLAGS := -llpsolve55 -lcolamd -lm
# The ILP solver (golp) is built only with this tag; without it the planner uses its heuristic.
export GOFLAGS := $(GOFLAGS) -tags=lpsolve
MOSAIC_DATA ?= $(abspath ../shared/data)
export MOSAIC_DATA
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
BIN       := bin/mosaic

.PHONY: all deps node-deps ollama build run test bench bench-online pgo fuzz lint profile profile-tp profile-gpus paper online sensitivity clean

all: build

# System packages: lp_solve headers and library for the ILP solver (golp).
deps:
	@if [ ! -f /usr/include/lpsolve/lp_lib.h ]; then \
		echo "installing liblpsolve55-dev (lp_solve) ..." >&2; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y -qq liblpsolve55-dev >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq liblpsolve55-dev; }; \
	fi
	@if ! GOPROXY=off GOFLAGS=-mod=mod $(GO) list -deps -test ./... >/dev/null 2>&1; then \
		echo "downloading Go modules (gonum, gonum/plot, golp, go-nvml, BurntSushi/toml, testify; a minute on a fresh machine) ..." >&2; \
		$(GO) mod download -x 2>&1 | sed -n 's|^# get .*proxy[^/]*/\(.*\)/@v/\(.*\)\.zip: 200 OK.*|  got \1 \2|p' >&2; \
		$(GO) mod download; \
	fi

# The official openai client (Node) that the emulator is tested with, pinned by its
# package-lock.json; without npm (or the registry) that test skips and says why.
NODE_CLIENT := replay/emulate/testdata/openai-client
node-deps:
	@if [ -f $(NODE_CLIENT)/node_modules/openai/package.json ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
		echo "installing the openai npm package for the client test ..." >&2; \
		(cd $(NODE_CLIENT) && npm ci --no-audit --no-fund --loglevel=error) || \
			echo "npm ci failed: the openai client test will skip" >&2; \
	else echo "npm not found: the openai client test will skip" >&2; fi

# Ollama, an inference server this project did not write (it vendors llama.cpp), built from
# the Go module proxy for replay's real-engine test (cmd/mosaic/ollama_test.go). The proxy's
# module zips drop vendored folders: Debian supplies the two headers v0.6.5 then lacks. The
# build takes about 5 minutes on 2 cores, once; without it the test skips and says why.
OLLAMA_VERSION := v0.6.5
OLLAMA := bin/ollama
ollama:
	@if [ -x $(OLLAMA) ] && $(GO) version -m $(OLLAMA) 2>/dev/null | grep -q "mod.*github.com/ollama/ollama.*$(OLLAMA_VERSION)"; then :; else \
		echo "building ollama $(OLLAMA_VERSION) (CPU only; about 5 minutes on 2 cores) ..." >&2; \
		if [ ! -f /usr/include/nlohmann/json.hpp ] || [ ! -f /usr/include/stb/stb_image.h ]; then \
			SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
			$$SUDO apt-get install -y -qq nlohmann-json3-dev libstb-dev >/dev/null 2>&1 || \
			{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nlohmann-json3-dev libstb-dev; } || true; \
		fi; \
		mkdir -p bin && env -u GOFLAGS -u CGO_CFLAGS -u CGO_LDFLAGS GOBIN=$(abspath bin) \
			$(GO) install -ldflags "-X github.com/ollama/ollama/version.Version=$(OLLAMA_VERSION:v%=%)" \
			github.com/ollama/ollama@$(OLLAMA_VERSION) || \
			echo "ollama did not build: the replay test against it will skip and say why" >&2; \
	fi

build: deps
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commitFlag=$(COMMIT)" -o $(BIN) ./cmd/mosaic

# The main job on built-in defaults: the quick-start experiment.
run: build
	./$(BIN) sim

test: deps node-deps ollama
	$(GO) vet ./...
	$(GO) test -count=1 ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x ./...

# The whole-process figure of a large online run (docs/performance.md): wall time and peak
# resident memory of `mosaic sim` on the online MoA example, QUERIES queries each (default
# 100,000 and 1,000,000; QUERIES="100000 1000000 10000000" REPEAT=3 for the documented set;
# RATE, TOML and WRITE=0 as tools/bench_online.sh describes).
bench-online: build
	tools/bench_online.sh $(BIN)

# `go build` optimises the binary with the CPU profile cmd/mosaic/default.pgo (profile-guided
# optimisation). This rebuilds that profile from the runs docs/performance.md times; rebuild
# the binary afterwards (make build) to use it.
pgo: build
	GO=$(GO) tools/pgo.sh $(BIN)

# Fuzz the command line (every command stops once its input is parsed and checked), the
# experiment-file reader and the workload-file reader, FUZZTIME each (executions or a duration).
FUZZTIME ?= 1000000x
fuzz: deps
	$(GO) test ./cmd/mosaic -run '^$$' -fuzz '^FuzzCommandLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x -parallel 2
	$(GO) test ./experiments -run '^$$' -fuzz '^FuzzExperimentFile$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x -parallel 2
	$(GO) test ./traces -run '^$$' -fuzz '^FuzzJSONL$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x -parallel 2

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Refit the built-in cost-model profile on the shared measurements: the compute efficiency from
# operator-level profiles, everything else from end-to-end batch latencies on one A100; then,
# keeping those, the tensor-parallel coefficients (all-reduce latencies, per-GPU memory reserve)
# from the same benchmark's 2- and 4-GPU rows. Each step starts from the current profile.
ARGONNE := $(MOSAIC_DATA)/profiles/argonne_inference_bench_no_h100.csv
profile: build
	./$(BIN) calibrate data --data $(ARGONNE) \
		--framework vLLM --gpus 1 --gpu A100-40GB --fit \
		--operators $(MOSAIC_DATA)/profiles/vidur/a100__meta-llama__Llama-2-7b-hf__mlp.csv.gz \
		--operators $(MOSAIC_DATA)/profiles/vidur/a100__meta-llama__Meta-Llama-3-8B__mlp.csv.gz \
		-o sim/catalog/profile.toml
	$(MAKE) profile-tp
	$(MAKE) profile-gpus

profile-tp: build
	./$(BIN) calibrate data --data $(ARGONNE) --framework vLLM --gpus 2,4 --gpu A100-40GB \
		--model llama-2-7b --model llama-3-8b --model mistral-7b --model qwen2-7b --model llama-2-70b \
		--profile sim/catalog/profile.toml --fit \
		--fit-only allreduce_us --fit-only allreduce_hop_us --fit-only tp_reserve_gib \
		-o sim/catalog/profile.toml

# Every other GPU with measurements gets coefficients of its own, each fit holding rows out and
# recording its error on them (mosaic catalog gpus shows it), the default left as it is: MI300X
# and MI250 on Argonne's vLLM rows (every TP degree; lengths 256 and 1,024 held out; with the
# eager-engine terms docs/calibration.md explains for vLLM 0.6.1 on ROCm), H100 and
# H200 on forward passes (tools/measurements; the TP 8 shard held out; their engine overheads
# stay the A100 vLLM fit's, which a bare forward pass does not measure). A100-80GB takes the
# A100-40GB fit by design (like = "A100-40GB" in the profile).
FORWARD := tools/measurements
profile-gpus: build
	./$(BIN) calibrate data --data $(ARGONNE) --framework vLLM --gpus 1,2,4,8 --gpu MI300X \
		--fit --fit-also launch_floor_ms --fit-also attention_compute_efficiency --fit-also paged_attention_v1_factor \
		--holdout L=256,1024 --keep-default \
		--profile sim/catalog/profile.toml -o sim/catalog/profile.toml
	./$(BIN) calibrate data --data $(ARGONNE) --framework vLLM --gpus 1,2,4 --gpu MI250-GCD \
		--fit --fit-also launch_floor_ms --fit-also attention_compute_efficiency --fit-also paged_attention_v1_factor \
		--holdout L=256,1024 --keep-default \
		--profile sim/catalog/profile.toml -o sim/catalog/profile.toml
	./$(BIN) calibrate forward --gpu H100-80GB --fit --holdout tp=8 \
		$(FORWARD)/h100_llama-3-8b.csv $(FORWARD)/h100_llama-3-70b_tp4.csv $(FORWARD)/h100_llama-3-70b_tp8.csv \
		--profile sim/catalog/profile.toml -o sim/catalog/profile.toml
	./$(BIN) calibrate forward --gpu H200 --fit --holdout tp=8 \
		$(FORWARD)/h200_llama-3-8b.csv $(FORWARD)/h200_llama-3-70b_tp4.csv $(FORWARD)/h200_llama-3-70b_tp8.csv \
		--profile sim/catalog/profile.toml -o sim/catalog/profile.toml

# The paper's three experiments over seeds 1..PAPER_SEEDS, side by side with the paper's figures
# (mean, spread and whether each is within its target), and their figures.
PAPER_DIR ?= out/paper
PAPER_SEEDS ?= 5
paper: build
	./$(BIN) paper --seeds $(PAPER_SEEDS) --results $(PAPER_DIR) -o $(PAPER_DIR)/table.md
	./$(BIN) plot -o $(PAPER_DIR)/figures $(PAPER_DIR)/mmlu-pro $(PAPER_DIR)/medmcqa $(PAPER_DIR)/gpqa
	./$(BIN) plot -o $(PAPER_DIR)/figures/seed-1 $(PAPER_DIR)/mmlu-pro/0000_seed=1 $(PAPER_DIR)/medmcqa/0000_seed=1 $(PAPER_DIR)/gpqa/0000_seed=1

# The paper's three workloads and the agent program served online: every policy at three loads
# against each cluster's capacity (light, near saturation, overloaded), seeds 1..ONLINE_SEEDS,
# figures over each run's steady-state window, and latency against load per experiment.
ONLINE_DIR ?= out/online
ONLINE_SEEDS ?= 3
online: build
	./$(BIN) online --seeds $(ONLINE_SEEDS) --results $(ONLINE_DIR) -o $(ONLINE_DIR)/table.md
	for e in mmlu-pro medmcqa gpqa agent-dag; do ./$(BIN) plot -o $(ONLINE_DIR)/figures/$$e $(ONLINE_DIR)/$$e/seed-1 || exit 1; done

# How each paper speedup moves with each assumption over its plausible range (tornado charts).
SENSITIVITY_DIR ?= out/sensitivity
sensitivity: build
	./$(BIN) sensitivity --seeds 3 -o $(SENSITIVITY_DIR)
	./$(BIN) plot -o $(SENSITIVITY_DIR)/figures $(SENSITIVITY_DIR)

clean:
	rm -rf bin
