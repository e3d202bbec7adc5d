// Package faultproxy is a fault-injecting HTTP reverse proxy for the JSON protocols of DynamoDB,
// Kinesis and SQS. Tests and the demo put it between an SDK client and an emulator to create
// the faults gapless must survive: throttling, server errors, delays and, nastiest of all, a
// request that reached the service (the write happened) whose response never reached the
// client.
//
// Requests are told apart by their X-Amz-Target header ("DynamoDB_20120810.UpdateItem",
// "Kinesis_20131202.GetRecords", "AmazonSQS.SendMessage"), which every AWS JSON protocol
// request carries. Faults are chosen by rules with a probability drawn from a seeded
// math/rand generator, so a sequential test or a demo run with a fixed seed is repeatable.
//
// It is a test and demo tool, not part of the deployed product. It listens on 127.0.0.1 only.
package faultproxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// MaxBodyBytes is the largest request body the proxy accepts (larger requests get 413).
// DynamoDB's largest request (BatchWriteItem, 16 MB) and Kinesis PutRecords fit.
const MaxBodyBytes = 32 << 20

// Request is what a Rule's Match sees of one incoming request.
type Request struct {
	// Operation is the X-Amz-Target header, e.g. "DynamoDB_20120810.UpdateItem"; empty when
	// the request has none.
	Operation string
	Method    string
	Path      string
	Header    http.Header // a copy; changing it has no effect
	Body      []byte      // the full request body; must not be modified
}

// Service is the part of Operation before the dot ("DynamoDB_20120810", "AmazonSQS").
func (r *Request) Service() string {
	svc, _, _ := strings.Cut(r.Operation, ".")
	return svc
}

// Action is the part of Operation after the dot ("UpdateItem", "SendMessage").
func (r *Request) Action() string {
	_, action, _ := strings.Cut(r.Operation, ".")
	return action
}

// Ops returns a Match function accepting requests whose Operation is one of ops.
func Ops(ops ...string) func(*Request) bool {
	set := make(map[string]bool, len(ops))
	for _, op := range ops {
		set[op] = true
	}
	return func(r *Request) bool { return set[r.Operation] }
}

// Service returns a Match function accepting every request to one service, by the Operation
// prefix ("DynamoDB_20120810", "Kinesis_20131202", "AmazonSQS").
func Service(service string) func(*Request) bool {
	return func(r *Request) bool { return r.Service() == service }
}

type kind int

const (
	kindNone kind = iota
	kindThrottle
	kindServerError
	kindDropBefore
	kindDropAfter
	kindDelay
)

// Fault is what the proxy does to a request a Rule selects. The zero Fault does nothing (a
// rule carrying it never fires).
type Fault struct {
	kind  kind
	delay time.Duration
}

// The faults. Throttle and ServerError answer without forwarding, so the request never
// reaches the service; DropBeforeForward closes the connection without forwarding;
// DropAfterForward forwards, waits for the complete response and then resets the client
// connection without replying: the operation happened but the client sees a connection error.
var (
	// Throttle answers 400 with the service's throttling error (DynamoDB and Kinesis
	// ProvisionedThroughputExceededException, SQS RequestThrottled, Kinesis control-plane
	// LimitExceededException), which the SDK's standard retryer retries.
	Throttle = Fault{kind: kindThrottle}
	// ServerError answers 500 with the service's internal error.
	ServerError = Fault{kind: kindServerError}
	// DropBeforeForward resets the client connection without forwarding.
	DropBeforeForward = Fault{kind: kindDropBefore}
	// DropAfterForward forwards, reads the whole response and resets the client connection.
	DropAfterForward = Fault{kind: kindDropAfter}
)

// Delay forwards the request after waiting d (or until the client gives up).
func Delay(d time.Duration) Fault { return Fault{kind: kindDelay, delay: d} }

// String names the fault.
func (f Fault) String() string {
	switch f.kind {
	case kindThrottle:
		return "Throttle"
	case kindServerError:
		return "ServerError"
	case kindDropBefore:
		return "DropBeforeForward"
	case kindDropAfter:
		return "DropAfterForward"
	case kindDelay:
		return "Delay(" + f.delay.String() + ")"
	}
	return "None"
}

// Rule selects requests and the fault to inject into them. Rules are tried in order; the first
// one that matches, has injections left and wins its random draw is applied, and the request
// is forwarded untouched when none does.
type Rule struct {
	// Match selects requests; nil matches every request. It must be cheap, must not modify the
	// request and must not call the Proxy.
	Match func(r *Request) bool
	Fault Fault
	// Rate is the probability (0..1) that a matching request gets the fault; 0 never injects,
	// 1 or more always does.
	Rate float64
	// Count caps the number of injections by this rule; 0 means unlimited.
	Count int
}

type ruleState struct {
	Rule
	used int
}

// OpStats counts what happened to the requests of one operation.
type OpStats struct {
	Requests      int // requests received
	Forwarded     int // requests that got a response from the target (DropAfterForward included)
	ForwardErrors int // requests the target did not answer (the client got 502)
	Throttled     int
	ServerErrors  int
	DroppedBefore int
	DroppedAfter  int
	Delayed       int
}

// Faults is the number of injected faults of every kind.
func (o OpStats) Faults() int {
	return o.Throttled + o.ServerErrors + o.DroppedBefore + o.DroppedAfter + o.Delayed
}

func (o *OpStats) add(p OpStats) {
	o.Requests += p.Requests
	o.Forwarded += p.Forwarded
	o.ForwardErrors += p.ForwardErrors
	o.Throttled += p.Throttled
	o.ServerErrors += p.ServerErrors
	o.DroppedBefore += p.DroppedBefore
	o.DroppedAfter += p.DroppedAfter
	o.Delayed += p.Delayed
}

