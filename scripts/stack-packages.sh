#!/usr/bin/env bash
# Usage: scripts/stack-packages.sh [--without-stack]
# Prints the module's packages whose tests can reach the local stack: those whose test binary
# links internal/local/localstack (stacktest or the launcher), and that package itself. The
# second backend's pass (`make test-moto`) runs only these: the others never talk to DynamoDB,
# SQS or S3, so a second run of them against moto_server proves nothing new.
# --without-stack prints the complement: the packages `make check` tests without emulators.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
ls=github.com/gapless-dev/gapless/internal/local/localstack
go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | awk -v ls="$ls" '
	$2 ~ /^\[/ {
		p = $1; sub(/_test$/, "", p)
		if (p == ls) { print p; next }
		for (i = 3; i <= NF; i++) if ($i == ls) { print p; break }
	}' | sort -u > "$tmp"
if [ "${1:-}" = --without-stack ]; then
	go list ./... | sort -u | comm -23 - "$tmp"
else
	cat "$tmp"
fi
