// Package retention puts Kinesis data retention in front of kinesis-local, which never trims a
// stream (its retention period is 24 hours at least and nothing expires). It is an HTTP proxy
// for the Kinesis JSON protocol with a trim horizon that only moves forward: every record whose
// ApproximateArrivalTimestamp is older than the horizon is gone, for every client that reads
// through the proxy (the local event-source mapping, the reconciler, the CLI).
//
// What AWS documents, and what the proxy does (Kinesis API reference, GetShardIterator and
// GetRecords; Kinesis Developer Guide, "Changing the data retention period"):
//   - GetRecords never returns a trimmed record: they are cut from every page, so an iterator
//     that pointed at records which have since expired continues at the first record still held
//     (a page may come back empty while NextShardIterator moves on, as GetRecords may return
//     empty pages mid-shard).
//   - TRIM_HORIZON "points to the last untrimmed record in the shard", the oldest still held:
//     served by the same cut.
//   - AT_SEQUENCE_NUMBER / AFTER_SEQUENCE_NUMBER for a position whose next record has been
//     trimmed: AWS documents only InvalidArgumentException for a StartingSequenceNumber it
//     cannot serve, and that is what consumers report for expired checkpoints
//     (harlow/kinesis-consumer#175); the proxy answers 400 InvalidArgumentException
//     "StartingSequenceNumber ... is older than the trim horizon". A position whose next record
//     is held is forwarded to kinesis-local, which then answers as it always does (it refuses,
//     with ResourceNotFoundException "Unable to find record", any number that is not a record).
//   - LATEST and AT_TIMESTAMP are forwarded (their records pass the same cut).
//
// Not modelled: closed shards leaving ListShards once their records expire, and
// IncreaseStreamRetentionPeriod/DecreaseStreamRetentionPeriod (use SetRetention).
//
// It is a test and demo tool, not part of the deployed product. It listens on 127.0.0.1 only.
package retention

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/seqnum"
)

const target = "Kinesis_20131202."

// Option configures a Proxy.
type Option func(*Proxy)

// WithClock replaces time.Now for the moving horizon of SetRetention.
func WithClock(now func() time.Time) Option { return func(p *Proxy) { p.now = now } }

// WithRegion names the region used for the proxy's own reads (Trimmed); default us-east-1.
func WithRegion(region string) Option { return func(p *Proxy) { p.region = region } }

// Stats counts what the proxy did.
type Stats struct {
	RecordsHidden int // trimmed records cut from GetRecords pages (one record read twice counts twice)
	Refused       int // GetShardIterator calls refused because the position was trimmed
}

// Proxy is a running retention proxy. Its methods are safe for concurrent use.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	client *http.Client
	done   chan struct{}
	now    func() time.Time
	region string

	mu        sync.Mutex
	retention time.Duration // 0: no moving horizon
	floor     time.Time     // explicit horizon (ExpireBefore)
	stalls    int           // GetRecords calls still to answer with an empty page (StallPages)
	stats     Stats
}

// Start listens on a free 127.0.0.1 port and proxies to target, the kinesis-local endpoint.
func Start(targetURL string, opts ...Option) (*Proxy, error) {
	u, err := url.Parse(targetURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("retention: target %q is not an http(s) URL", targetURL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("retention: listen: %w", err)
	}
	p := &Proxy{
		target: u, ln: ln, done: make(chan struct{}), now: time.Now, region: "us-east-1",
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, DisableCompression: true}},
	}
	for _, o := range opts {
		o(p)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's base URL (the Kinesis client's BaseEndpoint).
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	<-p.done
	if err != nil {
		return fmt.Errorf("retention: close: %w", err)
	}
	return nil
}

// SetRetention sets the stream's retention period: from now on records older than d are
// trimmed (the horizon follows the clock). 0 stops the moving horizon; what is already
// trimmed stays trimmed.
func (p *Proxy) SetRetention(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.horizonLocked(); !h.IsZero() && h.After(p.floor) {
		p.floor = h
	}
	p.retention = d
}

