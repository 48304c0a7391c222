# kprofd. `make help` lists the targets.

GO      ?= go
BIN     := bin
KPROFD  := $(BIN)/kprofd
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
DEMO    := $(BIN)/demo

.PHONY: help build generate check-generated test test-unit test-integration otelcol bench demo lint clean

help:
	@echo "make build             build bin/kprofd (no clang needed: the BPF object is committed)"
	@echo "make demo              (as root) trace the bundled example program and print its call tree"
	@echo "make test              (as root) vet, unit tests and integration tests with real uprobes"
	@echo "make test-unit         tests that need no privileges"
	@echo "make test-integration  (as root) tests with real BPF and uprobes"
	@echo "make otelcol           build the OpenTelemetry Collector the OTLP tests push to (test/otelcol; the tests build it too)"
	@echo "make bench             (as root) benchmarks"
	@echo "make generate          regenerate the BPF object with clang (bpf2go)"
	@echo "make check-generated   fail if the committed BPF object does not match its source"

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(KPROFD) ./cmd/kprofd

generate:
	$(GO) generate ./bpf/

check-generated: generate
	git diff --exit-code -- bpf/ || { echo "bpf/: committed bpf2go output does not match its sources (bpf/kprofd.bpf.c and its headers); run make generate and commit" >&2; exit 1; }

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags integration ./...

test: lint test-unit test-integration

test-unit:
	$(GO) test ./...

# Integration tests load BPF programs and attach uprobes: they need root and
# fail (never skip) without it. -p 1: the packages' sessions run one at a
# time so timing-sensitive targets do not compete for the two CPUs.
test-integration:
	$(GO) test -tags integration -p 1 -count 1 -timeout 20m ./...

# The OpenTelemetry Collector of the OTLP tests, a module of its own
# (test/otelcol): minutes on a fresh machine, then cached by go build.
# The tests build it when this has not; CI builds it first.
otelcol:
	cd test/otelcol && $(GO) build -o bin/otelcol .

# Benchmarks: ratios measured side by side in one run; -count 5 for medians.
bench:
	$(GO) test -tags integration -p 1 -run '^$$' -bench . -count 5 -timeout 60m ./...

# The demo: build kprofd and the example targets. First the exact tree of
# testdata/ctree (3 seconds, every call counted), then the default hybrid
# mode on testdata/hybrid, whose hot leaf (millions of calls) is demoted to
# sampling: its time and count become estimates, the rest stays exact.
demo: build
	mkdir -p $(DEMO)
	gcc -O2 -fPIC -shared -o $(DEMO)/libktarget.so testdata/ctree/libktarget.c
	gcc -O2 -pthread -o $(DEMO)/ctree testdata/ctree/ctree.c -L$(DEMO) -lktarget -Wl,-rpath,'$$ORIGIN'
	gcc -O2 -o $(DEMO)/hybrid testdata/hybrid/hybrid.c
	@echo "== exact mode: every call below handle_request counted and timed"
	@$(DEMO)/ctree loop 500 > /dev/null & pid=$$!; \
	trap "kill $$pid" EXIT; sleep 0.5; \
	$(KPROFD) attach -p $$pid --root handle_request --mode exact -d 3s -o $(DEMO)/profile.pb.gz --folded $(DEMO)/profile.folded
	@echo; echo "== hybrid mode (the default): the hot leaf is demoted, its time and count estimated (~, >=)"
	@rm -f $(DEMO)/hybrid.in; mkfifo $(DEMO)/hybrid.in; \
	$(DEMO)/hybrid < $(DEMO)/hybrid.in > /dev/null & pid=$$!; exec 3>$(DEMO)/hybrid.in; \
	trap "kill $$pid 2>/dev/null; rm -f $(DEMO)/hybrid.in" EXIT; sleep 0.3; \
	$(KPROFD) attach -p $$pid --root handle_request --exclude ':untraced$$' -o $(DEMO)/hybrid.pb.gz & k=$$!; \
	sleep 1; echo "run 600" >&3; echo exit >&3; wait $$k

clean:
	rm -rf $(BIN)
