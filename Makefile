# sharedcontent — see README.md.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
BINARIES  := containerd-sharedcontent sharedcontent-lockserver sharedcontent-demo sharedcontentctl

.PHONY: all build test bench bench-abuse bench-scale bench-scale-short bench-containerd demo lint check e2e chaos chaos-inproc clean $(BINARIES)

all: build

build: $(BINARIES)

$(BINARIES):
	$(GO) build -trimpath -o $(BIN)/$@ ./cmd/$@

# Unit and in-process integration tests, always with the race detector.
# Fuzz targets run their seed corpus here. Then deploy/check, a module of
# its own (it needs k8s.io/api, which the main module does not): the
# Kubernetes manifests, systemd units and Grafana dashboard.
test:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	cd deploy/check && $(GO) test -race -count=1 -timeout 5m ./...

# Benchmarks, about nine minutes on 2 cores: the Go benchmarks of the
# coordinator and the client (BenchmarkNotify for 400 rounds, for its p99),
# the stand-alone coordinator's memory under abuse (issue 15: 200k idle keys
# released, about 3 minutes; 5,000 waiters on one key), then bench/ (its
# own module) against etcd and Redis, which it starts on
# loopback; installs them (Debian) when missing. Regenerates
# docs/BENCHMARKS.md and docs/bench-*.png.
BENCH_GO_OUT ?= $(or $(TMPDIR),/tmp)/sharedcontent-gobench.txt
bench:
	command -v etcd >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server; }
	command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; }
	@{ $(GO) test -run '^$$' -bench . -skip Notify -benchmem ./lockserver/ ./lockclient/ 2>&1 && \
	  $(GO) test -run '^$$' -bench Notify -benchtime 400x -benchmem ./lockclient/ 2>&1 && \
	  $(GO) test -v -run '^$$' -bench . -benchtime 1x -timeout 15m ./cmd/sharedcontent-lockserver/ 2>&1; \
	  echo $$? > $(BENCH_GO_OUT).rc; } | tee $(BENCH_GO_OUT); exit $$(cat $(BENCH_GO_OUT).rc)
	cd bench && $(GO) run . -out ../docs -gobench $(BENCH_GO_OUT)
	$(MAKE) bench-abuse
	$(MAKE) bench-scale
	$(MAKE) bench-containerd

# The stand-alone coordinator under abuse (issue 17), about 30 s: 300 idle
# connections under ulimit -n 256, then 100k waiters on one key. Prints
# what was held, refused and recovered, enqueue rates and status sizes.
bench-abuse: sharedcontent-lockserver
	cd bench && $(GO) run ./abuse -server $(CURDIR)/$(BIN)/sharedcontent-lockserver

# The scale benchmark (issue 26): the coordinator binary against N simulated
# nodes in one process, each with its own node ID, session and clients on
# its own 127.x.y.z address. Rollouts of a 10-blob image at N = 100, 1,000,
# 2,600 and 5,000, 5,000 nodes renewing sessions for a minute, and a
# coordinator restart with 1,000 nodes × 1,000 and × 10,000 references.
# Rewrites the scale block of docs/BENCHMARKS.md (and only it). Long: up to
# an hour on 2 cores. SCALE_FLAGS=-scale-rollout 100,1000 to choose.
SCALE_FLAGS ?=
bench-scale: sharedcontent-lockserver
	cd bench && $(GO) run . -only scale -server $(CURDIR)/$(BIN)/sharedcontent-lockserver -out ../docs $(SCALE_FLAGS)

# A short scale run for CI, about two minutes: a rollout of 100 nodes and a
# restart with 100 nodes × 1,000 references. Fails if an invariant breaks:
# a blob downloaded other than once, a node that did not finish or was not
# synced again. Writes no doc.
bench-scale-short: sharedcontent-lockserver
	cd bench && $(GO) run . -only scale -server $(CURDIR)/$(BIN)/sharedcontent-lockserver -scale-check \
	  -scale-rollout 100 -scale-steady "" -scale-restart 100x1000

# Real containerd daemons (as `make e2e` starts them, without the race
# detector), one node: `ctr images pull` of 256 MiB and 1 GiB images, stock
# containerd against sharedcontent without and with its diff plugin, and
# (the control for the proxy's cost) containerd at the main module's
# containerd version, stock against sharedcontent compiled in
# (integration/tools/builtin, built first); then 3 sharedcontent nodes
# pulling (then only fetching) the 256 MiB image at once against one node
# alone, and 3 stock nodes against one. Alternating rounds, median. About
# 10 minutes on 2 cores. Needs root (else it skips). Regenerates
# docs/bench-containerd.md. The proxied write alone:
# go test -run '^$$' -bench ProxiedWrite -benchtime 6x ./plugin/
bench-containerd:
	SHAREDCONTENT_E2E=1 SHAREDCONTENT_E2E_RACE=0 SHAREDCONTENT_E2E_BENCH=$(CURDIR)/docs/bench-containerd.md \
	  $(GO) test -count=1 -timeout 30m -v -run '^TestBenchContainerdPull$$' ./integration/e2e/