// ExpireBefore moves the horizon to t at least: every record that arrived before t is trimmed.
// The horizon never moves back.
func (p *Proxy) ExpireBefore(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.floor) {
		p.floor = t
	}
}

// StallPages makes the next n GetRecords calls answer an empty page that does not move:
// NextShardIterator is the iterator asked for and MillisBehindLatest is 0. Kinesis returns
// empty pages mid-shard ("it might take multiple calls to get to a portion of the shard that
// contains records", GetRecords API reference); a reader that takes one for the end of a
// closed shard, or for the end of a range, skips the records after it.
func (p *Proxy) StallPages(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalls = n
}

func (p *Proxy) takeStall() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalls > 0 {
		p.stalls--
		return true
	}
	return false
}

// Horizon returns the current trim horizon (zero: nothing trimmed).
func (p *Proxy) Horizon() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.horizonLocked()
}

func (p *Proxy) horizonLocked() time.Time {
	h := p.floor
	if p.retention > 0 {
		if m := p.now().Add(-p.retention); m.After(h) {
			h = m
		}
	}
	return h
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Proxy) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		http.Error(w, "retention: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	horizon := p.Horizon()
	op := r.Header.Get("X-Amz-Target")
	if op == target+"GetRecords" && p.takeStall() {
		var in recordsRequest
		if err := json.Unmarshal(body, &in); err == nil {
			b, _ := json.Marshal(map[string]any{"Records": []any{}, "NextShardIterator": in.ShardIterator, "MillisBehindLatest": 0})
			(&response{status: http.StatusOK, header: http.Header{"Content-Type": {"application/x-amz-json-1.1"}}, body: b}).write(w)
			return
		}
	}
	switch {
	case horizon.IsZero():
	case op == target+"GetShardIterator":
		if refused, err := p.positionTrimmed(r.Context(), r.Header, body, horizon); err == nil && refused != "" {
			p.count(func(s *Stats) { s.Refused++ })
			writeError(w, http.StatusBadRequest, "InvalidArgumentException", refused)
			return
		}
	case op == target+"GetRecords":
		resp, err := p.forward(r.Context(), r.Method, r.URL, r.Header, body)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "InternalFailure", "retention: "+err.Error())
			return
		}
		if resp.status == http.StatusOK {
			if cut, hidden, err := cutTrimmed(resp.body, horizon); err == nil {
				resp.body = cut
				p.count(func(s *Stats) { s.RecordsHidden += hidden })
			}
		}
		resp.write(w)
		return
	}
	resp, err := p.forward(r.Context(), r.Method, r.URL, r.Header, body)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalFailure", "retention: "+err.Error())
		return
	}
	resp.write(w)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) write(w http.ResponseWriter) {
	for k, vs := range r.header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Connection", "Keep-Alive", "Transfer-Encoding":
			continue
		}
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(r.body)))
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

func (p *Proxy) forward(ctx context.Context, method string, path *url.URL, header http.Header, body []byte) (*response, error) {
	u := *p.target
	u.Path = strings.TrimSuffix(p.target.Path, "/") + path.Path
	u.RawQuery = path.RawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Accept-Encoding":
			continue
		}
		req.Header[k] = vs
	}
	req.ContentLength = int64(len(body))
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// call makes one Kinesis JSON request to kinesis-local directly, with the headers of the
// client request being served (kinesis-local reads the region from the Authorization header).
func (p *Proxy) call(ctx context.Context, header http.Header, action string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	h := header.Clone()
	h.Set("X-Amz-Target", target+action)
	h.Set("Content-Type", "application/x-amz-json-1.1")
	resp, err := p.forward(ctx, http.MethodPost, &url.URL{Path: "/"}, h, body)
	if err != nil {
		return err
	}
	if resp.status != http.StatusOK {
		return &kinesisError{status: resp.status, body: string(resp.body)}
	}
	return json.Unmarshal(resp.body, out)
}

type kinesisError struct {
	status int
	body   string
}

func (e *kinesisError) Error() string { return fmt.Sprintf("kinesis-local %d: %s", e.status, e.body) }

