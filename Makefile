# sharedcontent — see README.md.
GO        ?= go
BIN       ?= bin
PKGS      := ./...
BINARIES  := containerd-sharedcontent sharedcontent-lockserver sharedcontent-demo sharedcontentctl

.PHONY: all build etcd test bench bench-abuse bench-scale bench-ha bench-scale-short bench-containerd demo lint check e2e e2e-k8s chaos chaos-inproc clean $(BINARIES) \
	image image-check image-push helm-check helm-docs helm-render helm-package prometheus-rules

all: build

# The version every binary reports (--version, /healthz, the metric
# sharedcontent_build_info; internal/version), stamped with -ldflags -X:
# `git describe` of the tree (a tag, else the abbreviated commit; -dirty
# for uncommitted changes) and the commit. Without them (a plain `go
# build`) the binaries fall back to what Go recorded, which is nothing
# under CI's GOFLAGS=-buildvcs=false: "dev".
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG  := github.com/sharedcontent/sharedcontent/internal/version
version_ldflags = -X $(VERSION_PKG).version=$(1) -X $(VERSION_PKG).revision=$(2)

build: $(BINARIES)

$(BINARIES):
	$(GO) build -trimpath -ldflags '$(call version_ldflags,$(VERSION),$(REVISION))' -o $(BIN)/$@ ./cmd/$@

# Unit and in-process integration tests, always with the race detector.
# Fuzz targets run their seed corpus here. Then deploy/check, a module of
# its own (it needs k8s.io/api, which the main module does not): the
# Kubernetes manifests, systemd units and Grafana dashboard. Then
# deploy/tools, the module of the image builder and of helm.
#
# The tests of the etcd store run a real 3-member etcd cluster
# (internal/testutil/etcdtest) from the etcd binary that `make etcd`
# builds, named by SHAREDCONTENT_ETCD (a plain `go test` finds bin/etcd
# itself); without it they fail, unless SHAREDCONTENT_SKIP_ETCD=1.
#
# All three run even when one fails; make fails after them, naming the
# ones that failed. A test's in-process daemon logs are shown only if it
# fails (internal/testutil/logbuf; SHAREDCONTENT_TEST_LOGS=1 shows all).
#
# go test starts the packages in the order given, -p (GOMAXPROCS, 2 on
# CI) at once: the longest, which mostly wait, first (TEST_FIRST), so
# that the others run beside them. Last in ./...'s order,
# refcount/etcdstore (about 100 s on 2 cores) ran alone at the end.
TEST_FIRST := ./refcount/etcdstore/ ./integration/ ./cmd/sharedcontent-lockserver/ ./contentv2/
test: etcd
	@failed=; \
	  SHAREDCONTENT_ETCD=$(ETCD) $(GO) test -race -count=1 -timeout 15m $(if $(filter ./...,$(PKGS)),$(TEST_FIRST)) $(PKGS) || failed="$$failed main-module"; \
	  (cd deploy/check && $(GO) test -race -count=1 -timeout 5m ./...) || failed="$$failed deploy/check"; \
	  (cd deploy/tools && $(GO) test -race -count=1 -timeout 5m ./...) || failed="$$failed deploy/tools"; \
	  if [ -n "$$failed" ]; then echo "make test: FAILED in:$$failed"; exit 1; fi

# The etcd server of the tests, built from the Go module proxy at the
# version internal/testutil/etcdtest/tools/go.mod pins (a module of its
# own: the server's dependencies stay out of the main module's). About two
# minutes on 2 cores when nothing is cached; then only when that module
# changes.
ETCD       := $(abspath $(BIN))/etcd
ETCD_TOOLS := internal/testutil/etcdtest/tools
etcd: $(ETCD)
$(ETCD): $(ETCD_TOOLS)/go.mod $(ETCD_TOOLS)/go.sum $(ETCD_TOOLS)/main.go
	cd $(ETCD_TOOLS) && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -o $(ETCD) .

# Benchmarks, about nine minutes on 2 cores: the Go benchmarks of the
# coordinator and the client (BenchmarkNotify for 400 rounds, for its p99),
# the stand-alone coordinator's memory under abuse (docs/design.md §10.3: 200k idle keys
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
	$(MAKE) bench-ha
	$(MAKE) bench-containerd

