# Build, install, test and demo the CDI plugin suite. `make help` lists targets.

GO        ?= go
PREFIX    ?= /usr/local
PLUGINDIR ?= /opt/cdi/bin
CONFDIR   ?= /etc/cdi
DESTDIR   ?=

# Every directory under plugins/ with a main.go is a plugin binary of that name.
PLUGINS := $(notdir $(patsubst %/main.go,%,$(wildcard plugins/*/main.go)))
TOOLS   := cditool cdi-bridge

.PHONY: all build install test lint bench demo image manifests clean help kube-apiserver node-bins e2e prereqs tools

# A pipeline fails when any of its commands does: go test's status is not
# lost in the pipe into testsummary.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

all: build

help:
	@echo "make build          plugins and tools into bin/ ($(PLUGINS) $(TOOLS))"
	@echo "make install        plugins to DESTDIR$(PLUGINDIR), the safe default drop-ins (conf.d/node-defaults.list:"
	@echo "                    GPUs, serial, video, sound) to DESTDIR$(CONFDIR), tools to DESTDIR$(PREFIX)/bin"
	@echo "make test           prerequisites checked, vet, every test with the race detector (main module, then $(E2E)),"
	@echo "                    then make e2e; ends with one line counting passed, failed and skipped tests and why"
	@echo "make prereqs        say which programs the tests need are missing, and how to get them"
	@echo "make e2e            a real node (etcd, kube-apiserver, kubelet, containerd, runc) running pods with the bridge's devices (root)"
	@echo "make kube-apiserver the kube-apiserver the Kubernetes tests run, into bin/ (a cold build takes minutes)"
	@echo "make node-bins      the kubelet and containerd $(CONTAINERD_VERSION) the node test runs, into bin/"
	@echo "make lint           gofmt, go vet, staticcheck, and go.mod tidy in both modules"
	@echo "make bench          benchmarks, printed as ratios against floors measured in the same run"
	@echo "make demo           build, install into a temporary prefix and walk through the protocol"
	@echo "make manifests      the kustomize layout in bridge/deploy, from its Helm chart (bridge/deploy/chart)"
	@echo "make image          the bridge's multi-arch image as an OCI layout, bin/cdi-bridge-image.tar (IMAGE=name:tag, ARCHES=\"amd64 arm64\")"
	@echo "make clean          remove bin/"

# Static and stripped, the tools as the plugins: nothing of the host's C
# library is needed, and the symbol table is not (panics still print
# their stack: -s keeps the runtime's own tables).
build:
	@mkdir -p bin
	@# -buildvcs=auto: the binaries report the commit they were built from
	@# (the plugins' VERSION, the tools' --version).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -buildvcs=auto -o bin/ $(addprefix ./plugins/,$(PLUGINS))
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -buildvcs=auto -o bin/ ./spec/cmd/cditool ./bridge/cmd/cdi-bridge

# Only the drop-ins conf.d/node-defaults.list names, as in the image: the
# others are examples (the host's virtual consoles, example cameras).
# Drop-ins an operator already has are left alone: they are configuration.
install: build
	install -d $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(addprefix bin/,$(PLUGINS)) $(DESTDIR)$(PLUGINDIR)/
	install -m 0755 $(addprefix bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
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
KUBE_APISERVER := $(CURDIR)/bin/kube-apiserver

kube-apiserver: tools
	@echo "building $(KUBE_APISERVER) from $(E2E) (the first build downloads and compiles much of Kubernetes: about 10 minutes on 2 cores)"
	cd $(E2E) && $(GO) build -v -o $(KUBE_APISERVER) ./cmd/kube-apiserver 2>&1 | \
		$(BUILDPROGRESS) -what kube-apiserver -total $$($(GO) list -deps ./cmd/kube-apiserver | wc -l)

# The make helpers (bridge/internal/tools), built once: test, e2e and
# kube-apiserver pipe into them.
TESTSUMMARY   := $(CURDIR)/bin/testsummary
BUILDPROGRESS := $(CURDIR)/bin/buildprogress
tools:
	@mkdir -p bin
	@$(GO) build -o bin/ ./bridge/internal/tools/testsummary ./bridge/internal/tools/buildprogress

prereqs:
	@$(GO) run ./bridge/internal/tools/prereqs

# The node's other programs. The kubelet is built like the kube-apiserver
# (no -trimpath), so that the Kubernetes packages they share are compiled
# once. containerd is installed at a fixed version with its own go.sum:
# nothing of it enters our go.mod files. CGO_ENABLED=0 and these tags are
# what lets it build without C libraries (btrfs, devmapper, zfs headers).
KUBELET            := $(CURDIR)/bin/kubelet
CONTAINERD_BIN_DIR := $(CURDIR)/bin
CONTAINERD_VERSION ?= v2.2.9
CONTAINERD_CMDS    := containerd ctr containerd-shim-runc-v2

node-bins: tools
	@echo "building $(KUBELET) from $(E2E) (minutes on a cold build cache)"
	cd $(E2E) && $(GO) build -v -o $(KUBELET) ./cmd/kubelet 2>&1 | \
		$(BUILDPROGRESS) -what kubelet -total $$($(GO) list -deps ./cmd/kubelet | wc -l)
	@echo "installing containerd $(CONTAINERD_VERSION) ($(CONTAINERD_CMDS)) into $(CONTAINERD_BIN_DIR) (minutes on a cold build cache)"
	GOBIN=$(CONTAINERD_BIN_DIR) CGO_ENABLED=0 $(GO) install -tags no_btrfs,no_devmapper,no_zfs \
		$(foreach c,$(CONTAINERD_CMDS),github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD_VERSION))

# The node test (bridge/e2e/node) runs as root in private mount, network
# and PID namespaces; without root it skips. Its own builds (cdi-bridge
# with the race detector, the plugins, the pods' image) happen first.
e2e: kube-apiserver node-bins
	cd $(E2E) && KUBE_APISERVER=$(KUBE_APISERVER) KUBELET=$(KUBELET) CONTAINERD_BIN_DIR=$(CONTAINERD_BIN_DIR) \
		$(GO) test -race -count=1 -timeout=20m -json ./node | $(TESTSUMMARY) -v $(if $(TALLY),-tally $(TALLY))

# bridge/e2e/node is left to the e2e target, which builds what it runs.
# The module's run has 30 minutes a package, not go test's 10:
# bridge/deploy/image's TestImage cross-compiles every binary for arm64,
# which on a cold build cache, beside the other packages' tests, took
# over 10 minutes on 2 cores.
# Each go test run prints its own summary and adds it to $(TALLY); the
# last line sums them: tests passed, failed and skipped (subtests
# included), and why each skip happened.
TALLY := $(CURDIR)/bin/test-tally.jsonl
test: prereqs kube-apiserver
	@rm -f $(TALLY)
	$(GO) vet ./...
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -race -count=1 -timeout=30m -json ./... | $(TESTSUMMARY) -tally $(TALLY)
	cd $(E2E) && $(GO) vet ./...
	cd $(E2E) && $(GO) test -race -count=1 -json $$($(GO) list ./... | grep -v '/node$$') | $(TESTSUMMARY) -tally $(TALLY)
	@$(MAKE) --no-print-directory e2e TALLY=$(TALLY)
	@$(TESTSUMMARY) -total $(TALLY)

# staticcheck at a pinned version, run from the module proxy: nothing of it
# enters our go.mod files.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(E2E) && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd $(E2E) && $(GO) run $(STATICCHECK) ./...
	@# bridge/e2e requires the main module through a replace: a new
	@# requirement there must be tidied into it too.
	$(GO) mod tidy -diff
	cd $(E2E) && $(GO) mod tidy -diff

# Each part prints its table; ratios are against floors measured in the
# same run. The bridge's part starts etcd and a kube-apiserver (built once,
# cached) for its Kubernetes store figures.
bench: kube-apiserver
	$(GO) run ./plugins/internal/tools/bench
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) run ./bridge/internal/tools/bench

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
# pinned in bridge/deploy/internal/helmchart and run from the module proxy.
manifests:
	$(GO) run ./bridge/deploy/gen-kustomize -deploy bridge/deploy

clean:
	rm -rf bin
