// Package lanes is the rule that spreads a shard's records over the event-source mapping's
// concurrent batches when ParallelizationFactor is above 1: the one definition both the local
// mapping (internal/local/esm) and the reconciler use.
//
// Lambda documents that with ParallelizationFactor it "still ensures in-order processing at the
// partition-key level" (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-parameters.html,
// ParallelizationFactor; https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html): every
// record of one partition key goes to one lane. It does not document the hash it uses; this rule
// is the model gapless holds it to: the key's MD5 as a 128-bit unsigned integer (as Kinesis
// hashes keys to shards), modulo the factor. For an aggregated record (KPL) the key is the
// Kinesis record's, not a user record's: the mapping sees only the former.
package lanes

import (
	"crypto/md5"
	"math/big"
)

// Of maps a partition key to one of n lanes (0..n-1). n <= 1 is one lane, 0.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	sum := md5.Sum([]byte(key))
	h := new(big.Int).SetBytes(sum[:])
	return int(h.Mod(h, big.NewInt(int64(n))).Int64())
}