# The stand-alone coordinator under abuse (docs/design.md §10.3), about 30 s: 300 idle
# connections under ulimit -n 256, then 100k waiters on one key. Prints
# what was held, refused and recovered, enqueue rates and status sizes.
bench-abuse: sharedcontent-lockserver
	cd bench && $(GO) run ./abuse -server $(CURDIR)/$(BIN)/sharedcontent-lockserver

# The scale benchmark (docs/design.md §10): the coordinator binary against N simulated
# nodes in one process, each with its own node ID, session and clients on
# its own 127.x.y.z address. Rollouts of a 10-blob image at N = 100, 1,000,
# 2,600 and 5,000, and of 1,000 older nodes (docs/design.md §10.7), each node
# a contentv2 store with the product's deadlines (docs/design.md §10.6), 5,000 nodes renewing sessions for a minute, and a
# coordinator restart with 1,000 nodes × 1,000 and × 10,000 references.
# Rewrites the scale block of docs/BENCHMARKS.md (and only it). Long: up to
# an hour on 2 cores. SCALE_FLAGS=-scale-rollout 100,1000 to choose.
SCALE_FLAGS ?=
bench-scale: sharedcontent-lockserver
	cd bench && $(GO) run . -only scale -server $(CURDIR)/$(BIN)/sharedcontent-lockserver -out ../docs $(SCALE_FLAGS)

# HA on etcd (docs/design.md §7), about ten minutes on 2 cores: a real 3-member etcd
# (bin/etcd) and real coordinator replicas. 20 failovers per series (kill -9
# of the leader at session TTL 5 s and 2 s, SIGTERM at 5 s) while a client
# holding every URL runs lock cycles; 64 clients on one hot key against
# etcd's concurrency.Mutex on the same cluster (and the bbolt coordinator);
# a rollout of 1,000 simulated nodes on etcd against the same on bbolt.
# Rewrites the ha block of docs/BENCHMARKS.md (and only it).
HA_FLAGS ?=
bench-ha: sharedcontent-lockserver etcd
	cd bench && $(GO) run . -only ha -server $(CURDIR)/$(BIN)/sharedcontent-lockserver -ha-etcd $(ETCD) -out ../docs $(HA_FLAGS)

# A short scale run for CI, about two minutes: a rollout of 100 nodes and a
# restart with 100 nodes × 1,000 references. Fails if an invariant breaks:
# a blob downloaded other than once, a write or reference that went ahead
# without the coordinator, a holder's unlock that failed (say, refused for
# want of a session), a node that did not finish or was not synced again.
# Writes no doc.
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
# skips; see docs/e2e.md. E2E_FLAGS=-run=TestBaseline picks scenarios. The
# long, wait-bound tests run alongside each other, after the others, at most
# E2E_PARALLEL (4) at once: together they use less than a core of the 2
# (integration/e2e/alongside_test.go); E2E_PARALLEL=1 runs one at a
# time. It
# includes a short TestChaosReal (90 s of faults; `make chaos` runs it long)
# and a short TestChaosRealHA (60 s, replicas on etcd; `make chaos
# CHAOS_COORDINATOR=etcd`)
# and TestImageCoordinator and TestImageNodes, the coordinator and the
# node daemons run from `make image`'s image with `ctr run`, which needs
# runc (installed from Debian when missing). TestFailoverDuringPulls runs
# coordinator replicas on a real etcd cluster: `make etcd`'s bin/etcd.
# TestCRIPulls and TestCRIContainerdRestartWhilePluginDown drive CRI with
# crictl; integration/tools/cri.sh builds containerd with CRI and crictl
# on first use (several minutes cold; cached in .cache/bin).
# TestRollingUpgrade builds the daemons of two earlier commits of main
# (git archive, once, into .cache/bin/release-<commit>; the clone needs
# main's history) and upgrades their clusters to this tree under pulls.
# The timeout leaves room for the cold builds: about 20 minutes of tests
# on 2 cores.
E2E_PARALLEL ?= 4
e2e: etcd
	@[ "$$(id -u)" != 0 ] || command -v runc >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc; }
	SHAREDCONTENT_E2E=1 SHAREDCONTENT_ETCD=$(ETCD) $(GO) test -count=1 -timeout 60m -v -parallel $(E2E_PARALLEL) $(E2E_FLAGS) ./integration/e2e/

