# Build, install, test and demo the CDI plugin suite. `make help` lists targets.

GO        ?= go
PREFIX    ?= /usr/local
PLUGINDIR ?= /opt/cdi/bin
CONFDIR   ?= /etc/cdi
DESTDIR   ?=

# Every directory under plugins/ with a main.go is a plugin binary of that name.
PLUGINS := $(notdir $(patsubst %/main.go,%,$(wildcard plugins/*/main.go)))
TOOLS   := cditool cdi-bridge

.PHONY: all build install test test-short lint bench demo image manifests clean help kube-apiserver kube-controllers node-bins e2e prereqs

# A pipeline fails when any of its commands does: go build's status is not
# lost in the pipe that thins its output.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

all: build

help:
	@echo "make build          plugins and tools into bin/ ($(PLUGINS) $(TOOLS))"
	@echo "make install        plugins to DESTDIR$(PLUGINDIR), the safe default drop-ins (conf.d/node-defaults.list:"
	@echo "                    GPUs, serial, video, sound) to DESTDIR$(CONFDIR), tools to DESTDIR$(PREFIX)/bin"
	@echo "make test           prerequisites checked, vet, every test with the race detector (main module, then $(E2E)),"
	@echo "                    then make e2e, each run summarised by gotestsum; ends with the skipped tests and why,"
	@echo "                    and one line counting every run's tests, failed and skipped"
	@echo "make test-short     the quick run: the main module's tests with -short and no race detector, which skip what"
	@echo "                    needs Kubernetes programs, helm, make demo or root; nothing of Kubernetes is built"
	@echo "                    (minutes on a cold build cache). make test is the full suite, and what CI runs"
	@echo "make prereqs        say which programs the tests need are missing, and how to get them"
	@echo "make e2e            a real node (etcd, kube-apiserver, kubelet, scheduler, controller-manager, containerd, runc):"
	@echo "                    the shipped DaemonSet as a pod, and pods getting the bridge's devices (root);"
	@echo "                    KUBE_VERSION=1.36 runs it, and the Kubernetes programs below, at 1.36.3 (default 1.37: 1.37.2)"
	@echo "make kube-apiserver the kube-apiserver the Kubernetes tests run, into bin/ (a cold build takes minutes)"
	@echo "make kube-controllers kube-scheduler and kube-controller-manager, for the DRA cluster test and the node test, into bin/"
	@echo "make node-bins      the kubelet, kube-scheduler, kube-controller-manager and containerd $(CONTAINERD_VERSION) the node test runs, into bin/"
	@echo "make lint           merge-conflict markers, gofmt, go vet, staticcheck, and go.mod tidy in both modules"
	@echo "                    (and $(E2E)'s go.1.36.mod)"
	@echo "make bench          benchmarks: the plugins' and the bridge's (go test -bench, benchstat), the DRA front end's"
	@echo "                    ResourceSlice publishing, a Broker's 1,000 Jobs, then the cluster simulation; tables of"
	@echo "                    ratios against floors measured in the same run (BENCH=\"-rounds 50 -dra-rounds 10\","
	@echo "                    BROKERS=\"-broker-devices 5000\" and SIM=\"-sim-nodes 10\""
	@echo "                    size the bridge's parts); then, on the real node (root), pod start through DRA"
	@echo "                    against the device plugins (PODSTART=\"-podstart-rounds 50\"); the Instance store's soak"
	@echo "                    runs for SOAK (10m; make test runs it for a minute)"
	@echo "make demo           build, install into a temporary prefix and walk through the protocol (minutes the first time)"
	@echo "make manifests      the kustomize layout in bridge/deploy, from its Helm chart (bridge/deploy/chart); builds helm the first time"
	@echo "make image          the bridge's multi-arch image as an OCI layout, bin/cdi-bridge-image.tar (IMAGE=name:tag, ARCHES=\"amd64 arm64\")"
	@echo "make clean          remove bin/"

# Every binary is built one way, the one that ships: static (nothing of
# the host's C library is needed), -trimpath, stripped of its symbol
# table (panics still print their stack: -s keeps the runtime's own
# tables), and -buildvcs=auto, so that it reports the commit it was built
# from (the plugins' VERSION, the tools' --version). internal/gobuild
# says the same for the Go programs that build binaries: the image, the
# tests' plugins, the benchmarks. plugins/exectest's TestBuildIsShipped
# builds a plugin with this target (BIN and BINARIES are for it: bin/ and
# every binary unless told) and as the tests do, and compares the two.
# A first build downloads the modules and compiles gRPC, client-go and the
# DRA library for cdi-bridge: it says so, and shows its progress (THIN).
BIN      := bin
BINARIES := $(addprefix ./plugins/,$(PLUGINS)) ./spec/cmd/cditool ./bridge/cmd/cdi-bridge
build:
	@mkdir -p $(BIN)
	@echo "building the plugins and tools into $(BIN)/ (a first build downloads the modules and compiles about 1,000 packages: $(FIRST_BUILD); seconds after)"
	CGO_ENABLED=0 $(GO) build -v -trimpath -ldflags=-s -buildvcs=auto -o $(BIN)/ $(BINARIES) 2>&1 | $(THIN)

# Only the drop-ins conf.d/node-defaults.list names, as in the image: the
# others are examples (the host's virtual consoles, example cameras).
# Drop-ins an operator already has are left alone: they are configuration.
install: build
	install -d $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(addprefix $(BIN)/,$(PLUGINS)) $(DESTDIR)$(PLUGINDIR)/
	install -m 0755 $(addprefix $(BIN)/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	@cd conf.d && for f in $$(sed -e 's/#.*//' node-defaults.list); do \
		dst="$(DESTDIR)$(CONFDIR)/$$f"; \
		if [ -e "$$dst" ]; then echo "keeping existing $$dst"; \
		else install -D -m 0644 "$$f" "$$dst" && echo "installed $$dst"; fi; \
	done

# bridge/e2e is a module of its own (it needs k8s.io/kubernetes): the
# kubelet's device manager driving the real cdi-bridge. Its first build
# downloads and compiles much of Kubernetes.
E2E := bridge/e2e

# The kube-apiserver the Kubernetes tests and benchmarks run, built here
# as a step of its own: a cold build takes minutes, which inside a test
# binary would count against go test's timeout. bridge/internal/testing/apitest
# runs the program KUBE_APISERVER names.
#
# KUBE_VERSION selects the Kubernetes of those programs (the apiserver, the
# kubelet, the scheduler and the controller-manager; the tests compile
# against go.mod's k8s.io modules whatever it says). The default, 1.37, is
# go.mod's 1.37.2, into bin/. 1.36 (n-1) is $(E2E)/go.1.36.mod's 1.36.3,
# built with -modfile into bin/kube-1.36/: make e2e KUBE_VERSION=1.36 runs
# the node test against a 1.36 kubelet.
KUBE_VERSION ?= 1.37
ifeq ($(KUBE_VERSION),1.37)
KUBE_BIN     := $(CURDIR)/bin
KUBE_MODFILE :=
else
KUBE_BIN     := $(CURDIR)/bin/kube-$(KUBE_VERSION)
KUBE_MODFILE := -modfile=go.$(KUBE_VERSION).mod
ifeq ($(wildcard $(E2E)/go.$(KUBE_VERSION).mod),)
$(error KUBE_VERSION=$(KUBE_VERSION): no $(E2E)/go.$(KUBE_VERSION).mod; the versions are 1.37 (go.mod) and those of $(notdir $(wildcard $(E2E)/go.1.*.mod)))
endif
endif
KUBE_APISERVER := $(KUBE_BIN)/kube-apiserver

kube-apiserver:
	@mkdir -p $(KUBE_BIN)
	@echo "building $(KUBE_APISERVER) from $(E2E) (the first build downloads and compiles much of Kubernetes: about 10 minutes on 2 cores)"
	@SECONDS=0; cd $(E2E) && $(GO) build $(KUBE_MODFILE) -v -o $(KUBE_APISERVER) ./cmd/kube-apiserver 2>&1 | $(THIN) && \
		echo "built $(KUBE_APISERVER) in $${SECONDS}s"

# go build -v names each package it compiles, none on a warm cache: a long
# build shows every 100th with the count so far, and a line that is not a
# package's name (a compiler's error, go: downloading) in full. Each line
# is flushed as it is printed: into a pipe or a CI log, awk would hold
# them all until the build ends.
THIN := awk '/[ :]/ { print; fflush(); next } ++n % 100 == 0 { print "  " n " packages compiled, now " $$0; fflush() }'

# The programs the tests run, each as program:its Debian package (what
# .ci/run installs). etcd backs every Kubernetes test's kube-apiserver; jq
# and flock run the plugin in shell (testdata/shell) that spec/conformance
# checks; the others are the real node's (make e2e), which also needs root. Without
# them those tests skip, saying so; under CI they fail, and so does this.
PREREQS := etcd:etcd-server runc:runc ip:iproute2 iptables:iptables unshare:util-linux \
	flock:util-linux jq:jq /usr/lib/cni/loopback:containernetworking-plugins
prereqs:
	@missing=; for p in $(PREREQS); do command -v $${p%%:*} >/dev/null || missing="$$missing $${p#*:}"; done; \
	[ "$$(id -u)" = 0 ] || echo "not root: the real node (make e2e) needs root, and skips without it"; \
	if [ -z "$$missing" ]; then echo "prerequisites: all there"; exit 0; fi; \
	echo "missing what some tests need: apt-get install$$missing"; \
	if [ -n "$$CI" ]; then echo "CI is set, so those tests would fail"; exit 1; fi; \
	echo "those tests will skip, saying so"

# The node's other programs. The kubelet is built like the kube-apiserver
# (no -trimpath), so that the Kubernetes packages they share are compiled
# once. containerd is installed at a fixed version with its own go.sum:
# nothing of it enters our go.mod files. CGO_ENABLED=0 and these tags are
# what lets it build without C libraries (btrfs, devmapper, zfs headers).
KUBELET            := $(KUBE_BIN)/kubelet
KUBE_SCHEDULER     := $(KUBE_BIN)/kube-scheduler
KUBE_CONTROLLER_MANAGER := $(KUBE_BIN)/kube-controller-manager
CONTAINERD_BIN_DIR := $(CURDIR)/bin
CONTAINERD_VERSION ?= v2.2.9
CONTAINERD_CMDS    := containerd ctr containerd-shim-runc-v2

# The scheduler binds the DaemonSet's pod, which the controller-manager
# makes, and allocates the DRA front end's claims, which the
# controller-manager's resourceclaim controller makes from templates
# (bridge/dradevices' cluster test); both share most packages with the
# kube-apiserver.
kube-controllers: kube-apiserver
	@mkdir -p $(KUBE_BIN)
	@echo "building kube-scheduler and kube-controller-manager from $(E2E)"
	@SECONDS=0; cd $(E2E) && $(GO) build $(KUBE_MODFILE) -v -o $(KUBE_BIN)/ ./cmd/kube-scheduler ./cmd/kube-controller-manager 2>&1 | $(THIN) && \
		echo "built $(KUBE_SCHEDULER) and $(KUBE_CONTROLLER_MANAGER) in $${SECONDS}s"

node-bins: kube-controllers
	@mkdir -p $(KUBE_BIN)
	@echo "building $(KUBELET) from $(E2E) (minutes on a cold build cache)"
	@SECONDS=0; cd $(E2E) && $(GO) build $(KUBE_MODFILE) -v -o $(KUBELET) ./cmd/kubelet 2>&1 | $(THIN) && \
		echo "built $(KUBELET) in $${SECONDS}s"
	@echo "installing containerd $(CONTAINERD_VERSION) ($(CONTAINERD_CMDS)) into $(CONTAINERD_BIN_DIR) (minutes on a cold build cache)"
	GOBIN=$(CONTAINERD_BIN_DIR) CGO_ENABLED=0 $(GO) install -tags no_btrfs,no_devmapper,no_zfs \
		$(foreach c,$(CONTAINERD_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD_VERSION))

# The node test (bridge/e2e/node) runs as root in private mount, network
# and PID namespaces; without root it skips. Its own builds (cdi-bridge
# with the race detector, the plugins, the pods' image) happen first and
# count against -timeout: nine nodes took 6 minutes on a warm build cache
# and a machine at load average 5-8, their tests about 1.3 times as long
# at 18 (DEVELOPING.md); 30 minutes leaves room for a cold cache on a
# loaded machine.
e2e: kube-apiserver node-bins
	cd $(E2E) && KUBE_APISERVER=$(KUBE_APISERVER) KUBELET=$(KUBELET) CONTAINERD_BIN_DIR=$(CONTAINERD_BIN_DIR) \
		KUBE_SCHEDULER=$(KUBE_SCHEDULER) KUBE_CONTROLLER_MANAGER=$(KUBE_CONTROLLER_MANAGER) \
		$(GO) run $(GOTESTSUM) --format standard-verbose $(if $(TESTJSON),--jsonfile $(TESTJSON)/node.json) \
		--raw-command -- $(GO) test -json -race -count=1 -timeout=30m ./node

# bridge/e2e/node is left to the e2e target, which builds what it runs.
# The module's run has 30 minutes a package, not go test's 10: on a cold
# build cache, packages whose tests build binaries (bridge/deploy/image's
# TestImage builds every one) compile beside the other packages' tests on
# 2 cores. Cross-compiling every binary for arm64 too took over 10 minutes
# there; the test now cross-compiles one plugin, and the full multi-arch
# build is make image's.
# gotestsum prints a line per package, then each failed test's output
# (a timed-out package's panic, and the tests it was still running, among
# them) and a count; each run's events are kept in $(TESTJSON). The last
# summary reads them all again: every skipped test with its reason, then
# one line counting the tests of every run, subtests included.
TESTJSON := $(CURDIR)/bin/test-json
test: prereqs kube-apiserver kube-controllers
	@rm -rf $(TESTJSON) && mkdir -p $(TESTJSON)
	$(GO) vet ./...
	KUBE_APISERVER=$(KUBE_APISERVER) KUBE_SCHEDULER=$(KUBE_SCHEDULER) KUBE_CONTROLLER_MANAGER=$(KUBE_CONTROLLER_MANAGER) $(GO) run $(GOTESTSUM) $(GOTESTSUM_RUN) --jsonfile $(TESTJSON)/main.json \
		--raw-command -- $(GO) test -json -race -count=1 -timeout=30m ./...
	cd $(E2E) && $(GO) vet ./...
	cd $(E2E) && $(GO) run $(GOTESTSUM) $(GOTESTSUM_RUN) --jsonfile $(TESTJSON)/e2e.json \
		--raw-command -- $(GO) test -json -race -count=1 $$($(GO) list ./... | grep -v '/node$$')
	@$(MAKE) --no-print-directory e2e TESTJSON=$(TESTJSON)
	@echo "all runs:"
	@$(GO) run $(GOTESTSUM) --format none --hide-summary failed,errors --raw-command -- cat $(TESTJSON)/*.json

# The quick run, for a first look and between edits: the main module's
# tests with -short and without the race detector, summarised as make
# test's are. -short skips, saying why, every test that needs a
# kube-apiserver, the scheduler and controller-manager, helm (built from
# the module proxy), the previous release's bridge or make demo, even
# where CI is set, so that nothing of Kubernetes is built; a test that
# needs root (a full tmpfs) runs as root and skips otherwise. bridge/e2e
# (the kubelet's device manager, the real node) is make test's alone. A
# package has make test's 30 minutes, for the same reason: on a cold
# build cache, the packages whose TestMain builds cdi-bridge and the
# plugins compile them beside the other packages' tests. CGO_ENABLED=0
# and -trimpath, as those binaries are built (internal/gobuild), so that
# the tests and the binaries they build share every compiled package:
# otherwise gRPC and client-go are compiled twice (the race detector,
# which needs cgo, is make test's).
test-short:
	@mkdir -p $(TESTJSON) && rm -f $(TESTJSON)/short.json
	@echo "the main module's tests with -short (a first run compiles the tests and what they build, gRPC and client-go among them: $(FIRST_TEST_SHORT); seconds of compiling after)"
	CGO_ENABLED=0 $(GO) run $(GOTESTSUM) $(GOTESTSUM_RUN) --jsonfile $(TESTJSON)/short.json \
		--raw-command -- $(GO) test -json -short -trimpath -count=1 -timeout=30m ./...
	@$(GO) run $(GOTESTSUM) --format none --hide-summary failed,errors --raw-command -- cat $(TESTJSON)/short.json

# How long the first build and the first quick run took on the project's
# machines (DEVELOPING.md), said before they start.
FIRST_BUILD      := 5 to 7 minutes on 2 cores
FIRST_TEST_SHORT := about 11 minutes on 2 cores

# gotestsum at a pinned version, run from the module proxy as staticcheck
# is. A run's skipped tests wait for the last summary, which has them all.
GOTESTSUM     := gotest.tools/gotestsum@v1.13.0
GOTESTSUM_RUN := --format pkgname --hide-summary skipped

# staticcheck at a pinned version, run from the module proxy: nothing of it
# enters our go.mod files.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# A merge's conflict markers, in any tracked file, fail the lint: the three
# shapes git writes, each at the start of a line (the base's ||||||| too).
CONFLICT_MARKERS := ^(<<<<<<<|>>>>>>>|\|\|\|\|\|\|\|)( |$$)|^=======$$

# No tracked file above MAX_TRACKED bytes: what is this large is a build's
# output (a binary built at the top level once was committed), and it
# would stay in every clone's history.
MAX_TRACKED := 1000000
lint:
	@if git grep -nE '$(CONFLICT_MARKERS)'; then echo "merge-conflict markers in the lines above"; exit 1; fi
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' -- 2>/dev/null | awk '$$1 > $(MAX_TRACKED)'); \
		if [ -n "$$big" ]; then echo "tracked files above $(MAX_TRACKED) bytes (build output?):"; echo "$$big"; exit 1; fi
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(E2E) && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd $(E2E) && $(GO) run $(STATICCHECK) ./...
	@# bridge/e2e requires the main module through a replace: a new
	@# requirement there must be tidied into it too.
	$(GO) mod tidy -diff
	cd $(E2E) && $(GO) mod tidy -diff
	@# Each other Kubernetes version's module file too: what its programs
	@# need, with their sums (go.1.36.sum beside go.1.36.mod). Only the
	@# programs are built with it; the bridge, which the node test builds,
	@# uses the current Kubernetes libraries' APIs (the DRA health stream's
	@# v1, kubeletplugin's WatchHealthStatus), which the older ones lack:
	@# -e lets tidy pass over the packages it cannot find there, and
	@# go list checks that every package of the programs is found.
	cd $(E2E) && for m in go.1.*.mod; do $(GO) mod tidy -e -diff -modfile=$$m && \
		$(GO) list -modfile=$$m -deps ./cmd/... >/dev/null || exit 1; done

# Each part prints its table; ratios are against floors measured in the
# same run. The plugins' tables are plugins/bench's BenchmarkPlugins. The
# bridge's tables (bridge/bench's BenchmarkBridge) start etcd and a
# kube-apiserver for the Kubernetes store's figures, and so does the
# cluster simulation (bridge/e2e/cmd/clustersim). BenchmarkDRAPublish
# (bridge/bench) starts its own: the DRA front end's ResourceSlices for
# 1,000 devices published by the library's controller, then republished
# after one device changes, against the same slices written with the
# typed client alone; BenchmarkDRAStart, the first publish as the
# cdi-bridge binary makes it over 1,000 terminals, against the same.
# BenchmarkBrokers (bridge/broker) starts its own
# too: one Broker's Job for each of 1,000 devices, against the same Jobs
# made with the typed client alone, and a new leader's writes
# (BROKERS="-broker-devices 5000" sizes it). The subjects of
# BenchmarkRoundTrip and BenchmarkStartup (plugins/bench) and of
# BenchmarkAllocate (bridge/bench) are set against their floors by
# benchstat, pinned as staticcheck is. BENCH="-rounds 50" and
# SIM="-sim-nodes 10" size the bridge's parts (-dra-devices and
# -dra-rounds in BENCH, the DRA table's). Then the store's soak
# (bridge/elected/departed's TestSoak: three nodes' stores and janitors under
# random events, its invariants checked at every step) for SOAK, ten
# minutes by default (make test runs it for one). Last, on the real node
# (bridge/e2e/node, root; it skips without), a pod's start through DRA
# against the device plugins: PODSTART="-podstart-rounds 50" sizes it.
BENCHSTAT := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
BENCH    ?=
BROKERS  ?=
SIM      ?=
PODSTART ?=
SOAK     ?= 10m
SOAKTIMEOUT := 40m
bench: kube-apiserver node-bins
	$(GO) test -run '^$$' -bench '^BenchmarkPlugins$$' -benchtime 1x -timeout 30m ./plugins/bench
	$(GO) test -run '^$$' -bench '^Benchmark(RoundTrip|Startup)$$' -count 6 ./plugins/bench > bin/bench-plugins.txt || \
		{ cat bin/bench-plugins.txt; exit 1; }
	$(GO) run $(BENCHSTAT) -col /subject bin/bench-plugins.txt
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -run '^$$' -bench '^BenchmarkBridge$$' -benchtime 1x -timeout 60m ./bridge/bench $(BENCH)
	$(GO) test -run '^$$' -bench '^BenchmarkAllocate$$' -count 6 ./bridge/bench > bin/bench-allocate.txt || \
		{ cat bin/bench-allocate.txt; exit 1; }
	$(GO) run $(BENCHSTAT) -col /subject bin/bench-allocate.txt
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -run '^$$' -bench '^BenchmarkDRA(Publish|Start)$$' -benchtime 1x -timeout 30m ./bridge/bench $(BENCH)
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -run '^$$' -bench '^BenchmarkBrokers$$' -benchtime 1x -timeout 30m ./bridge/broker $(BROKERS)
	cd $(E2E) && KUBE_APISERVER=$(KUBE_APISERVER) $(GO) run ./cmd/clustersim $(SIM)
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -run '^TestSoak$$' -count=1 -timeout $(SOAKTIMEOUT) -v ./bridge/elected/departed -soak=$(SOAK)
	cd $(E2E) && KUBE_APISERVER=$(KUBE_APISERVER) KUBELET=$(KUBELET) CONTAINERD_BIN_DIR=$(CONTAINERD_BIN_DIR) \
		KUBE_SCHEDULER=$(KUBE_SCHEDULER) KUBE_CONTROLLER_MANAGER=$(KUBE_CONTROLLER_MANAGER) \
		$(GO) test -run '^$$' -bench '^BenchmarkPodStart$$' -benchtime 1x -timeout 20m ./node $(PODSTART)

demo: build
	./testdata/demo.sh

# No container engine needed: static binaries on an empty base for each
# architecture, under one OCI image index, written as an OCI image layout
# tarball for ctr images import (kind load), podman load or docker load.
# It is named IMAGE and <IMAGE's repository>:<build version>.
IMAGE  ?= cdi-bridge:dev
ARCHES ?= amd64 arm64
image:
	$(GO) run ./bridge/deploy/image -o bin/cdi-bridge-image.tar -tag $(IMAGE) -arch "$(ARCHES)"

# The chart's templates are the source of bridge/deploy's manifests; its
# tests fail when these files differ from what the chart renders. Helm is
# pinned in bridge/deploy/internal/helmchart and run from the module proxy:
# it is built here first, with its progress shown, rather than silently
# inside gen-kustomize's run of it.
HELM := $(shell sed -n 's/^const Helm = "\(.*\)"$$/\1/p' bridge/deploy/internal/helmchart/helmchart.go)
manifests:
	@echo "building $(HELM) (the first time only: about 5 minutes on 2 cores)"
	@SECONDS=0; $(GO) run -v $(HELM) version 2>&1 >/dev/null | $(THIN) && echo "helm ready in $${SECONDS}s"
	$(GO) run ./bridge/deploy/gen-kustomize -deploy bridge/deploy

clean:
	rm -rf bin