// record is the part of a Kinesis record the proxy reads.
type record struct {
	SequenceNumber              string      `json:"SequenceNumber"`
	ApproximateArrivalTimestamp json.Number `json:"ApproximateArrivalTimestamp"`
}

func (r record) arrival() (time.Time, error) {
	f, err := r.ApproximateArrivalTimestamp.Float64()
	if err != nil {
		return time.Time{}, fmt.Errorf("ApproximateArrivalTimestamp %q: %w", r.ApproximateArrivalTimestamp, err)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e3))*int64(time.Millisecond)), nil
}

func (r record) trimmed(horizon time.Time) bool {
	at, err := r.arrival()
	return err == nil && at.Before(horizon)
}

// cutTrimmed removes the records older than horizon from a GetRecords response body, leaving
// every other field as it was.
func cutTrimmed(body []byte, horizon time.Time) ([]byte, int, error) {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, 0, err
	}
	var recs []json.RawMessage
	if err := json.Unmarshal(out["Records"], &recs); err != nil {
		return nil, 0, err
	}
	kept := make([]json.RawMessage, 0, len(recs))
	for _, raw := range recs {
		var r record
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, 0, err
		}
		if !r.trimmed(horizon) {
			kept = append(kept, raw)
		}
	}
	if len(kept) == len(recs) {
		return body, 0, nil
	}
	k, err := json.Marshal(kept)
	if err != nil {
		return nil, 0, err
	}
	out["Records"] = k
	b, err := json.Marshal(out)
	return b, len(recs) - len(kept), err
}

type iteratorRequest struct {
	StreamName             string `json:"StreamName,omitempty"`
	StreamARN              string `json:"StreamARN,omitempty"`
	ShardId                string `json:"ShardId"`
	ShardIteratorType      string `json:"ShardIteratorType"`
	StartingSequenceNumber string `json:"StartingSequenceNumber,omitempty"`
}

type iteratorResponse struct {
	ShardIterator *string `json:"ShardIterator"`
}

type recordsRequest struct {
	ShardIterator string `json:"ShardIterator"`
	Limit         int    `json:"Limit,omitempty"`
}

type recordsResponse struct {
	Records            []record `json:"Records"`
	NextShardIterator  *string  `json:"NextShardIterator"`
	MillisBehindLatest int64    `json:"MillisBehindLatest"`
}

// positionTrimmed decides a GetShardIterator AT_/AFTER_SEQUENCE_NUMBER request: it returns the
// refusal message when the first record the iterator would return has been trimmed, "" when
// the request is to be forwarded.
func (p *Proxy) positionTrimmed(ctx context.Context, header http.Header, body []byte, horizon time.Time) (string, error) {
	var in iteratorRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return "", err
	}
	after := false
	switch in.ShardIteratorType {
	case "AFTER_SEQUENCE_NUMBER":
		after = true
	case "AT_SEQUENCE_NUMBER":
	default:
		return "", nil
	}
	if seqnum.Validate(in.StartingSequenceNumber) != nil {
		return "", nil // kinesis-local answers malformed requests itself
	}
	first, ok, err := p.firstFrom(ctx, header, in, after)
	if err != nil || !ok || !first.trimmed(horizon) {
		return "", err
	}
	return fmt.Sprintf("StartingSequenceNumber %s used in GetShardIterator on shard %s is older than the trim horizon: the records after it have expired (retention)",
		in.StartingSequenceNumber, in.ShardId), nil
}