# The main job on the embedded default: a registry, the embedded coordinator
# and N nodes sharing one temp dir, all in one process. DEMO_FLAGS=--nodes 5
demo:
	$(GO) run ./cmd/sharedcontent-demo $(DEMO_FLAGS)

# End to end: real containerd daemons (pinned in integration/tools, built once
# into .cache/bin) with the proxy plugin, driven by ctr. Needs root, else it
# skips; see docs/e2e.md. E2E_FLAGS=-run=TestBaseline picks scenarios. It
# includes a short TestChaosReal (90 s of faults; `make chaos` runs it long).
e2e:
	SHAREDCONTENT_E2E=1 $(GO) test -count=1 -timeout 40m -v $(E2E_FLAGS) ./integration/e2e/

# The real-process chaos test (issue 23; integration/e2e/chaos_test.go): a
# stand-alone coordinator and 3 nodes (containerd + containerd-sharedcontent,
# content and diff proxies) pulling and removing images that share layers
# while faults are injected at random for CHAOS_DURATION: kill -9 of a
# plugin, a containerd, a node, the coordinator; a node's coordinator link
# black-holed, refused or delayed; a node's state dir wiped; the coordinator
# down, or a node cut off, longer than --node-expiry. After every operation
# every blob the node's containerd lists must read back. Then everything
# heals, every node pulls every image, everything is removed, and the
# shared root must be empty. Prints one summary line (operations, faults by
# kind, blobs read back, lost = N). Needs root, like `make e2e`.
# CHAOS_SEED=<seed> replays the random choices; CHAOS_FAULTS=kill-plugin,delay
# picks fault kinds. The log is in CHAOS_LOG.
CHAOS_DURATION ?= 10m
CHAOS_TIMEOUT  ?= 60m
CHAOS_LOG      ?= $(or $(TMPDIR),/tmp)/sharedcontent-chaos.log
chaos:
	@SHAREDCONTENT_E2E=1 SHAREDCONTENT_E2E_CHAOS_DURATION=$(CHAOS_DURATION) \
	  $(if $(CHAOS_SEED),SHAREDCONTENT_E2E_CHAOS_SEED=$(CHAOS_SEED)) $(if $(CHAOS_FAULTS),SHAREDCONTENT_E2E_CHAOS_FAULTS=$(CHAOS_FAULTS)) \
	  $(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -v -run '^TestChaosReal$$' ./integration/e2e/ >$(CHAOS_LOG) 2>&1; \
	  rc=$$?; grep -E 'chaos|^(---|===|ok|FAIL|PASS)' $(CHAOS_LOG) | grep -v 'not lost'; echo "full log: $(CHAOS_LOG)"; exit $$rc

# The in-process randomized fault test of issue 13 (integration/chaos_test.go;
# `make test` runs 60 steps of it), longer: CHAOS_STEPS steps (about 3
# minutes for 500 on 2 cores). CHAOS_SEED=<seed> replays the actions of a
# run. Prints the steps and the summary (steps, violations, actions); the
# nodes' logs are in CHAOS_INPROC_LOG.
CHAOS_STEPS      ?= 500
CHAOS_INPROC_LOG ?= $(or $(TMPDIR),/tmp)/sharedcontent-chaos-inproc.log
chaos-inproc:
	@SHAREDCONTENT_CHAOS_STEPS=$(CHAOS_STEPS) $(if $(CHAOS_SEED),SHAREDCONTENT_CHAOS_SEED=$(CHAOS_SEED)) \
	  $(GO) test -race -count=1 -timeout 60m -v -run '^TestChaos$$' ./integration/ >$(CHAOS_INPROC_LOG) 2>&1; \
	  rc=$$?; grep -v 'level=' $(CHAOS_INPROC_LOG); echo "full log: $(CHAOS_INPROC_LOG)"; exit $$rc

# gofmt, go vet, and the package layers (internal/layers: imports point
# down only, nothing imports integration/).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) test -count=1 ./internal/layers/
	cd deploy/check && $(GO) vet ./...

check: lint

clean:
	rm -rf $(BIN) .cache
