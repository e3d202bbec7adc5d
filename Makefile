# gapless — build, test and local-stack targets. `make test` and `make demo` install what they
# need (npm emulators into tools/node_modules, Go modules through the module proxy).
GO        ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 30m
PKGS      ?= ./...
BIN       := bin

.PHONY: all tools up down test test-dynalite test-moto lint vet fmt-check clean gapless

all: lint test
include mk/sam.mk

## tools: install the pinned local-stack emulators (tools/package-lock.json)
tools: tools/node_modules/.package-lock.json
tools/node_modules/.package-lock.json: tools/package.json tools/package-lock.json
	cd tools && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## gapless: the operator CLI into bin/gapless
gapless:
	$(GO) build -o $(BIN)/gapless ./cmd/gapless

## up / down: the local stack on 127.0.0.1 (ports: GAPLESS_PORT_KINESIS, _DYNAMODB, _SQS, _MOTO)
up: tools gapless
	$(BIN)/gapless up

down: gapless
	$(BIN)/gapless down

## test: lint, then the whole suite with -race against dynalite+fauxqs and against moto_server
test: lint test-dynalite test-moto

test-dynalite: tools gapless
	scripts/with-stack.sh dynalite $(GO) test $(GOTESTFLAGS) $(PKGS)

test-moto: tools gapless
	scripts/with-stack.sh moto $(GO) test $(GOTESTFLAGS) $(PKGS)

## lint: gofmt check and go vet
lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN) .local .aws-sam
