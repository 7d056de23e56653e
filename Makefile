# azlease developer commands. Needs Go and Node.js (with npm); as root on
# Debian, make test also installs podman and headless Chromium for the tests
# that need them.
#   make demo   the main job on the embedded emulator (no Azure account)
#   make test   installs the pinned Azurite, runs vet, staticcheck and every
#               test with -race
#   make bench  benchmarks on the emulator, Azurite and an embedded etcd;
#               writes bench/results.md
#   make build  static azlease binaries for Linux, macOS and Windows in dist/
#   make image  the container image azlease:dev (Dockerfile) with podman
#   make live-azure  the wire tests and the conformance table on a real Azure
#               account (AZLEASE_TEST_CONNECTION_STRING or AZLEASE_TEST_ACCOUNT_URL);
#               writes bench/azure-live.md. Never part of make test.
#   make screenshots  the browser test of azlease ui, saving its screenshots
#               in docs/ (shown in the README)

GO        ?= go
NPM       ?= npm
# Tests that wait in real time (Azurite) run in parallel.
PARALLEL  ?= 16
# Random scenarios of the Elector safety simulation; its transient-faults
# mode and the Mutex simulation run a tenth as many, the other simulations
# a fraction too. make test runs TEST_SEEDS (seeds 0 to N-1 of each, the
# same scenarios every run), so that it stays under about 15 minutes on two
# cores; make bench runs SEEDS.
SEEDS     ?= 300
TEST_SEEDS ?= 200

# Modules of their own (their dependencies stay out of azlease's go.mod):
# the metrics example, the fair-lock benchmark with its embedded etcd,
# internal/uitest, the browser test of azlease ui (chromedp, headless
# Chromium), gocronlock (the go-co-op/gocron adapter) and the scheduler
# examples (gocron, robfig/cron, a goose migration on SQLite); lint and
# test cover them too.
EXAMPLE_MODULES ?= examples/metrics internal/lockbench internal/uitest gocronlock examples/gocron examples/cron examples/migrate

export CGO_ENABLED := 1

.PHONY: all test demo bench lint deps fuzz clean live-azure build image podman podman-if-possible browser browser-if-possible screenshots

all: test

# Azurite is pinned in package-lock.json and installed locally.
deps: node_modules/.azlease-installed
# A node_modules that is a symbolic link (a git worktree sharing another
# checkout's install) is left alone: npm ci through the link would empty the
# shared install for every checkout using it.
node_modules/.azlease-installed: package.json package-lock.json
	@if [ -L node_modules ]; then \
		echo "node_modules links to a shared install; not running npm ci through it"; \
	else \
		$(NPM) ci --no-audit --no-fund && touch $@; \
	fi

# staticcheck at a pinned version, fetched through the module proxy and
# built into Go's cache on first use (go run pkg@version leaves go.mod alone).
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@for m in $(EXAMPLE_MODULES); do \
		echo "cd $$m && $(GO) vet ./... && $(STATICCHECK) ./..."; \
		(cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; \
	done
	@# The command's files for other systems (child_other.go, proc_bsd.go)
	@# must keep compiling: make build ships them.
	CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) vet ./cmd/azlease
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) vet ./cmd/azlease

# The live-Azure variables are cleared: make test never reaches Azure.
# podman (for the container image test) and headless Chromium (for the
# browser test of azlease ui) are installed when missing if this is root on
# Debian; otherwise those tests skip, or fail with CI=true.
# The example modules' tests wait in real time more than they compute
# (lockbench's smoke run, gocronlock's processes ticking every 2 s), so they
# run beside the main suite, one module at a time, their output kept in
# .examples.log and printed after the main suite's: a third of make test's
# wall time was one core idle while they ran after it.
test: deps podman-if-possible browser-if-possible lint
	@rm -f .examples.log; \
	( for m in $(EXAMPLE_MODULES); do echo "cd $$m && $(GO) test -race -count=1 ./..."; (cd $$m && $(GO) test -race -count=1 -timeout 8m ./...) || exit 1; done ) > .examples.log 2>&1 & ex=$$!; \
	echo "example modules ($(EXAMPLE_MODULES)): tested beside the main suite, their output after it"; \
	echo "AZLEASE_SEEDS=$(TEST_SEEDS) $(GO) test -race -count=1 -parallel $(PARALLEL) -timeout 30m ./..."; \
	AZLEASE_TEST_CONNECTION_STRING= AZLEASE_TEST_ACCOUNT_URL= AZLEASE_SEEDS=$(TEST_SEEDS) $(GO) test -race -count=1 -parallel $(PARALLEL) -timeout 30m ./...; main=$$?; \
	wait $$ex; examples=$$?; cat .examples.log; rm -f .examples.log; \
	if [ $$examples -ne 0 ]; then echo "make test: an example module's tests failed (above)"; fi; \
	[ $$main -eq 0 ] && [ $$examples -eq 0 ]

demo:
	$(GO) run ./examples/demo

