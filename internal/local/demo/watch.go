package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// laneLast is, per shard and lane, the last record's sequence number: the mapping is drained
// when every lane's checkpoint reached it.
func (v *variant) laneLast() map[string]map[int]string {
	out := map[string]map[int]string{}
	for _, w := range v.writes.records() {
		l := laneOf(w.key, v.e.cfg.Parallelization)
		if out[w.shard] == nil {
			out[w.shard] = map[int]string{}
		}
		if cur := out[w.shard][l]; cur == "" || seqnum.Compare(w.seq, cur) > 0 {
			out[w.shard][l] = w.seq
		}
	}
	return out
}

// drained reports whether every mapping's every lane reached its last record.
func (v *variant) drained(laneLast map[string]map[int]string) bool {
	v.mu.Lock()
	ms := append([]*esm.Mapping(nil), v.mappings...)
	v.mu.Unlock()
	for _, m := range ms {
		cps := m.Checkpoints()
		for shard, lanes := range laneLast {
			for l, last := range lanes {
				lc := cps[shard]
				if l >= len(lc) || lc[l] == "" || seqnum.Compare(lc[l], last) < 0 {
					return false
				}
			}
		}
	}
	return len(ms) > 0
}

// complete reports whether the run is over: the mappings are drained and, for gapless, the
// failure queue is empty and the reconciler has verified every shard (an open shard up to its
// checkpoint mirror, a closed shard to its end). Records above an open shard's mirror can only
// be in ranges the mapping gave up on, which the failure queue carried to the reconciler.
func (v *variant) complete(ctx context.Context, laneLast map[string]map[int]string) bool {
	if !v.drained(laneLast) || v.trimming() {
		return false
	}
	if !v.gapless {
		return true
	}
	ok, n, err := v.verifiedShards(ctx)
	if err != nil {
		return false
	}
	v.shardsOK.Store(int64(ok))
	v.shardsN.Store(int64(n))
	if ok < n {
		return false
	}
	visible, inFlight, err := queueDepth(ctx, v.e.direct.sqs, v.failureURL)
	if err != nil || visible != 0 || inFlight != 0 {
		return false
	}
	v.verified.Store(true)
	return true
}

// verifiedShards counts the shards the reconciler has verified.
func (v *variant) verifiedShards(ctx context.Context) (ok, n int, err error) {
	shards, err := v.listShards(ctx)
	if err != nil {
		return 0, 0, err
	}
	states, err := checkpoint.New(v.e.direct.ddb, v.checkpointTable).List(ctx, group, v.stream)
	if err != nil {
		return 0, 0, err
	}
	by := map[string]checkpoint.State{}
	for _, s := range states {
		by[s.Shard.ShardID] = s
	}
	for _, s := range shards {
		n++
		st := by[s.id]
		switch {
		case s.closed:
			if st.Closed {
				ok++
			}
		case st.Checkpoint == "":
			// No consumer invocation ever completed on it: nothing was written to it, or the
			// mapping gave up every record it holds (--expire) and the reconciler's watermark
			// has passed the last of them.
			last := v.writes.lastIn(s.id)
			if last == "" || (st.Watermark != "" && seqnum.Compare(st.Watermark, last) >= 0) {
				ok++
			}
		case st.Watermark != "" && seqnum.Compare(st.Watermark, st.Checkpoint) >= 0:
			ok++
		}
	}
	return ok, n, nil
}

// lastShard is the highest shard id of the new stream.
func (v *variant) lastShard(ctx context.Context) (string, error) {
	shards, err := v.listShards(ctx)
	if err != nil {
		return "", fmt.Errorf("demo: list shards of %s: %w", v.stream, err)
	}
	last := ""
	for _, s := range shards {
		last = max(last, s.id)
	}
	return last, nil
}

type shardInfo struct {
	id     string
	closed bool
}

