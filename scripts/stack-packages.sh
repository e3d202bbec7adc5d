#!/usr/bin/env bash
# Usage: scripts/stack-packages.sh
# Prints the module's packages whose tests can reach the local stack: those whose test binary
# links internal/local/localstack (stacktest or the launcher), and that package itself. The
# second backend's pass (`make test-moto`) runs only these: the others never talk to DynamoDB,
# SQS or S3, so a second run of them against moto_server proves nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."
ls=github.com/gapless-dev/gapless/internal/local/localstack
go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | awk -v ls="$ls" '
	$2 ~ /^\[/ {
		p = $1; sub(/_test$/, "", p)
		if (p == ls) { print p; next }
		for (i = 3; i <= NF; i++) if ($i == ls) { print p; break }
	}' | sort -u
