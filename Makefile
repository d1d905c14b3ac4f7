# sharedcontent — see README.md.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
BINARIES  := containerd-sharedcontent sharedcontent-lockserver sharedcontent-demo

.PHONY: all build test bench demo lint check e2e clean $(BINARIES)

all: build

build: $(BINARIES)

$(BINARIES):
	$(GO) build -trimpath -o $(BIN)/$@ ./cmd/$@

# Unit and in-process integration tests, always with the race detector.
# Fuzz targets run their seed corpus here.
test:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# Go benchmarks of the coordinator (HTTP on loopback) and the client.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3s ./lockserver/ ./lockclient/

# The main job on the embedded default: a registry, the embedded coordinator
# and N nodes sharing one temp dir, all in one process. DEMO_FLAGS=--nodes 5
demo:
	$(GO) run ./cmd/sharedcontent-demo $(DEMO_FLAGS)

# End to end: real containerd daemons (pinned in integration/tools, built once
# into .cache/bin) with the proxy plugin, driven by ctr. Needs root, else it
# skips; see docs/e2e.md. E2E_FLAGS=-run=TestBaseline picks scenarios.
e2e:
	SHAREDCONTENT_E2E=1 $(GO) test -count=1 -timeout 15m -v $(E2E_FLAGS) ./integration/e2e/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

check: lint

clean:
	rm -rf $(BIN) .cache