func (v *variant) listShards(ctx context.Context) ([]shardInfo, error) {
	var out []shardInfo
	in := &kinesis.ListShardsInput{StreamName: aws.String(v.stream)}
	for {
		page, err := v.e.direct.kin.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Shards {
			out = append(out, shardInfo{id: aws.ToString(s.ShardId),
				closed: s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil})
		}
		if page.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// sample records one timeline point and prints progress.
func (v *variant) sample(ctx context.Context, start time.Time) {
	seqs := v.writes.snapshot()
	s := Sample{At: time.Since(start).Round(time.Millisecond), Shards: map[string]ShardSample{}}
	for shard, ss := range seqs {
		s.Shards[shard] = ShardSample{Produced: len(ss)}
	}
	if v.gapless {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		states, err := checkpoint.New(v.e.direct.ddb, v.checkpointTable).List(sctx, group, v.stream)
		cancel()
		if err == nil {
			for _, st := range states {
				ss := seqs[st.Shard.ShardID]
				cur := s.Shards[st.Shard.ShardID]
				cur.Checkpoint = position(ss, st.Checkpoint)
				cur.Watermark = position(ss, st.Watermark)
				if st.Closed {
					cur.Watermark = len(ss)
				}
				s.Shards[st.Shard.ShardID] = cur
			}
		}
	} else {
		v.mu.Lock()
		var m *esm.Mapping
		if len(v.mappings) > 0 {
			m = v.mappings[0]
		}
		v.mu.Unlock()
		if m != nil {
			for shard, lanes := range m.Checkpoints() {
				ss := seqs[shard]
				low := -1
				for _, cp := range lanes {
					if p := position(ss, cp); low < 0 || p < low {
						low = p
					}
				}
				cur := s.Shards[shard]
				cur.Checkpoint = max(low, 0)
				s.Shards[shard] = cur
			}
		}
	}
	if v.gapless {
		// The progress line's "verified n/m shards", every sample (complete() only runs once
		// production is done).
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if ok, n, err := v.verifiedShards(sctx); err == nil {
			v.shardsOK.Store(int64(ok))
			v.shardsN.Store(int64(n))
		}
		cancel()
	}
	v.mu.Lock()
	v.timeline = append(v.timeline, s)
	v.mu.Unlock()
	v.rss.sample(time.Since(start))
	v.e.progress.status(v.statusLine(time.Since(start), v.e.progress.columns()))
}

// statusLine is the progress line: every figure in words when it fits width, else the same
// figures abbreviated (a legend is printed when the variant starts), with what the variant is
// waiting for once production is done.
func (v *variant) statusLine(elapsed time.Duration, width int) string {
	st := statusFigures{
		name: v.name, elapsed: elapsed, produced: int(v.produced.Load()), total: len(v.recs),
		invocations: int(v.ev.invocations.Load()), delivered: v.target.Unique(), parked: v.parked.Unique(),
		givenUp: int(v.ev.givenUp.Load()), gapless: v.gapless,
		reconcilerRuns: int(v.rec.scheduled.Load()), failureMsgs: int(v.rec.messages.Load()),
		verified: int(v.shardsOK.Load()), shards: int(v.shardsN.Load()),
	}
	return st.line(width)
}

// statusFigures are the figures of one progress line.
type statusFigures struct {
	name                                            string
	elapsed                                         time.Duration
	produced, total, invocations, delivered, parked int
	givenUp                                         int
	gapless                                         bool
	reconcilerRuns, failureMsgs, verified, shards   int
}

// waitingShort abbreviates waiting's phrases.
var waitingShort = map[string]string{
	waitMappingAndReconciler: "wait: retries, reconciler",
	waitMapping:              "wait: retries",
	waitVerify:               "wait: verify",
	waitDrain:                "draining",
}

// What a quiet stretch after production waits for.
const (
	waitMappingAndReconciler = "waiting for the mapping's retries and the reconciler's replays"
	waitMapping              = "waiting for the mapping's retries"
	waitVerify               = "waiting for the reconciler to verify every shard"
	waitDrain                = "draining"
)

// waiting says what a quiet stretch after production waits for ("" while producing).
func (s statusFigures) waiting() string {
	switch {
	case s.produced < s.total:
		return ""
	case s.delivered+s.parked < s.total && s.givenUp > 0 && s.gapless:
		return waitMappingAndReconciler
	case s.delivered+s.parked < s.total:
		return waitMapping
	case s.gapless && s.verified < s.shards:
		return waitVerify
	}
	return waitDrain
}

func (s statusFigures) line(width int) string {
	long := fmt.Sprintf("[%s %4ds] produced %d/%d | invocations %d | delivered %d | parked %d | given up %d",
		s.name, int(s.elapsed.Seconds()), s.produced, s.total, s.invocations, s.delivered, s.parked, s.givenUp)
	short := fmt.Sprintf("[%s %ds] prod %d/%d inv %d dlv %d park %d gvn %d",
		s.name, int(s.elapsed.Seconds()), s.produced, s.total, s.invocations, s.delivered, s.parked, s.givenUp)
	if s.gapless {
		long += fmt.Sprintf(" | reconciler runs %d, on-failure msgs %d | verified %d/%d shards",
			s.reconcilerRuns, s.failureMsgs, s.verified, s.shards)
		short += fmt.Sprintf(" rec %d ok %d/%d", s.reconcilerRuns, s.verified, s.shards)
	}
	if w := s.waiting(); w != "" {
		long += " | " + w
		short += " | " + waitingShort[w]
	}
	for _, l := range []string{long, short} {
		if len([]rune(l)) < width {
			return l
		}
	}
	return fit(short, width)
}

// statusLegend explains the abbreviated progress line.
const statusLegend = "progress: prod = produced, inv = invocations, dlv = delivered (unique), park = parked, " +
	"gvn = given up by the mapping, rec = reconciler runs, ok = shards verified"
