# Targets a developer and CI use. `make test` is the whole suite.
GO ?= go

.PHONY: test build bench bench-load bench-lease lint soak pgo

# test installs redis-server when it is missing, then runs every test with
# the race detector; SLUICE_REQUIRE_REDIS=1 makes a missing Redis a failure,
# never a skip. Then each fuzz target runs for FUZZTIME beyond its seed
# corpus (testdata/fuzz), which the race run has already replayed.
# FUZZTIME is a count of inputs: with a duration, Go 1.26's fuzzer may
# fail a target with "context deadline exceeded" when the time ends while
# a worker is busy (Go issue 75804), which a loaded machine makes likely.
FUZZTIME ?= 20000x

test:
	./scripts/test-deps.sh
	SLUICE_REQUIRE_REDIS=1 $(GO) test -race -count=1 ./...
	SLUICE_REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchtime 1x ./...
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalRequest$$' -fuzztime $(FUZZTIME) ./proxy
	$(GO) test -run '^$$' -fuzz '^FuzzClientAddr$$' -fuzztime $(FUZZTIME) ./proxy
	$(GO) test -run '^$$' -fuzz '^FuzzKeyHeader$$' -fuzztime $(FUZZTIME) ./routes
	$(GO) test -run '^$$' -fuzz '^FuzzKeyQuery$$' -fuzztime $(FUZZTIME) ./routes
	$(GO) test -run '^$$' -fuzz '^FuzzKeyCookie$$' -fuzztime $(FUZZTIME) ./routes
	$(GO) test -run '^$$' -fuzz '^FuzzKeyJSON$$' -fuzztime $(FUZZTIME) ./routes
	$(GO) test -run '^$$' -fuzz '^FuzzJSONScan$$' -fuzztime $(FUZZTIME) ./routes
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) ./routes

# soak runs a minute of mixed traffic and reloads against the real binary
# and checks its goroutines and heap come back (README, Tests).
soak:
	SLUICE_SOAK=1 $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 5m ./e2e/

COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)
VERSION ?= $(shell git describe --tags --always 2>/dev/null || echo dev)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o sluice ./cmd/sluice

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./ratelimit/ ./proxy/ ./routes/ ./metrics/

# bench-load is the side-by-side load run of README › Performance: the
# upstream alone, a bare Go proxy, sluice and nginx, one after the other
# on 127.0.0.1 (under 3 minutes; not part of test). BEFORE="REV ..." adds
# sluice built at each git revision REV to the same run.
bench-load:
	./bench/load/run.sh

# pgo refreshes cmd/sluice/default.pgo, the CPU profile that every go build
# of sluice is optimised with (profile-guided optimisation): bench-load's
# three sluice targets, 20 seconds each, profiled by sluice itself
# (SLUICE_CPU_PROFILE). Commit the new file with the figures of a
# bench-load run.
pgo:
	PROFILE=bench/load/out/cpu.pgo ./bench/load/run.sh -only 'sluice, ' -rounds 1 -d 20s
	cp bench/load/out/cpu.pgo cmd/sluice/default.pgo

# bench-lease measures the p50 and p99 of a proxied request whose limit is
# in the memory store, in Redis per request, and in Redis with sync: lease,
# in one run of interleaved rounds (README › Several instances: the Redis
# store › What a lease costs; under a minute, not part of test). Flags go
# to the runner with ARGS, e.g. ARGS="-rate 4000 -rounds 5".
bench-lease:
	./scripts/test-deps.sh
	$(GO) build -o bench/lease/out/sluice ./cmd/sluice
	$(GO) build -o bench/lease/out/upstream ./bench/load/upstream
	$(GO) run ./bench/lease -bin bench/lease/out $(ARGS)

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...
