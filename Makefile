# gapless — build, test and local-stack targets. `make test` and `make demo` install what they
# need (npm emulators into tools/node_modules, Go modules through the module proxy).
GO        ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 30m -p 4 -parallel 4
# The moto pass: no -race (the dynalite pass proves the concurrency), and two packages at a time:
# moto_server is one Python process serving DynamoDB and SQS to the whole pass, and at four its
# latency under load ran tests out of their time.
MOTOFLAGS ?= $(subst -p 4,-p 2,$(filter-out -race,$(GOTESTFLAGS)))
PKGS      ?= ./...
BIN       := bin
# Modules of their own under examples/, built on the public package: vetted and tested with the rest.
EXAMPLES  := examples/ddbwriter

.PHONY: all tools up down invoke test test-dynalite test-moto test-go lint vet fmt-check clean gapless

all: lint test
include mk/sam.mk

## tools: install the pinned local-stack emulators (tools/package-lock.json)
tools: tools/node_modules/.package-lock.json
tools/node_modules/.package-lock.json: tools/package.json tools/package-lock.json
	cd tools && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## gapless: the operator CLI into bin/gapless (links no harness) and the developer tool into
## bin/gapless-dev (up, down, invoke, demo, bench, and the operator commands on the local stack)
gapless:
	$(GO) build -o $(BIN)/gapless ./cmd/gapless
	$(GO) build -o $(BIN)/gapless-dev ./internal/local/cmd/gapless-dev

## up / down: the local stack on 127.0.0.1 (ports: GAPLESS_PORT_KINESIS, _DYNAMODB, _SQS, _MOTO) with
## the stream, tables and queues events/env.json names; `up` keeps a stack that is already up
up: tools gapless
	$(BIN)/gapless-dev up

down: gapless
	$(BIN)/gapless-dev down

## test: lint, then the suite's three passes side by side (scripts/test-passes.sh): every package
## with -race against dynalite+fauxqs, the packages that talk to the stack again against
## moto_server, and the simulator
test: lint tools gapless
	GO="$(GO)" MAKE="$(MAKE)" GOTESTFLAGS="$(GOTESTFLAGS)" MOTOFLAGS="$(MOTOFLAGS)" scripts/test-passes.sh

# One pass alone: test-dynalite (-race, every package) or test-moto (the stack's packages).
test-dynalite: tools gapless
	scripts/with-stack.sh dynalite $(MAKE) --no-print-directory test-go

# The moto pass runs only the packages whose tests reach the stack (scripts/stack-packages.sh):
# the rest never talk to DynamoDB or SQS, and the dynalite pass already ran them.
test-moto: tools gapless
	scripts/with-stack.sh moto $(MAKE) --no-print-directory test-go GOTESTFLAGS="$(MOTOFLAGS)" PKGS="$$(scripts/stack-packages.sh | tr '\n' ' ')"

# test-go: the module's tests, then each example module's, against the stack with-stack.sh exported
test-go:
	$(GO) test $(GOTESTFLAGS) $(PKGS)
	@for d in $(EXAMPLES); do echo "== $$d"; $(GO) -C $$d test $(GOTESTFLAGS) ./... || exit 1; done

## check: lint, then in -short mode the tests of the packages that need no emulator
## (scripts/stack-packages.sh names the others): the fast loop before `make test`
.PHONY: check
check: lint
	$(GO) test -short -count=1 $$(scripts/stack-packages.sh --without-stack)

## lint: gofmt check and go vet
lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	@for d in $(EXAMPLES); do echo "$(GO) -C $$d vet ./..."; $(GO) -C $$d vet ./... || exit 1; done

clean:
	rm -rf $(BIN) .local .aws-sam

## bench: bare vs record-level idempotency vs gapless on the local stack (docs/benchmarks.md);
## BENCH_FLAGS=--quick for a ~1-minute run
.PHONY: bench bench-go
BENCH_FLAGS ?=
bench: tools gapless
	$(BIN)/gapless-dev bench $(BENCH_FLAGS)

## bench-go: the hot-path testing.B benchmarks, -count=6, into $(BENCH_GO_OUT) for benchstat
BENCH_GO_OUT   ?= docs/benchmarks-go.txt
BENCH_GO_FLAGS ?= -count=6 -benchtime=200ms -benchmem
bench-go:
	{ $(GO) test -run '^$$' -bench . $(BENCH_GO_FLAGS) ./internal/seqnum ./internal/kpl ./internal/pipeline ./internal/local/bench/hotpath && \
	  $(GO) test -run '^$$' -bench 'Set|InMemory' $(BENCH_GO_FLAGS) ./internal/dedupe; } > $(BENCH_GO_OUT)
	@echo "wrote $(BENCH_GO_OUT) (compare runs with: benchstat old.txt $(BENCH_GO_OUT))"

