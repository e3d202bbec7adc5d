#!/usr/bin/env bash
# Usage: scripts/with-stack.sh <dynalite|moto> <command...>
# Starts a private local stack on free loopback ports (beside any stack `make up` started),
# exports its AWS_ENDPOINT_URL_* variables, runs the command, and stops the stack whatever
# the command's outcome.
set -euo pipefail
backend=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.local/test-$backend"
gapless="$root/bin/gapless-dev"
"$gapless" up --backend "$backend" --free-ports --bare --state "$state"
trap '"$gapless" down --state "$state"' EXIT
# shellcheck disable=SC1091
. "$state/stack.env"
echo "== tests against $backend (DynamoDB $AWS_ENDPOINT_URL_DYNAMODB, SQS $AWS_ENDPOINT_URL_SQS, Kinesis $AWS_ENDPOINT_URL_KINESIS)"
"$@"