# The real-process chaos test (integration/e2e/chaos_test.go; docs/e2e.md): a
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
# picks fault kinds. The default, CHAOS_FAULTS=all, adds the storage faults,
# which the short run of `make e2e` leaves out: each node's shared root is
# its own bind mount of the shared directory (of a FUSE passthrough for
# freeze; the directory on a 64 MiB tmpfs for fill), and the chaos
# unmounts it (umount -l), remounts it read-only, fills the filesystem to
# ENOSPC or freezes it, each healed 3-20 s later; after the heal every node
# is also restarted and must read back everything its containerd lists.
# CHAOS_FS=glusterfs puts every node's shared root on its own FUSE mount of
# one replica-3 GlusterFS volume (bricks on this machine; glusterd and the
# packages as for TestGlusterFS), and adds the fault kinds brick-kill (one
# brick's glusterfsd killed, `gluster volume start VOL force` 3-20 s later)
# and brick-kill-all; by hand only (not in .ci/run). About 14 minutes for
# CHAOS_DURATION=10m (docs/e2e.md).
# The log is in CHAOS_LOG.
# CHAOS_COORDINATOR=etcd (TestChaosRealHA, docs/design.md §7) runs 3 coordinator
# replicas on a real 3-member etcd (`make etcd`'s bin/etcd) instead of the
# stand-alone bbolt coordinator (CHAOS_COORDINATOR=bbolt, the default), the
# nodes given every replica's URL, and adds the fault kinds leader-kill,
# leader-term, leader-stop (SIGSTOP past the etcd session TTL),
# etcd-member-kill and etcd-quorum-loss; kill-coordinator and
# coordinator-down-long then act on every replica.
CHAOS_COORDINATOR ?= bbolt
CHAOS_DURATION ?= 10m
CHAOS_FAULTS   ?= all
CHAOS_TIMEOUT  ?= 60m
CHAOS_LOG      ?= $(or $(TMPDIR),/tmp)/sharedcontent-chaos.log
CHAOS_FS       ?=
CHAOS_TEST      = $(if $(filter etcd,$(CHAOS_COORDINATOR)),TestChaosRealHA,$(if $(filter bbolt,$(CHAOS_COORDINATOR)),TestChaosReal,$(error CHAOS_COORDINATOR=$(CHAOS_COORDINATOR): bbolt or etcd)))
chaos: $(if $(filter etcd,$(CHAOS_COORDINATOR)),etcd)
	@SHAREDCONTENT_E2E=1 SHAREDCONTENT_E2E_CHAOS_DURATION=$(CHAOS_DURATION) \
	  $(if $(CHAOS_SEED),SHAREDCONTENT_E2E_CHAOS_SEED=$(CHAOS_SEED)) $(if $(CHAOS_FAULTS),SHAREDCONTENT_E2E_CHAOS_FAULTS=$(CHAOS_FAULTS)) \
	  $(if $(CHAOS_FS),SHAREDCONTENT_E2E_CHAOS_FS=$(CHAOS_FS)) \
	  $(if $(filter etcd,$(CHAOS_COORDINATOR)),SHAREDCONTENT_ETCD=$(ETCD)) \
	  $(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -v -run '^$(CHAOS_TEST)$$' ./integration/e2e/ >$(CHAOS_LOG) 2>&1; \
	  rc=$$?; grep -E 'chaos|^(---|===|ok|FAIL|PASS)' $(CHAOS_LOG) | grep -v 'not lost'; echo "full log: $(CHAOS_LOG)"; exit $$rc

# The in-process randomized fault test of docs/design.md §8 (integration/chaos_test.go;
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

# The OCI image (docs/helm.md "The image"), with no Docker engine and no
# base image: one image index for IMAGE_PLATFORMS holding the static
# (CGO_ENABLED=0, -trimpath) containerd-sharedcontent,
# sharedcontent-lockserver and sharedcontentctl in /usr/local/bin, built
# by deploy/tools/mkimage (go-containerregistry). Its default user is
# 65532 and its entrypoint the coordinator; the node daemon runs from it as
# root. Every time in it is SOURCE_DATE_EPOCH (the commit's time), so two
# builds of one commit give one digest (`make image-check` proves it). The
# output is an OCI layout tarball, IMAGE_OUT, named IMAGE_NAME:IMAGE_VERSION:
#   ctr images import --all-platforms bin/sharedcontent-image.tar
IMAGE_NAME        ?= sharedcontent
IMAGE_VERSION     ?= $(VERSION)
IMAGE_REVISION    ?= $(REVISION)
IMAGE_SOURCE      ?= https://github.com/sharedcontent/sharedcontent
IMAGE_PLATFORMS   ?= linux/amd64 linux/arm64
IMAGE_OUT         ?= $(BIN)/sharedcontent-image.tar
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
TOOLS_BIN         := $(CURDIR)/.cache/bin
IMAGE_BINARIES    := containerd-sharedcontent sharedcontent-lockserver sharedcontentctl
comma             := ,
empty             :=
space             := $(empty) $(empty)

image:
	cd deploy/tools && GOWORK=off $(GO) build -trimpath -o $(TOOLS_BIN)/mkimage ./mkimage
	@set -e; for p in $(IMAGE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; echo "building $(IMAGE_BINARIES) for $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags='-s -w $(call version_ldflags,$(IMAGE_VERSION),$(IMAGE_REVISION))' \
	    -o $(BIN)/image/$${os}_$$arch/ $(addprefix ./cmd/,$(IMAGE_BINARIES)); done
	$(TOOLS_BIN)/mkimage build -bin $(BIN)/image -out $(IMAGE_OUT) -digest-file $(IMAGE_OUT).digest \
	  -name $(IMAGE_NAME):$(IMAGE_VERSION) -platforms $(subst $(space),$(comma),$(strip $(IMAGE_PLATFORMS))) \
	  -epoch $(SOURCE_DATE_EPOCH) -version $(IMAGE_VERSION) -revision $(IMAGE_REVISION) -source $(IMAGE_SOURCE)

# Builds the image twice, the second time with an empty Go build cache (so
# every binary is compiled again), and fails unless both tarballs are the
# same bytes. Version, revision and epoch are read once, for both. Several
# minutes on 2 cores.
image-check:
	@set -e; tmp=$$(mktemp -d); trap 'chmod -R u+w $$tmp; rm -rf $$tmp' EXIT; \
	  pin="IMAGE_VERSION=$(IMAGE_VERSION) IMAGE_REVISION=$(IMAGE_REVISION) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH)"; \
	  $(MAKE) --no-print-directory image $$pin; \
	  GOCACHE=$$tmp/gocache $(MAKE) --no-print-directory image $$pin BIN=$$tmp/bin; \
	  echo "first:  $$(cat $(IMAGE_OUT).digest)"; echo "second: $$(cat $$tmp/bin/sharedcontent-image.tar.digest)"; \
	  cmp $(IMAGE_OUT) $$tmp/bin/sharedcontent-image.tar && echo "image-check: one digest"

# Pushes IMAGE_OUT (make image first) as REGISTRY/IMAGE_NAME:IMAGE_VERSION,
# with the credentials of ~/.docker/config.json. REGISTRY_INSECURE=1 for a
# registry speaking plain HTTP.
image-push:
	@test -n "$(REGISTRY)" || { echo "usage: make image-push REGISTRY=registry.example/project"; exit 2; }
	cd deploy/tools && GOWORK=off $(GO) build -trimpath -o $(TOOLS_BIN)/mkimage ./mkimage
	$(TOOLS_BIN)/mkimage push $(if $(REGISTRY_INSECURE),-insecure) -in $(IMAGE_OUT) $(REGISTRY)/$(IMAGE_NAME):$(IMAGE_VERSION)

# The Helm chart deploy/helm/sharedcontent (docs/helm.md). helm is built
# from the version deploy/tools/go.mod pins, once, into .cache/bin. For
# each values file of the chart's ci/: helm lint --strict and helm
# template, whose output must equal deploy/check/testdata/helm/NAME.yaml
# (make helm-render rewrites those); deploy/check decodes them strictly
# against the Kubernetes API types, cmd/containerd-sharedcontent parses
# the DaemonSet's args with the daemon's own flags, cmd/sharedcontent-lockserver
# the coordinator's with its own (all in make test).
# HA on etcd renders replicas; values that cannot work (a node.mode other
# than host or pod among them) must fail. The
# README's values table must be what values.yaml's comments give
# (make helm-docs rewrites it).
HELM        := $(TOOLS_BIN)/helm
CHART       := deploy/helm/sharedcontent
HELM_GOLDEN := deploy/check/testdata/helm

# As helm's own build: its version, and the Kubernetes version of its
# client-go (1.MINOR for v0.MINOR.x) as the default for lint and template.
$(HELM): deploy/tools/go.mod deploy/tools/go.sum
	cd deploy/tools && v=$$(awk '$$1 == "helm.sh/helm/v3" {print $$2}' go.mod) && \
	  minor=$$(awk '$$1 == "k8s.io/client-go" {split($$2, p, "."); print p[2]}' go.mod) && \
	  GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$$v \
	    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$minor \
	    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$minor" \
	  -o $(HELM) helm.sh/helm/v3/cmd/helm

# Packs the chart as $(BIN)/sharedcontent-VERSION.tgz with appVersion set
# to IMAGE_VERSION, so its default image.tag names the image `make image`
# builds from the same tree (the chart's source has none: image.tag is
# required there).
helm-package: $(HELM)
	$(HELM) package $(CHART) --app-version $(IMAGE_VERSION) -d $(BIN)

helm-docs:
	cd deploy/tools && GOWORK=off $(GO) run ./helmdocs ../helm/sharedcontent

helm-render: $(HELM)
	@mkdir -p $(HELM_GOLDEN)
	@for f in $(CHART)/ci/*-values.yaml; do n=$$(basename $$f -values.yaml); \
	  $(HELM) template sharedcontent $(CHART) -n sharedcontent -f $$f >$(HELM_GOLDEN)/$$n.yaml || exit 1; done

# The rules file for Prometheus without the Operator: the chart's
# PrometheusRule as its defaults render it (deploy/check keeps them equal).
PROMETHEUS_RULES := deploy/prometheus/sharedcontent-rules.yaml

prometheus-rules: $(HELM)
	@set -e; tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	  { echo '# Alert rules for Prometheus (rule_files). Written by make prometheus-rules from'; \
	    echo '# the chart'"'"'s PrometheusRule (deploy/helm/sharedcontent, prometheusRule.*'; \
	    echo '# values): edit the chart, not this file. Runbooks: docs/operations.md "Alerts".'; \
	    echo '# The up alert names the job sharedcontent-coordinator: put your own here.'; \
	    $(HELM) template sharedcontent $(CHART) -n sharedcontent --set image.tag=v0.1.0 --set prometheusRule.enabled=true \
	      --show-only templates/prometheusrule.yaml | awk 'f { sub(/^  /, ""); print } /^spec:$$/ { f = 1 }'; } >$$tmp; \
	  mkdir -p $(dir $(PROMETHEUS_RULES)); cat $$tmp >$(PROMETHEUS_RULES)

helm-check: $(HELM)
	cd deploy/tools && GOWORK=off $(GO) run ./helmdocs -check ../helm/sharedcontent
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	  for f in $(CHART)/ci/*-values.yaml; do n=$$(basename $$f -values.yaml); \
	    $(HELM) lint --strict $(CHART) -n sharedcontent -f $$f >$$tmp/lint 2>&1 || { cat $$tmp/lint; exit 1; }; \
	    $(HELM) template sharedcontent $(CHART) -n sharedcontent -f $$f >$$tmp/$$n.yaml; \
	    cmp -s $$tmp/$$n.yaml $(HELM_GOLDEN)/$$n.yaml || { diff -u $(HELM_GOLDEN)/$$n.yaml $$tmp/$$n.yaml | head -40; \
	      echo "helm-check: $(HELM_GOLDEN)/$$n.yaml is stale: make helm-render"; exit 1; }; \
	    echo "helm-check: $$n: lint and template ok"; done; \
	  $(HELM) template sharedcontent $(CHART) --set image.tag=v0.1.0 --set 'coordinator.ha.etcdEndpoints={http://etcd:2379}' >$$tmp/ha 2>&1 || { cat $$tmp/ha; exit 1; }; \
	  grep -q -- '--etcd-endpoints=http://etcd:2379' $$tmp/ha || { echo "helm-check: coordinator.ha.etcdEndpoints: no replicas rendered"; exit 1; }; \
	  if $(HELM) template sharedcontent $(CHART) --set image.tag=v0.1.0 --set 'coordinator.ha.etcdEndpoints={http://etcd:2379}' --set coordinator.ha.replicas=1 >$$tmp/ha1 2>&1; then \
	    echo "helm-check: coordinator.ha.replicas=1 rendered, want an error"; exit 1; fi; \
	  grep -q 'at least 2' $$tmp/ha1 || { cat $$tmp/ha1; exit 1; }; \
	  if $(HELM) template sharedcontent $(CHART) --set image.tag=v0.1.0 --set 'coordinator.extraArgs={--lease-ttl=60s,--session-ttl=15s}' >$$tmp/lease 2>&1; then \
	    echo "helm-check: --lease-ttl=60s with --session-ttl=15s rendered, want an error"; exit 1; fi; \
	  grep -q 'fail-open delay' $$tmp/lease || { cat $$tmp/lease; exit 1; }; \
	  if $(HELM) template sharedcontent $(CHART) --set image.tag=v0.1.0 --set node.mode=static >$$tmp/mode 2>&1; then \
	    echo "helm-check: node.mode=static rendered, want an error"; exit 1; fi; \
	  grep -q 'node.mode "static": host' $$tmp/mode || { cat $$tmp/mode; exit 1; }; \
	  $(HELM) template sharedcontent $(CHART) --set image.tag=v0.1.0 --set 'coordinator.extraArgs={--lease-ttl=23s,--session-ttl=1m30s}' >$$tmp/lease 2>&1 || { cat $$tmp/lease; exit 1; }
	cd deploy/check && HELM=$(HELM) $(GO) test -count=1 -run Helm ./...
	$(GO) test -count=1 -run Helm ./cmd/containerd-sharedcontent/ ./cmd/sharedcontent-lockserver/

# gofmt, go vet, the package layers (internal/layers: imports point
# down only, nothing imports integration/, the parts tables of README.md
# and docs/design.md §2 name every package), and the repository's text
# (internal/lint: no citation of a tracker's issue).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) test -count=1 ./internal/layers/ ./internal/lint/
	cd deploy/check && $(GO) vet ./...
	cd deploy/tools && $(GO) vet ./...

check: lint

clean:
	rm -rf $(BIN) .cache

# Kubernetes for real (docs/design.md §6.1; docs/e2e.md "Kubernetes"): the chart
# installed with helm on a cluster of real kubelets on this machine
# (integration/e2ek8s). etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler on the host; nodes that are simulated machines (their own
# PID, mount, UTS and network namespaces, a minimal init as PID 1, the
# chart's host paths bound per node), each with containerd (CRI) and
# kubelet as units; a registry and the coordinator on the host. The
# Kubernetes binaries come from integration/tools/k8s.sh (5 to 50 minutes
# cold on 2 cores; cached in .cache/bin), containerd-cri and crictl from
# cri.sh, runc and the CNI plugins from Debian. Needs root; run by hand,
# not by .ci/run (docs/e2e.md gives its runtime).
e2e-k8s: etcd $(HELM)
	@[ "$$(id -u)" != 0 ] || { command -v runc >/dev/null 2>&1 && [ -x /usr/lib/cni/bridge ]; } || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc containernetworking-plugins; }
	SHAREDCONTENT_E2E_K8S=1 SHAREDCONTENT_ETCD=$(ETCD) SHAREDCONTENT_HELM=$(HELM) \
	  $(GO) test -count=1 -timeout 90m -v $(E2E_FLAGS) ./integration/e2ek8s/
