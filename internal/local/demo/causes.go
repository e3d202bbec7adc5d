package demo

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"errors"

	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Duplicate causes: the keys of VariantResult.DuplicatesByCause, in the order the report shows
// them, with their labels.
var duplicateCauses = []struct{ key, label string }{
	{"racing_mapping", "racing mapping"},
	{"ledger_write_failed", "retry after a failed ledger write"},
	{"timeout_after_processing", "timeout after processing"},
	{"settle_window_replay", "replay inside the settle window"},
	{"reconciler_replayed_again", "reconciler replayed it again"},
	{"business_key", "business key (written twice)"},
	{"sqs_send_retried", "SQS send retried (response lost)"},
	{"process_failed_after_send", "Process failed after sending"},
	{"partial_failure_redelivery", "resent after a lower record failed"},
	{"function_error_after_processing", "function error after processing"},
	{"queue_redelivered", "queue delivered one send twice"},
	{"unattributed", "not attributed"},
}

// Sources of a send to the target queue: which function's SQS proxy forwarded it.
const (
	sourceConsumer   = "consumer"   // the first mapping's consumer
	sourceRacer      = "racer"      // the racing mapping's consumer
	sourceReconciler = "reconciler" // the reconciler's replays
)

// send is one SendMessage (or batch entry) to the target queue that reached SQS.
type send struct {
	id, source string
	invocation string // the SDK's amz-sdk-invocation-id: the same for the retries of one call
	at         time.Time
}

// sendJournal collects the sends of a variant from its taps.
type sendJournal struct {
	mu    sync.Mutex
	sends []send
}

func (j *sendJournal) add(s send) {
	j.mu.Lock()
	j.sends = append(j.sends, s)
	j.mu.Unlock()
}

func (j *sendJournal) all() []send {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]send(nil), j.sends...)
}

// sendTap is a reverse proxy between a function's SQS fault proxy and the emulator (function
// → faultproxy → sendTap → emulator), so it sees exactly the requests that reached SQS. It
// journals every record sent to the target queue with its source and the SDK's invocation id.
type sendTap struct {
	source    string
	queueName string
	target    *url.URL
	j         *sendJournal
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	done      chan struct{}
}

func startSendTap(target, targetQueueURL, source string, j *sendJournal) (*sendTap, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("demo: tap target %q: not a URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: tap listen: %w", err)
	}
	t := &sendTap{
		source: source, queueName: path.Base(targetQueueURL), target: u, j: j, ln: ln, done: make(chan struct{}),
		transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, MaxIdleConnsPerHost: 256},
	}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(t.done)
		_ = t.srv.Serve(ln)
	}()
	return t, nil
}

func (t *sendTap) URL() string { return "http://" + t.ln.Addr().String() }

func (t *sendTap) Close() {
	_ = t.srv.Close()
	<-t.done
	t.transport.CloseIdleConnections()
}

func (t *sendTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "tap: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	u := *t.target
	u.Path = strings.TrimSuffix(t.target.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, "tap: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range r.Header {
		out.Header[k] = vs
	}
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	at := time.Now()
	resp, err := t.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "tap: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, "tap: read response: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
	if resp.StatusCode == http.StatusOK {
		t.record(r.Header.Get("X-Amz-Target"), r.Header.Get("Amz-Sdk-Invocation-Id"), body, at)
	}
}

// record journals the target-queue records of a SendMessage or SendMessageBatch (JSON protocol).
func (t *sendTap) record(target, invocation string, body []byte, at time.Time) {
	var req struct {
		QueueURL    string `json:"QueueUrl"`
		MessageBody string
		Entries     []struct{ MessageBody string }
	}
	switch target {
	case "AmazonSQS.SendMessage", "AmazonSQS.SendMessageBatch":
	default:
		return
	}
	if json.Unmarshal(body, &req) != nil || path.Base(req.QueueURL) != t.queueName {
		return
	}
	bodies := []string{req.MessageBody}
	if target == "AmazonSQS.SendMessageBatch" {
		bodies = bodies[:0]
		for _, e := range req.Entries {
			bodies = append(bodies, e.MessageBody)
		}
	}
	for _, b := range bodies {
		if id, _, err := loadgen.PayloadID(b); err == nil {
			t.j.add(send{id: id, source: t.source, invocation: invocation, at: at})
		}
	}
}

