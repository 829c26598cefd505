# Build, install, test and demo the CDI plugin suite. `make help` lists targets.

GO        ?= go
PREFIX    ?= /usr/local
PLUGINDIR ?= /opt/cdi/bin
CONFDIR   ?= /etc/cdi
DESTDIR   ?=

# Every directory under plugins/ with a main.go is a plugin binary of that name.
PLUGINS := $(notdir $(patsubst %/main.go,%,$(wildcard plugins/*/main.go)))
TOOLS   := cditool cdi-bridge

.PHONY: all build install test lint bench demo image clean help kube-apiserver

all: build

help:
	@echo "make build     plugins and tools into bin/ ($(PLUGINS) $(TOOLS))"
	@echo "make install   plugins to DESTDIR$(PLUGINDIR), drop-ins to DESTDIR$(CONFDIR), tools to DESTDIR$(PREFIX)/bin"
	@echo "make test      vet, then every test with the race detector (main module, then $(E2E))"
	@echo "make lint      gofmt, go vet, and go.mod tidy in both modules"
	@echo "make bench     benchmarks, printed as ratios against floors measured in the same run"
	@echo "make demo      build, install into a temporary prefix and walk through the protocol"
	@echo "make image     the bridge's container image as bin/cdi-bridge-image.tar (IMAGE=name:tag, ARCH=amd64|arm64)"

build:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o bin/ $(addprefix ./plugins/,$(PLUGINS))
	$(GO) build -trimpath -o bin/ ./spec/cmd/cditool ./bridge/cmd/cdi-bridge

# Drop-ins an operator already has are left alone: they are configuration.
install: build
	install -d $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(addprefix bin/,$(PLUGINS)) $(DESTDIR)$(PLUGINDIR)/
	install -m 0755 $(addprefix bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	@cd conf.d && for f in */*.conf; do \
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
# binary would count against go test's timeout. bridge/internal/apitest
# runs the program KUBE_APISERVER names.
KUBE_APISERVER := $(CURDIR)/bin/kube-apiserver

kube-apiserver:
	@echo "building $(KUBE_APISERVER) from $(E2E) (the first build downloads and compiles much of Kubernetes)"
	cd $(E2E) && $(GO) build -o $(KUBE_APISERVER) ./cmd/kube-apiserver

test: kube-apiserver
	$(GO) vet ./...
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) test -race -count=1 ./...
	cd $(E2E) && $(GO) vet ./...
	cd $(E2E) && $(GO) test -race -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(E2E) && $(GO) vet ./...
	@# bridge/e2e requires the main module through a replace: a new
	@# requirement there must be tidied into it too.
	$(GO) mod tidy -diff
	cd $(E2E) && $(GO) mod tidy -diff

# Each part prints its table; ratios are against floors measured in the
# same run. The bridge's part starts etcd and a kube-apiserver (built once,
# cached) for its Kubernetes store figures.
bench: kube-apiserver
	$(GO) run ./plugins/internal/bench
	KUBE_APISERVER=$(KUBE_APISERVER) $(GO) run ./bridge/internal/bench

demo: build
	./testdata/demo.sh

# No container engine needed: static binaries on an empty base, written as
# a tarball for docker/podman load or ctr images import.
IMAGE ?= cdi-bridge:dev
ARCH  ?= $(shell $(GO) env GOARCH)
image:
	$(GO) run ./bridge/deploy/image -o bin/cdi-bridge-image.tar -tag $(IMAGE) -arch $(ARCH)

clean:
	rm -rf bin
