package stacktest

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"
)

// RequireAtomicItemWrites skips a test whose claim rests on DynamoDB's guarantee that writes to
// one item are serialized (a conditional PutItem or UpdateItem, or an ADD, sees the previous
// write to that item), when the DynamoDB endpoint is moto_server. moto 5.2.1 serves requests on
// threads (werkzeug run_simple threaded=True; its only lock guards the backend lookup) and
// evaluates a condition and applies the write without a per-item lock, so concurrent writers to
// one item race inside the emulator: 3 concurrent PutItems with attribute_not_exists on each of
// 200 items let two win on 4 items (moto, a loaded 2-core machine) and on none against dynalite,
// which locks per key (itemDb.lock in its actions) as DynamoDB serializes writes to an item. Such
// a claim is proven in the dynalite pass of `make test`.
func RequireAtomicItemWrites(tb testing.TB) {
	tb.Helper()
	if IsMoto() {
		tb.Skip("moto_server does not serialize concurrent writes to one DynamoDB item; this race is proven against dynalite")
	}
}

// IsMoto reports whether the DynamoDB endpoint is moto_server: it answers GET
// /moto-api/config (a few bytes of its settings, unlike /moto-api/data.json, which dumps every
// item it holds) with a JSON object; dynalite answers that path with an error.
func IsMoto() bool {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") + "/moto-api/config")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var cfg map[string]json.RawMessage
	return resp.StatusCode/100 == 2 && json.NewDecoder(resp.Body).Decode(&cfg) == nil && cfg["lambda"] != nil
}