# Static binaries of the command (no cgo, no local paths in them), stamped
# with the module version and git revision ('azlease version'), named
# dist/azlease-OS-ARCH[.exe]; and the root certificates the image needs
# (Dockerfile). -buildvcs=auto overrides a GOFLAGS=-buildvcs=false.
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64 windows/amd64
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
build:
	@if [ ! -f "$(CA_BUNDLE)" ]; then echo "make build: no $(CA_BUNDLE) (the image's root certificates): install Debian's ca-certificates, or give CA_BUNDLE=path/to/bundle.pem"; exit 1; fi
	@mkdir -p dist
	@for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=dist/azlease-$$os-$$arch; \
		if [ "$$os" = windows ]; then out=$$out.exe; fi; \
		echo "$$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=auto -ldflags='-s -w' -o $$out ./cmd/azlease || exit 1; \
	done
	@cp "$(CA_BUNDLE)" dist/ca-certificates.crt

# The image for this machine's architecture; IMAGE_ARCH=arm64 builds the
# arm64 one (podman build --platform linux/arm64 picks its binary). It checks
# for podman first, then builds only the binary it needs (make build
# PLATFORMS=linux/ARCH), without intermediate images (--layers=false), and
# removes the image it replaces under the same tag if nothing else uses it.
# Building runs nothing in a container; running it in a sandbox like CI's
# needs podman run --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 (see
# README.md, "Try it in containers", and cmd/azlease/image_test.go).
PODMAN     ?= podman
IMAGE      ?= azlease:dev
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image:
	@command -v $(PODMAN) >/dev/null 2>&1 || { echo "make image: $(PODMAN) not found; 'make podman' installs podman and runc from Debian's packages (as root)"; exit 1; }
	@$(MAKE) --no-print-directory build PLATFORMS=linux/$(IMAGE_ARCH)
	@old=$$($(PODMAN) image inspect --format '{{.Id}}' $(IMAGE) 2>/dev/null || true); \
	echo "$(PODMAN) build --pull=never --layers=false --platform linux/$(IMAGE_ARCH) -t $(IMAGE) ."; \
	$(PODMAN) build --pull=never --layers=false --platform linux/$(IMAGE_ARCH) -t $(IMAGE) . || exit 1; \
	new=$$($(PODMAN) image inspect --format '{{.Id}}' $(IMAGE)); \
	if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then $(PODMAN) rmi "$$old" >/dev/null 2>&1 || true; fi; \
	echo "$(IMAGE) ($$($(PODMAN) image inspect --format '{{.Os}}/{{.Architecture}}, {{.Size}} bytes' $(IMAGE)))"

# podman and runc from Debian's packages, if missing (needs root).
podman:
	@./scripts/install-podman.sh
podman-if-possible:
	@./scripts/install-podman.sh --if-possible

# Headless Chromium from Debian's packages, if missing (needs root).
browser:
	@./scripts/install-browser.sh
browser-if-possible:
	@./scripts/install-browser.sh --if-possible

# The browser test of azlease ui, keeping its screenshots of a leader's
# timeline, an election's candidates and a shard grid in docs/ for the README.
screenshots: browser
	cd internal/uitest && AZLEASE_UI_SCREENSHOTS=$(CURDIR)/docs $(GO) test -count=1 -run TestBrowser ./...

# Holding many leases (internal/manybench): N = 1,000 and 10,000, HTTP and
# TLS, azlease beside raw azblob and bare net/http, 3 repetitions of a 20 s
# window (about 25 minutes on 2 cores; its default window is 60 s).
MANYBENCH_FLAGS ?= -n 1000,10000 -tls both -reps 3 -dur 20s
# Then 50,000 leases over TLS (as Azure speaks), azlease beside the two raw
# azblob loops, one repetition (about 3 minutes).
MANYBENCH50K_FLAGS ?= -n 50000 -tls tls -reps 1 -dur 20s -variants azlease,raw,raw64

# The shard balancers side by side (internal/shardbench: azlease's shards
# package and the Event Hubs algorithm, every scenario SHARDBENCH_SEEDS times in
# fake time; about 20 minutes on 2 cores).
SHARDBENCH_SEEDS ?= 20
# Balancing by load side by side (internal/shardbench TestLoadBench: count
# only, by load, an offline greedy, a Cadence-style central model; and the
# cost table), and the balancer's pure model over many seeds (shards
# TestLoadBalancerModel).
LOADBENCH_SEEDS ?= 3
MODEL_SEEDS ?= 200

# Fair locks side by side (internal/lockbench, a module of its own: azlease's
# fair Mutex, the Unordered one and etcd's concurrency.Mutex on an embedded
# etcd, with and without fsync, in one run; about 40 minutes on 2 cores for
# issue 25's scenarios, 30 of them the cost scenario's windows, 1m+1m and
# 5m+2m after fifty waiters asked, once per contender; and about an hour more
# for issue 35's: holds of 0 to 1 minute with 1 and 50 waiters, pass-overs
# after a stand-still, dead waiters in a queue of 50. Holds of 10 minutes
# take an hour of their own: -scenarios holds -holds 10m -long-handoffs 1).
LOCKBENCH_FLAGS ?= -reps 3

