# SAM build targets, included by the Makefile (`include mk/sam.mk`).
#
# `sam build` runs `make build-<LogicalId>` in the CodeUri directory (the module root) with
# ARTIFACTS_DIR set, for every function whose Metadata says BuildMethod: makefile. Without sam,
# ARTIFACTS_DIR defaults to .aws-sam/build/<LogicalId>, and `make build` writes the same layout
# sam does (one directory per function plus .aws-sam/build/template.yaml).
#
#   make build-ConsumerFunction [ARTIFACTS_DIR=dir] [GOARCH_LAMBDA=amd64]
#   make build                  # both functions + .aws-sam/build/template.yaml
#   make package                # .aws-sam/package/<LogicalId>.zip, bootstrap at the zip root
#   make cfn-lint               # lint template.yaml (SAM events included)

GO             ?= go
# Lambda architecture: arm64 matches `Architectures: [arm64]` in template.yaml; tests may build amd64.
GOARCH_LAMBDA  ?= arm64
# Source directories of the two mains; overridable so the targets can be exercised elsewhere.
CONSUMER_SRC   ?= functions/consumer
RECONCILER_SRC ?= functions/reconciler
SAM_BUILD_DIR  ?= .aws-sam/build
SAM_PACKAGE_DIR ?= .aws-sam/package
CFN_LINT       ?= cfn-lint

# Static, stripped, reproducible: no cgo (provided.al2023 needs no libc match), lambda.norpc drops
# the legacy RPC mode that provided.* runtimes never use.
LAMBDA_GOENV   := CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_LAMBDA)
LAMBDA_GOFLAGS := -tags lambda.norpc -trimpath -buildvcs=false -ldflags "-s -w"

SAM_FUNCTIONS  := ConsumerFunction ReconcilerFunction

# lambda-build,<source dir>: build that main into $(ARTIFACTS_DIR)/bootstrap. `go -C` runs the
# build from the source directory, so the package resolves in whatever module holds it.
define lambda-build
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is empty" >&2; exit 1; }
	mkdir -p "$(abspath $(ARTIFACTS_DIR))"
	$(LAMBDA_GOENV) $(GO) -C $(1) build $(LAMBDA_GOFLAGS) -o "$(abspath $(ARTIFACTS_DIR))/bootstrap" .
endef

.PHONY: build package cfn-lint $(addprefix build-,$(SAM_FUNCTIONS))

## build-ConsumerFunction / build-ReconcilerFunction: called by `sam build` (ARTIFACTS_DIR set)
build-ConsumerFunction: ARTIFACTS_DIR ?= $(SAM_BUILD_DIR)/ConsumerFunction
build-ConsumerFunction:
	$(call lambda-build,$(CONSUMER_SRC))

build-ReconcilerFunction: ARTIFACTS_DIR ?= $(SAM_BUILD_DIR)/ReconcilerFunction
build-ReconcilerFunction:
	$(call lambda-build,$(RECONCILER_SRC))

## build: what `sam build` produces, without sam: $(SAM_BUILD_DIR)/<LogicalId>/bootstrap and
## $(SAM_BUILD_DIR)/template.yaml whose CodeUri points at those directories
build:
	@for f in $(SAM_FUNCTIONS); do \
		$(MAKE) --no-print-directory build-$$f ARTIFACTS_DIR="$(SAM_BUILD_DIR)/$$f" || exit 1; \
	done
	awk '/^[^ #]/ { res = ($$0 ~ /^Resources:/) } \
	     res && /^  [A-Za-z0-9]+:/ { id = $$1; sub(/:.*/, "", id) } \
	     res && /^ +CodeUri:/ { match($$0, /^ +/); print substr($$0, 1, RLENGTH) "CodeUri: " id; next } \
	     { print }' template.yaml > "$(SAM_BUILD_DIR)/template.yaml"

## package: one zip per function with bootstrap at its root (what Lambda's zip upload expects)
package: build
	mkdir -p "$(SAM_PACKAGE_DIR)"
	@for f in $(SAM_FUNCTIONS); do \
		out="$(abspath $(SAM_PACKAGE_DIR))/$$f.zip"; rm -f "$$out"; \
		if command -v zip >/dev/null 2>&1; then \
			(cd "$(SAM_BUILD_DIR)/$$f" && zip -q -X "$$out" bootstrap) || exit 1; \
		else \
			(cd "$(SAM_BUILD_DIR)/$$f" && python3 -m zipfile -c "$$out" bootstrap) || exit 1; \
		fi; \
		echo "$$out"; \
	done

## cfn-lint: validate template.yaml, SAM transform included
cfn-lint:
	$(CFN_LINT) template.yaml