## bench-reconcile: the reconciler's verification rate and read units per record at ledger
## tails of 0, 10,000 and 100,000 entries (local stack; docs/benchmarks.md)
.PHONY: bench-reconcile
bench-reconcile:
	$(GO) test -run '^$$' -bench BenchmarkVerifyTail -benchtime 1x -timeout 30m ./internal/reconcile/

## bench-fanout: one fan-out pass of the real reconciler function (coordinator, then one walk per
## shard through the local SQS event source) over 1, 2, 4, 8 and 16 shards: stream-wide MB/s,
## GB-s and DynamoDB units per million records (local stack, about 15 minutes; docs/benchmarks.md)
.PHONY: bench-fanout
bench-fanout:
	$(GO) test -run '^$$' -bench BenchmarkFanOut -benchtime 1x -timeout 60m ./internal/local/bench/

## scale: the reconciler's fan-out over 1,000 shards written at 1 MB/s each, in virtual time:
## the group's verified lag at each of four scheduled passes (about a minute; docs/reconciler.md)
.PHONY: scale
scale:
	$(GO) test -count=1 -run '^TestFanOutKeepsUpAtScale$$' -v ./internal/reconcile/

## demo: the seed's load test with every fault on: the mapping alone, checkpoint decides (the
## seed report's consumer) and gapless, side by side (report in reports/demo-<timestamp>/).
## Flags: make demo DEMO_FLAGS="--seed 7 --json"; soak: make demo DEMO_FLAGS="--duration 10m".
## `bin/gapless-dev demo --help` lists them all. Stdout carries only the demo's table or JSON
## object (make demo DEMO_FLAGS=--json | jq .lost): the installs and builds report on stderr.
DEMO_FLAGS ?=
DEMO_DEPS  ?= tools gapless
.PHONY: demo
demo:
	@echo "== installing the emulators (npm ci, when missing) and building $(BIN)/gapless-dev" >&2
	@$(MAKE) --no-print-directory $(DEMO_DEPS) >&2
	@$(BIN)/gapless-dev demo $(DEMO_FLAGS)

## invoke: run a function once under aws-lambda-rie with an events/ fixture against the local
## stack (the local `sam local invoke`, variables from events/env.json); starts the stack when
## none is up (`gapless up` keeps a running one).
FUNCTION ?= ConsumerFunction
EVENT    ?= events/kinesis-clean.json
invoke: tools gapless
	@$(BIN)/gapless-dev up
	$(BIN)/gapless-dev invoke $(FUNCTION) -e $(EVENT)

## sim: the deterministic whole-system simulator (docs/simulator.md). SEEDS=7 or SEEDS=1,2,3 or
## SEEDS=100+50 replays seeds; otherwise fresh seeds for DURATION (default 1m) on SIM_PROCS
## processes (GOGC=400 unless set: the runs allocate briskly and live small). MUTATION=checkpoint-decides|drop-marker|drop-ledger|drop-hold|close-before-count|count-on-direction
## puts a known defect back (and shapes the runs for it: WithMutation).
SIM_PROCS ?= 2
DURATION  ?= 1m
.PHONY: sim
sim:
	@mkdir -p $(BIN) .local
	$(GO) test -c -o $(BIN)/sim.test ./internal/local/sim
	@if [ -n "$(SEEDS)" ]; then \
		$(BIN)/sim.test -test.run '^TestSim$$' -test.v -test.timeout 0 -sim.seeds=$(SEEDS) -sim.mutation=$(MUTATION) $(SIM_FLAGS) -sim.v | grep -v '^=== RUN'; \
	else \
		base=$$(date +%s%N); rc=0; pids=""; \
		for i in $$(seq 0 $$(($(SIM_PROCS)-1))); do \
			GOGC=$${GOGC:-400} $(BIN)/sim.test -test.run '^TestSim$$' -test.v -test.timeout 0 -sim.open= -sim.base=$$base -sim.stride=$(SIM_PROCS) -sim.offset=$$i \
				-sim.duration=$(DURATION) -sim.mutation=$(MUTATION) $(SIM_FLAGS) > .local/sim.$$i.log 2>&1 & pids="$$pids $$!"; \
		done; \
		tail -q -f --pid=$$(echo $$pids | awk '{print $$NF}') .local/sim.*.log 2>/dev/null | grep --line-buffered '^sim\[' & \
		for p in $$pids; do wait $$p || rc=1; done; \
		for i in $$(seq 0 $$(($(SIM_PROCS)-1))); do echo "== process $$i"; grep -v -e '^=== RUN' -e '^sim\[' .local/sim.$$i.log; done; \
		exit $$rc; \
	fi