# Simulation figures (azlease beside a naive acquire-renew loop), what waiters
# cost before and after they looked first (issue 19), the shard balancers,
# fair locks beside etcd's (issue 25), go test -bench, then the wire
# measurements, all folded into bench/results.md (committed).
bench: deps
	@mkdir -p bench
	@rm -f bench/.sim.md bench/.wait.md bench/.shards.md bench/.shardsload.md bench/.shardsmodel.md bench/.locks.md bench/.many.md bench/.many50k.md bench/.succession.md bench/.rolling.md
	AZLEASE_SIM_REPORT=$(CURDIR)/bench/.sim.md AZLEASE_SEEDS=$(SEEDS) $(GO) test -count=1 -run 'TestNaiveLoopComparison|TestSimulatedTimings' .
	AZLEASE_ROLLING_REPORT=$(CURDIR)/bench/.rolling.md $(GO) test -count=1 -run 'TestMultiProcessRollingDeploy' .
	AZLEASE_ROLLING_REPORT=$(CURDIR)/bench/.rolling.md $(GO) test -count=1 -run 'TestLeadRollingDeploy' ./cmd/azlease
	AZLEASE_SUCCESSION_REPORT=$(CURDIR)/bench/.succession.md AZLEASE_ROLLING_REPORT=$(CURDIR)/bench/.rolling.md $(GO) test -count=1 -run 'TestSuccessionBench' .
	AZLEASE_WAIT_REPORT=$(CURDIR)/bench/.wait.md $(GO) test -count=1 -run 'TestWaiterCosts' .
	AZLEASE_SHARDBENCH_REPORT=$(CURDIR)/bench/.shards.md AZLEASE_SHARDBENCH_SEEDS=$(SHARDBENCH_SEEDS) $(GO) test -count=1 -timeout 2h -run 'TestShardBench$$' ./internal/shardbench
	AZLEASE_LOADBENCH_REPORT=$(CURDIR)/bench/.shardsload.md AZLEASE_LOADBENCH_SEEDS=$(LOADBENCH_SEEDS) $(GO) test -count=1 -timeout 2h -run 'TestLoadBench$$' ./internal/shardbench
	AZLEASE_MODEL_REPORT=$(CURDIR)/bench/.shardsmodel.md AZLEASE_MODEL_SEEDS=$(MODEL_SEEDS) $(GO) test -count=1 -timeout 1h -run 'TestLoadBalancerModel$$' ./shards
	@printf '\n### Balancing by load (issue 33)\n\n' >> bench/.shards.md && cat bench/.shardsload.md bench/.shardsmodel.md >> bench/.shards.md
	cd internal/lockbench && $(GO) run . -out $(CURDIR)/bench/.locks.md $(LOCKBENCH_FLAGS)
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 300x . > bench/.gobench.txt
	$(GO) run ./internal/manybench -out bench/.many.md $(MANYBENCH_FLAGS)
	$(GO) run ./internal/manybench -out bench/.many50k.md -heading "Holding 50,000 leases" $(MANYBENCH50K_FLAGS)
	@printf '\n' >> bench/.many.md && cat bench/.many50k.md >> bench/.many.md
	$(GO) run ./internal/bench -out bench/results.md -sim bench/.sim.md -wait bench/.wait.md -shards bench/.shards.md -locks bench/.locks.md -succession bench/.succession.md -locks35 bench/locks-35.md -gobench bench/.gobench.txt -many bench/.many.md

# The wire tests (handoff, crash failover, lost responses, expiry, Mutex,
# DoOnce) and the conformance table against a real storage account, each test
# in a throw-away container it deletes. Only these two variables select it;
# without either, one line says how to run it. Azurite-only tests skip
# (AZLEASE_SKIP_AZURITE=1), so Node.js is not needed. Every expiry waits in
# real time, hence -parallel.
LIVE_RESULTS ?= bench/azure-live.md
live-azure:
	@if [ -z "$$AZLEASE_TEST_CONNECTION_STRING" ] && [ -z "$$AZLEASE_TEST_ACCOUNT_URL" ]; then \
		echo "make live-azure: set AZLEASE_TEST_CONNECTION_STRING (a storage account's connection string) or AZLEASE_TEST_ACCOUNT_URL (https://<account>.blob.core.windows.net/, after az login) to run the tests against Azure"; \
		exit 0; \
	fi; \
	mkdir -p $(dir $(LIVE_RESULTS)) && \
	AZLEASE_SKIP_AZURITE=1 AZLEASE_LIVE_RESULTS=$(abspath $(LIVE_RESULTS)) \
		$(GO) test -race -count=1 -parallel 32 -timeout 20m -v -run 'TestConformanceLive$$|TestAzurite' ./ ./azleasetest/

# Longer fuzzing than the seed corpus run in `make test`.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLeaseOptions -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzRecordMetadata -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzOnceMarker -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzListPage -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzTicketsName -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzWaiterEntry -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz FuzzListQuery -fuzztime $(FUZZTIME) ./azleasetest/
	$(GO) test -run '^$$' -fuzz FuzzAppendHeaders -fuzztime $(FUZZTIME) ./azleasetest/

clean:
	rm -rf node_modules dist