// invocation is one invocation of a mapping lane, as the mapping's observer saw it.
type invocation struct {
	mapping     int
	start       time.Time
	first, last string
	timedOut    bool
	funcErr     bool
	failedSeq   string // partial batch failure: the lowest failed record
}

// invocationJournal collects the consumer invocations of a variant's mappings.
type invocationJournal struct {
	mu    sync.Mutex
	byReq map[string]*invocation
	lanes map[string][]*invocation // "<mapping>/<shard>/<lane>", in start order
}

func newInvocationJournal() *invocationJournal {
	return &invocationJournal{byReq: map[string]*invocation{}, lanes: map[string][]*invocation{}}
}

func laneKey(m int, shard string, lane int) string { return fmt.Sprintf("%d/%s/%d", m, shard, lane) }

func (j *invocationJournal) observe(m int, e esm.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch e.Type {
	case esm.EventBatchInvoked:
		inv := &invocation{mapping: m, start: e.Time, first: e.FirstSeq, last: e.LastSeq}
		if inv.start.IsZero() {
			inv.start = time.Now()
		}
		j.byReq[e.RequestID] = inv
		k := laneKey(m, e.ShardID, e.Lane)
		j.lanes[k] = append(j.lanes[k], inv)
	case esm.EventFunctionError:
		if inv := j.byReq[e.RequestID]; inv != nil {
			inv.funcErr = true
			inv.timedOut = errors.Is(e.Err, esm.ErrFunctionTimeout)
		}
	case esm.EventPartialFailure:
		if inv := j.byReq[e.RequestID]; inv != nil {
			inv.failedSeq = e.FailedSeq
		}
	}
}

// at is the invocation of lane k that was running at t and held seq: the latest started by t.
func (j *invocationJournal) at(k string, t time.Time, seq string) *invocation {
	j.mu.Lock()
	defer j.mu.Unlock()
	invs := j.lanes[k]
	i := sort.Search(len(invs), func(i int) bool { return invs[i].start.After(t) })
	for i--; i >= 0; i-- {
		inv := invs[i]
		if seqnum.Compare(inv.first, seq) <= 0 && seqnum.Compare(seq, inv.last) <= 0 {
			return inv
		}
	}
	return nil
}

// ledgerFailures reads the consumer's log (functions.log in process, runtime.log under the
// emulator) for the batches whose ledger write failed ("batch failed as a whole", the error
// naming the shard and the batch's range): "<shard> <first sequence number>".
func ledgerFailures(files ...string) map[string]bool {
	re := regexp.MustCompile(`ledger unavailable: record [^\[]*?(shardId-[0-9]+) \[([0-9]+), `)
	out := map[string]bool{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "batch failed as a whole") {
				continue
			}
			if m := re.FindStringSubmatch(line); m != nil {
				out[m[1]+" "+m[2]] = true
			}
		}
		_ = fh.Close()
	}
	return out
}