// Stats is a snapshot of the proxy's counters, keyed by operation (X-Amz-Target).
type Stats struct {
	Ops map[string]OpStats
}

// Op returns the counters of one operation (zero when it was never seen).
func (s Stats) Op(operation string) OpStats { return s.Ops[operation] }

// Total sums the counters of every operation.
func (s Stats) Total() OpStats {
	var t OpStats
	for _, o := range s.Ops {
		t.add(o)
	}
	return t
}

// Option configures a Proxy.
type Option func(*options)

type options struct {
	seed uint64
}

// WithSeed seeds the generator that draws Rule.Rate (default 1).
func WithSeed(seed int64) Option { return func(o *options) { o.seed = uint64(seed) } }

// Proxy is a running fault-injecting reverse proxy. Its methods are safe for concurrent use.
type Proxy struct {
	lb *Loopback

	mu       sync.Mutex
	rules    []*ruleState
	rng      *rand.Rand
	stats    map[string]*OpStats
	requests int
	closed   bool
}

// Start listens on 127.0.0.1 (a free port) and proxies to target, an http(s) base URL such as
// the emulator endpoint "http://127.0.0.1:4569".
func Start(target string, opts ...Option) (*Proxy, error) {
	o := options{seed: 1}
	for _, opt := range opts {
		opt(&o)
	}
	lb, err := ListenLoopback(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		lb:    lb,
		rng:   rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)),
		stats: map[string]*OpStats{},
	}
	lb.Serve(p)
	return p, nil
}

// URL is the proxy's base URL, to be used as the SDK client's BaseEndpoint.
func (p *Proxy) URL() string { return p.lb.URL() }

// Close stops the proxy and closes every connection it holds.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	return p.lb.Close()
}

// SetRules replaces the rules (and their injection counts); no rules means pure forwarding.
func (p *Proxy) SetRules(rules ...Rule) {
	rs := make([]*ruleState, 0, len(rules))
	for _, r := range rules {
		rs = append(rs, &ruleState{Rule: r})
	}
	p.mu.Lock()
	p.rules = rs
	p.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Ops: make(map[string]OpStats, len(p.stats))}
	for op, o := range p.stats {
		s.Ops[op] = *o
	}
	return s
}

func (p *Proxy) count(op string, f func(*OpStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.stats[op]
	if o == nil {
		o = &OpStats{}
		p.stats[op] = o
	}
	f(o)
}

// pick chooses the fault for one request and counts the request.
func (p *Proxy) pick(req *Request) (Fault, int) {
	p.mu.Lock()
	rules := p.rules
	p.requests++
	n := p.requests
	p.mu.Unlock()
	p.count(req.Operation, func(o *OpStats) { o.Requests++ })

	for _, r := range rules {
		if r.Fault.kind == kindNone || (r.Match != nil && !r.Match(req)) {
			continue
		}
		p.mu.Lock()
		fire := (r.Count == 0 || r.used < r.Count) && p.draw(r.Rate)
		if fire {
			r.used++
		}
		p.mu.Unlock()
		if fire {
			return r.Fault, n
		}
	}
	return Fault{}, n
}

// draw reports whether an event of probability rate happens; p.mu must be held.
func (p *Proxy) draw(rate float64) bool {
	switch {
	case rate <= 0:
		return false
	case rate >= 1:
		return true
	}
	return p.rng.Float64() < rate
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		http.Error(w, "faultproxy: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > MaxBodyBytes {
		http.Error(w, "faultproxy: request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	req := &Request{
		Operation: r.Header.Get("X-Amz-Target"),
		Method:    r.Method,
		Path:      r.URL.Path,
		Header:    r.Header.Clone(),
		Body:      body,
	}
	fault, n := p.pick(req)
	requestID := fmt.Sprintf("faultproxy-%d", n)

	switch fault.kind {
	case kindThrottle:
		p.count(req.Operation, func(o *OpStats) { o.Throttled++ })
		writeServiceError(w, req, requestID, throttleError(req))
		return
	case kindServerError:
		p.count(req.Operation, func(o *OpStats) { o.ServerErrors++ })
		writeServiceError(w, req, requestID, serverError(req))
		return
	case kindDropBefore:
		p.count(req.Operation, func(o *OpStats) { o.DroppedBefore++ })
		reset(w)
		return
	case kindDelay:
		p.count(req.Operation, func(o *OpStats) { o.Delayed++ })
		t := time.NewTimer(fault.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	resp, err := p.lb.Forward(r, body)
	if err != nil {
		p.count(req.Operation, func(o *OpStats) { o.ForwardErrors++ })
		writeServiceError(w, req, requestID, serviceError{
			status: http.StatusBadGateway, code: "BadGateway", message: "faultproxy: " + err.Error(),
		})
		return
	}
	defer resp.Body.Close()
	p.count(req.Operation, func(o *OpStats) { o.Forwarded++ })

	if fault.kind == kindDropAfter {
		// Let the target finish the exchange so the operation certainly completed, then reset
		// the client connection: the client cannot tell whether anything happened.
		_, _ = io.Copy(io.Discard, resp.Body)
		p.count(req.Operation, func(o *OpStats) { o.DroppedAfter++ })
		reset(w)
		return
	}
	h := w.Header()
	for k, vs := range resp.Header {
		if !hopByHop(k) {
			h[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// reset closes the client connection without a response, with a TCP RST where possible
// (the SDK reports "connection reset" and, as for any connection error, retries).
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Unreachable with this server (plain HTTP/1.1, nothing written yet); still never
		// answer as if the request succeeded.
		http.Error(w, "faultproxy: connection dropped", http.StatusBadGateway)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// hopByHop reports headers that belong to one connection and must not be forwarded
// (RFC 9110 section 7.6.1).
func hopByHop(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