// firstFrom returns the first record at (after: after) the request's sequence number.
func (p *Proxy) firstFrom(ctx context.Context, header http.Header, in iteratorRequest, after bool) (record, bool, error) {
	var it iteratorResponse
	err := p.call(ctx, header, "GetShardIterator", in, &it)
	if err == nil {
		var out recordsResponse
		if it.ShardIterator == nil {
			return record{}, false, nil
		}
		if err := p.call(ctx, header, "GetRecords", recordsRequest{ShardIterator: *it.ShardIterator, Limit: 1}, &out); err != nil {
			return record{}, false, err
		}
		if len(out.Records) == 0 {
			return record{}, false, nil
		}
		return out.Records[0], true, nil
	}
	var kerr *kinesisError
	if !errors.As(err, &kerr) || !strings.Contains(kerr.body, "Unable to find record") {
		return record{}, false, err
	}
	// kinesis-local knows no record with that number (e.g. a shard's starting sequence
	// number): find the first record past it from the real trim horizon.
	th := in
	th.ShardIteratorType, th.StartingSequenceNumber = "TRIM_HORIZON", ""
	var start iteratorResponse
	if err := p.call(ctx, header, "GetShardIterator", th, &start); err != nil {
		return record{}, false, err
	}
	next := start.ShardIterator
	for next != nil {
		var out recordsResponse
		if err := p.call(ctx, header, "GetRecords", recordsRequest{ShardIterator: *next}, &out); err != nil {
			return record{}, false, err
		}
		for _, r := range out.Records {
			c := seqnum.Compare(r.SequenceNumber, in.StartingSequenceNumber)
			if c > 0 || (c == 0 && !after) {
				return r, true, nil
			}
		}
		if len(out.Records) == 0 && out.MillisBehindLatest == 0 {
			break
		}
		next = out.NextShardIterator
	}
	return record{}, false, nil
}

// Record names one record of the stream.
type Record struct {
	ShardID, SequenceNumber string
	Arrival                 time.Time
}

// Trimmed lists every record of the stream that the horizon has trimmed, reading kinesis-local
// directly (the demo compares it with what was delivered: a trimmed record never delivered is
// a record lost to retention).
func (p *Proxy) Trimmed(ctx context.Context, stream string) ([]Record, error) {
	horizon := p.Horizon()
	if horizon.IsZero() {
		return nil, nil
	}
	h := http.Header{}
	h.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20260101/"+p.region+"/kinesis/aws4_request, SignedHeaders=host, Signature=0")
	h.Set("X-Amz-Date", p.now().UTC().Format("20060102T150405Z"))
	var shards struct {
		Shards []struct {
			ShardId string `json:"ShardId"`
		} `json:"Shards"`
		NextToken *string `json:"NextToken"`
	}
	type listReq struct {
		StreamName string  `json:"StreamName,omitempty"`
		NextToken  *string `json:"NextToken,omitempty"`
	}
	var ids []string
	req := listReq{StreamName: stream}
	for {
		shards.NextToken = nil
		if err := p.call(ctx, h, "ListShards", req, &shards); err != nil {
			return nil, fmt.Errorf("retention: ListShards %s: %w", stream, err)
		}
		for _, s := range shards.Shards {
			ids = append(ids, s.ShardId)
		}
		if shards.NextToken == nil {
			break
		}
		req = listReq{NextToken: shards.NextToken}
	}
	var out []Record
	for _, id := range ids {
		var it iteratorResponse
		if err := p.call(ctx, h, "GetShardIterator", iteratorRequest{StreamName: stream, ShardId: id, ShardIteratorType: "TRIM_HORIZON"}, &it); err != nil {
			return nil, fmt.Errorf("retention: GetShardIterator %s: %w", id, err)
		}
		next := it.ShardIterator
	shard:
		for next != nil {
			var page recordsResponse
			if err := p.call(ctx, h, "GetRecords", recordsRequest{ShardIterator: *next}, &page); err != nil {
				return nil, fmt.Errorf("retention: GetRecords %s: %w", id, err)
			}
			for _, r := range page.Records {
				if !r.trimmed(horizon) {
					break shard // arrival times grow along the shard
				}
				at, _ := r.arrival()
				out = append(out, Record{ShardID: id, SequenceNumber: r.SequenceNumber, Arrival: at})
			}
			if len(page.Records) == 0 && page.MillisBehindLatest == 0 {
				break
			}
			next = page.NextShardIterator
		}
	}
	return out, nil
}

// writeError answers like Kinesis (awsJson1_1): {"__type", "message"}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": code, "message": msg})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