// duplicateCausesOf attributes every delivery of a record after its first to a cause, from the
// sends the taps saw, the mappings' invocations, the consumer's ledger-failure log lines and the
// producer's writes. tallied is the duplicate count at the target queue: more than the
// duplicate sends means the queue handed a message out twice (queue_redelivered).
func duplicateCausesOf(sends []send, invs *invocationJournal, ledgerFailed map[string]bool, writes []written, parallelization, tallied int) map[string]int {
	type rec struct {
		shard, seq, key string
		n               int
	}
	recs := map[string]*rec{}
	for _, w := range writes {
		if r := recs[w.id]; r != nil {
			r.n++
			continue
		}
		recs[w.id] = &rec{shard: w.shard, seq: w.seq, key: w.key, n: 1}
	}
	byID := map[string][]send{}
	for _, s := range sends {
		byID[s.id] = append(byID[s.id], s)
	}
	out := map[string]int{}
	for _, c := range duplicateCauses {
		out[c.key] = 0
	}
	dupSends := 0
	for id, ss := range byID {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].at.Before(ss[j].at) })
		r := recs[id]
		for k := 1; k < len(ss); k++ {
			dupSends++
			out[causeOf(ss, k, r != nil && r.n > 1, func(s send) *invocation {
				if r == nil || s.source == sourceReconciler {
					return nil
				}
				m := 0
				if s.source == sourceRacer {
					m = 1
				}
				return invs.at(laneKey(m, r.shard, laneOf(r.key, parallelization)), s.at, r.seq)
			}, func() (string, string) {
				if r == nil {
					return "", ""
				}
				return r.shard, r.seq
			}, ledgerFailed)]++
		}
	}
	// The drain counted more deliveries than there were sends: SQS handed a message out again
	// (at-least-once delivery, a visibility timeout that ran out under load).
	if d := tallied - dupSends; d > 0 {
		out["queue_redelivered"] = d
	} else {
		out["unattributed"] += d // negative: sends the drain never saw twice
	}
	return out
}

// causeOf is the cause of delivery k of a record (ss in time order).
func causeOf(ss []send, k int, producedTwice bool, invOf func(send) *invocation, where func() (shard, seq string), ledgerFailed map[string]bool) string {
	cur, prev := ss[k], ss[k-1]
	if producedTwice {
		return "business_key"
	}
	for _, p := range ss[:k] {
		if cur.invocation != "" && p.invocation == cur.invocation && p.source == cur.source {
			return "sqs_send_retried"
		}
	}
	switch {
	case cur.source == sourceReconciler && prev.source == sourceReconciler:
		return "reconciler_replayed_again"
	case cur.source == sourceReconciler || prev.source == sourceReconciler:
		return "settle_window_replay"
	case cur.source != prev.source:
		return "racing_mapping"
	}
	pi := invOf(prev)
	if pi == nil || pi == invOf(cur) {
		return "unattributed"
	}
	shard, seq := where()
	switch {
	case pi.timedOut:
		return "timeout_after_processing"
	case pi.funcErr:
		return "function_error_after_processing"
	case pi.failedSeq != "" && ledgerFailed[shard+" "+pi.first] && pi.failedSeq == pi.first:
		return "ledger_write_failed"
	case pi.failedSeq == seq:
		return "process_failed_after_send"
	case pi.failedSeq != "" && seqnum.Compare(pi.failedSeq, seq) < 0:
		return "partial_failure_redelivery"
	}
	return "unattributed"
}

// duplicateRows are the "duplicates by cause" rows of the side-by-side table (one cell per
// variant that ran); nil when no variant counted causes.
func duplicateRows(res *Result) [][]string {
	vs := res.ran()
	some := false
	for _, v := range vs {
		some = some || v.DuplicatesByCause != nil
	}
	if !some {
		return nil
	}
	var out [][]string
	for _, c := range duplicateCauses {
		row := []string{"  " + c.label}
		nonzero := false
		for _, v := range vs {
			n := v.DuplicatesByCause[c.key]
			nonzero = nonzero || n != 0
			row = append(row, fmt.Sprint(n))
		}
		if nonzero {
			out = append(out, row)
		}
	}
	return out
}

// zeroCauses are the labels of the duplicate causes no variant had (duplicateRows leaves them
// out; the table names them in one line), "not attributed" excepted: it is shown only when
// non-zero.
func zeroCauses(res *Result) []string {
	vs := res.ran()
	if !slices.ContainsFunc(vs, func(v *VariantResult) bool { return v.DuplicatesByCause != nil }) {
		return nil
	}
	var out []string
	for _, c := range duplicateCauses {
		if c.key == "unattributed" || slices.ContainsFunc(vs, func(v *VariantResult) bool { return v.DuplicatesByCause[c.key] != 0 }) {
			continue
		}
		out = append(out, c.label)
	}
	return out
}
