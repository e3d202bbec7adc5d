// Package checkpoint keeps gapless's per-shard checkpoint mirror and verified watermark in
// DynamoDB: one item per (group, stream, shard) in the checkpoint table, pk = "group|stream",
// sk = shardId (docs/design.md, "Checkpoint table").
//
// Both positions only move forward. Each advance is one conditional UpdateItem on the
// order-preserving encoding of the sequence number (seqnum.Encode; never a DynamoDB Number,
// never the raw string), and a write that loses the race to a higher or equal value is a
// Result with Advanced=false, not an error. Nothing here tells a caller to skip records: the
// field report's bug was a consumer that treated a lost compare-and-set as "someone else did
// my batch". Callers decide what was processed from the ledger, never from a Result.
package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Errors returned (wrapped) by Store. Invalid shard keys wrap recordid.ErrInvalid and invalid
// sequence numbers wrap seqnum.ErrInvalid; both are rejected before any DynamoDB call.
var (
	// ErrNotFound: the table holds no item for the shard.
	ErrNotFound = errors.New("checkpoint: no state for shard")
	// ErrConflict: MarkClosed found a different ending sequence number already recorded.
	ErrConflict = errors.New("checkpoint: conflicting shard state")
	// ErrCorrupt: an item's attributes do not have the expected types or values.
	ErrCorrupt = errors.New("checkpoint: malformed item")
)

// Attribute names of a checkpoint item (docs/design.md).
const (
	attrCheckpoint        = "checkpoint"
	attrCheckpointEnc     = "checkpointEnc"
	attrCheckpointAt      = "checkpointAt"
	attrWatermark         = "watermark"
	attrWatermarkEnc      = "watermarkEnc"
	attrWatermarkAt       = "watermarkAt"
	attrParents           = "parents"
	attrClosed            = "closed"
	attrEndingSeq         = "endingSeq"
	attrCheckpointWrites  = "checkpointWrites"
	attrRacesLost         = "racesLost"
	attrGapsDetected      = "gapsDetected"
	attrGapsReplayed      = "gapsReplayed"
	attrParked            = "parked"
	attrLostToRetention   = "lostToRetention"
	attrExpiredUnverified = "expiredUnverified"
	attrLossTokens        = "lossTokens"
	attrLostSpans         = "lostSpans"
	attrCheckpointToken   = "checkpointToken"
	attrWatermarkToken    = "watermarkToken"
	attrFiltered          = "filtered"
)

// dynamoAPI is the part of *dynamodb.Client the store uses.
type dynamoAPI interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ dynamoAPI = (*dynamodb.Client)(nil)

// Store reads and writes checkpoint items. It is safe for concurrent use; concurrent writers
// (invocations, reconciler runs) are serialized by DynamoDB's conditional writes.
type Store struct {
	client dynamoAPI
	table  string
	now    func() time.Time
	// pageLimit caps items per Query page (0: DynamoDB's 1 MB pages); tests set it to
	// exercise pagination.
	pageLimit int32
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock used for checkpointAt and watermarkAt (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns a Store on the checkpoint table named table.
func New(client dynamoAPI, table string, opts ...Option) *Store {
	s := &Store{client: client, table: table, now: time.Now}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Result is the outcome of an advance.
type Result struct {
	// Advanced is true only when this call's write happened: the stored value is now the
	// offered one. False means the stored value was already greater than or equal to the
	// offered one (a lost race or a replay); it is not an error and says nothing about which
	// records were processed.
	Advanced bool
	// Previous is the stored value that won, when the endpoint returns it with the failed
	// condition (ReturnValuesOnConditionCheckFailure; DynamoDB does, dynalite does not) or
	// by the read that looks for the call's token; otherwise "". Previous equal to the offered
	// value is another writer's write of the same value, or, where the endpoint returns no
	// item with a failed condition, this call's own earlier attempt whose answer was lost
	// (where it returns the item, that attempt is reported Advanced).
	Previous string
}

// Counters are the per-shard totals kept on the item; AddCounters adds to them.
type Counters struct {
	CheckpointWrites int64 // successful checkpoint advances (bumped by Advance itself)
	RacesLost        int64
	GapsDetected     int64
	GapsReplayed     int64
	Parked           int64
	LostToRetention  int64
	// ExpiredUnverified: spans that expired before the reconciler verified them but whose every
	// record the ledger proves done (CountLoss with Loss.Done).
	ExpiredUnverified int64
	Filtered          int64 // records the record filter drops, counted by the reconciler (not gaps)
}

// State is everything stored for one shard. Zero values mean "never set".
type State struct {
	Shard        recordid.Shard
	Checkpoint   string // highest sequence reported done; "" before the first advance
	Watermark    string // verified watermark; "" before the reconciler first moved it
	Parents      []string
	Closed       bool
	EndingSeq    string
	CheckpointAt time.Time
	WatermarkAt  time.Time
	// ScopeFrom: with the mapping at LATEST, the time from which the group's records are in
	// scope (SetScopeFrom); zero when never recorded.
	ScopeFrom time.Time
	// VerifiedAsOf: where the shard's verification stood after its last walk by a work-queue
	// invocation (SetVerifiedAsOf); zero when never recorded.
	VerifiedAsOf time.Time
	// Empty: how far past the watermark a reader found no record (SetEmptyThrough); use
	// EmptyThroughFor.
	Empty EmptyThrough
	Counters
}

// position names the attributes of one monotonic position (checkpoint or watermark).
type position struct {
	op      string // for errors
	raw     string
	enc     string
	at      string
	token   string // the random token of the write that last moved it
	counter string // bumped on every successful advance; "" for none
}

var (
	checkpointPos = position{op: "advance checkpoint", raw: attrCheckpoint, enc: attrCheckpointEnc, at: attrCheckpointAt, token: attrCheckpointToken, counter: attrCheckpointWrites}
	watermarkPos  = position{op: "advance watermark", raw: attrWatermark, enc: attrWatermarkEnc, at: attrWatermarkAt, token: attrWatermarkToken}
)

// Advance moves the shard's checkpoint to seq if seq is greater than the stored checkpoint, in
// one UpdateItem that also sets checkpointAt and adds 1 to checkpointWrites. A stored value
// greater than or equal to seq gives Result{Advanced: false} and a nil error. Throttling and
// server errors are returned after the SDK's own retries; Advanced is never true unless the
// write happened. The write stores a random token of its own (checkpointToken), so a call whose
// first attempt was applied but whose answer was lost (the SDK retries it, and the retry fails
// the condition on the value the first attempt stored) still reports Advanced: the token is read
// from the item the failed condition returns (DynamoDB returns it at no extra cost), or by a
// consistent GetItem after any other error (one read per failed call, never on a lost race). A lost race costs no read: where the endpoint
// returns no item with the failed condition (dynalite), such a retry reads as a lost race
// (Advanced false; the value is stored either way).
func (s *Store) Advance(ctx context.Context, shard recordid.Shard, seq string) (Result, error) {
	return s.advance(ctx, checkpointPos, shard, seq)
}

// AdvanceWatermark moves the shard's verified watermark forward like Advance moves the
// checkpoint. Only the reconciler calls it, after proving every record up to seq accounted for.
func (s *Store) AdvanceWatermark(ctx context.Context, shard recordid.Shard, seq string) (Result, error) {
	return s.advance(ctx, watermarkPos, shard, seq)
}

// confirm settles the outcome of CountLoss's write, which returned err. nil is this call's
// write. Otherwise the item is looked at (the one DynamoDB returns with a failed condition, or a
// consistent GetItem where the endpoint returns none or no attempt got an answer): the token in
// lossTokens means an attempt of this call was applied (its response lost, a retry failing the
// condition), and the write is reported Advanced. Without the token, the span in lostSpans or a
// failed condition is another writer's count or move (Advanced false, no error); any other
// failure is returned.
func (s *Store) confirm(ctx context.Context, op string, shard recordid.Shard, l Loss, token string, err error) (Result, error) {
	if err == nil {
		return Result{Advanced: true}, nil
	}
	item, failed, getErr := s.afterFailedWrite(ctx, shard, err, true)
	if getErr != nil {
		// The write may be ours: an error, not a lost race.
		return Result{}, fmt.Errorf("checkpoint: %s %s after %q: %w (and the item could not be read: %v)", op, shard, l.After, err, getErr)
	}
	if tokens, ok := item[attrLossTokens].(*types.AttributeValueMemberSS); ok && slices.Contains(tokens.Value, token) {
		return Result{Advanced: true, Previous: storedSeq(item, attrWatermarkEnc)}, nil
	}
	if spans, ok := item[attrLostSpans].(*types.AttributeValueMemberSS); ok && slices.Contains(spans.Value, l.key()) {
		return Result{Previous: storedSeq(item, attrWatermarkEnc)}, nil // counted by another writer
	}
	if !failed {
		return Result{}, fmt.Errorf("checkpoint: %s %s after %q: %w", op, shard, l.After, err)
	}
	return Result{Previous: storedSeq(item, attrWatermarkEnc)}, nil
}

// afterFailedWrite returns the shard's item after a conditional write that returned err (not
// nil), to tell the writer's own applied write (its token on the item) from a lost race: the
// item DynamoDB returns with a failed condition (ReturnValuesOnConditionCheckFailure), or a
// consistent GetItem after any other error (the last attempt's throttle or 5xx may follow an
// earlier attempt that was applied and whose answer was lost, so every such error is read),
// or, with readBare, when the failed condition came without the item (an endpoint that does
// not return it: dynalite). failed reports a failed condition; getErr, that the read was needed
// and failed.
func (s *Store) afterFailedWrite(ctx context.Context, shard recordid.Shard, err error, readBare bool) (item map[string]types.AttributeValue, failed bool, getErr error) {
	var cond *types.ConditionalCheckFailedException
	if errors.As(err, &cond) {
		failed = true
		item = cond.Item
	}
	if item != nil || (failed && !readBare) {
		return item, failed, nil
	}
	out, getErr := s.client.GetItem(context.WithoutCancel(ctx), &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(shard), ConsistentRead: aws.Bool(true)})
	if getErr != nil {
		return nil, failed, getErr
	}
	return out.Item, failed, nil
}

// Loss is one span of a shard lost to stream retention: records after the verified watermark
// After that expired before anyone verified them.
type Loss struct {
	// After is the verified watermark the span follows ("" when the shard has none). It is the
	// span's identity: every reconciler that finds records after this watermark expired (a
	// scheduled pass, a failure-queue replay of a range inside the span) finds the same span,
	// whatever first record it still sees held.
	After string
	// To is where the watermark moves past the span, with the count; "" counts the span without
	// moving the watermark (nothing is held after it to move it to).
	To string
	// Done: every record of the span is proven done (processed or parked) although none was
	// verified before it expired. The span is counted in expiredUnverified instead of
	// lostToRetention, with the same once-only identity (lostSpans).
	Done bool
}

// spanStart names the span of a shard never verified in lostSpans.
const spanStart = "start"

func (l Loss) key() string {
	if l.After == "" {
		return spanStart
	}
	return l.After
}

// CountLoss adds 1 to the shard's lostToRetention counter (expiredUnverified when l.Done) for the
// span l, and moves the
// watermark to l.To when set, in one UpdateItem. The span is counted once whoever counts it: the
// write is conditional on the watermark still being exactly l.After (nobody has passed the span
// yet) and on the span's identity being absent from the item's lostSpans set, to which it is
// added. A second count of the span (a replay and a pass finding it at once, a redelivered
// failure-queue message, a pass after a replay that counted it in place) fails that condition and
// is a Result with Advanced false: not an error, and the caller may then advance the watermark
// past the span with AdvanceWatermark (the span is counted, or someone verified past it).
//
// The write also carries a random token, added to lossTokens. When the SDK retries a write whose
// first attempt was applied but whose response was lost, the retry fails the condition; the
// store then looks for its token (in the item DynamoDB returns with the failed condition, or with
// a consistent GetItem where the endpoint returns none, or when no attempt got an answer) and
// reports Advanced: the count is this caller's, applied once. An error means the count may not
// be on the item: the caller must not treat anything that depends on it as final.
func (s *Store) CountLoss(ctx context.Context, shard recordid.Shard, l Loss) (Result, error) {
	const op = "count lost span"
	if err := shard.Validate(); err != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
	}
	names := map[string]string{"#lost": attrLostToRetention, "#tok": attrLossTokens, "#spans": attrLostSpans, "#enc": attrWatermarkEnc}
	if l.Done {
		names["#lost"] = attrExpiredUnverified
	}
	values := map[string]types.AttributeValue{
		":one":     &types.AttributeValueMemberN{Value: "1"},
		":span":    &types.AttributeValueMemberS{Value: l.key()},
		":spanset": &types.AttributeValueMemberSS{Value: []string{l.key()}},
	}
	cond := "attribute_not_exists(#enc)"
	if l.After != "" {
		prev, err := seqnum.Encode(l.After)
		if err != nil {
			return Result{}, fmt.Errorf("checkpoint: %s %s: after: %w", op, shard, err)
		}
		cond = "#enc = :prev"
		values[":prev"] = &types.AttributeValueMemberS{Value: prev}
	}
	cond += " AND (attribute_not_exists(#spans) OR NOT contains(#spans, :span))"
	update := "ADD #lost :one, #tok :tok, #spans :spanset"
	if l.To != "" {
		enc, err := seqnum.Encode(l.To)
		if err != nil {
			return Result{}, fmt.Errorf("checkpoint: %s %s: to: %w", op, shard, err)
		}
		if l.After != "" && seqnum.Compare(l.To, l.After) <= 0 {
			return Result{}, fmt.Errorf("checkpoint: %s %s: to %s is not past after %s", op, shard, l.To, l.After)
		}
		update = "SET #raw = :raw, #enc = :enc, #at = :at " + update
		names["#raw"], names["#at"] = attrWatermark, attrWatermarkAt
		values[":raw"] = &types.AttributeValueMemberS{Value: l.To}
		values[":enc"] = &types.AttributeValueMemberS{Value: enc}
		values[":at"] = &types.AttributeValueMemberS{Value: s.timestamp()}
	}
	token, err := newToken()
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
	}
	values[":tok"] = &types.AttributeValueMemberSS{Value: []string{token}}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 key(shard),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return s.confirm(ctx, op, shard, l, token, err)
}

// newToken returns a random identifier for one conditional write.
func newToken() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (s *Store) advance(ctx context.Context, p position, shard recordid.Shard, seq string) (Result, error) {
	if err := shard.Validate(); err != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s: %w", p.op, shard, err)
	}
	enc, err := seqnum.Encode(seq)
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s: %w", p.op, shard, err)
	}
	token, err := newToken()
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s: %w", p.op, shard, err)
	}
	names := map[string]string{"#raw": p.raw, "#enc": p.enc, "#at": p.at, "#tok": p.token}
	values := map[string]types.AttributeValue{
		":raw": &types.AttributeValueMemberS{Value: seq},
		":enc": &types.AttributeValueMemberS{Value: enc},
		":at":  &types.AttributeValueMemberS{Value: s.timestamp()},
		":tok": &types.AttributeValueMemberS{Value: token},
	}
	update := "SET #raw = :raw, #enc = :enc, #at = :at, #tok = :tok"
	if p.counter != "" {
		update += " ADD #n :one"
		names["#n"] = p.counter
		values[":one"] = &types.AttributeValueMemberN{Value: "1"}
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("attribute_not_exists(#enc) OR #enc < :enc"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		// Tells the caller who won without a second read where the endpoint supports it
		// (UpdateItem API reference, ReturnValuesOnConditionCheckFailure; no extra cost).
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return Result{Advanced: true}, nil
	}
	item, failed, getErr := s.afterFailedWrite(ctx, shard, err, false)
	if getErr != nil {
		return Result{}, fmt.Errorf("checkpoint: %s %s to %s: %w (and the item could not be read: %v)", p.op, shard, seq, err, getErr)
	}
	if v, ok := item[p.token].(*types.AttributeValueMemberS); ok && v.Value == token {
		return Result{Advanced: true}, nil // an earlier attempt of this call was applied; its answer was lost
	}
	if !failed {
		return Result{}, fmt.Errorf("checkpoint: %s %s to %s: %w", p.op, shard, seq, err)
	}
	return Result{Previous: storedSeq(item, p.enc)}, nil
}

// storedSeq decodes the encoded position from an item returned with a failed condition; ""
// when absent or malformed (it is informational only).
func storedSeq(item map[string]types.AttributeValue, encAttr string) string {
	v, ok := item[encAttr].(*types.AttributeValueMemberS)
	if !ok {
		return ""
	}
	seq, err := seqnum.Decode(v.Value)
	if err != nil {
		return ""
	}
	return seq
}

// Get returns the shard's state, with a strongly consistent read. It returns an error wrapping
// ErrNotFound when the table has no item for the shard.
func (s *Store) Get(ctx context.Context, shard recordid.Shard) (State, error) {
	if err := shard.Validate(); err != nil {
		return State{}, fmt.Errorf("checkpoint: get %s: %w", shard, err)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(shard),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return State{}, fmt.Errorf("checkpoint: get %s: %w", shard, err)
	}
	if out.Item == nil {
		return State{}, fmt.Errorf("checkpoint: get %s: %w", shard, ErrNotFound)
	}
	st, err := decode(out.Item)
	if err != nil {
		return State{}, fmt.Errorf("checkpoint: get %s: %w", shard, err)
	}
	return st, nil
}

// List returns the state of every shard of the stream known to the group, ordered by shard id,
// reading every page of a strongly consistent Query. No shards is an empty slice, not an error.
func (s *Store) List(ctx context.Context, group, stream string) ([]State, error) {
	probe := recordid.Shard{Group: group, Stream: stream, ShardID: "shardId-000000000000"}
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %s%s%s: %w", group, recordid.Separator, stream, err)
	}
	pk := group + recordid.Separator + stream
	pages := dynamodb.NewQueryPaginator(s.client, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": schema.PartitionKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead:            aws.Bool(true),
		Limit:                     limit(s.pageLimit),
	})
	states := []State{}
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list %s: %w", pk, err)
		}
		for _, item := range page.Items {
			st, err := decode(item)
			if err != nil {
				return nil, fmt.Errorf("checkpoint: list %s: %w", pk, err)
			}
			states = append(states, st)
		}
	}
	return states, nil
}

// SetLineage records the shard's parent shard ids (none for an original shard). Lineage is a
// fact of the stream, so the write is unconditional and idempotent.
func (s *Store) SetLineage(ctx context.Context, shard recordid.Shard, parents []string) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("checkpoint: set lineage %s: %w", shard, err)
	}
	list := make([]types.AttributeValue, 0, len(parents))
	for _, p := range parents {
		parent := shard
		parent.ShardID = p
		if err := parent.Validate(); err != nil {
			return fmt.Errorf("checkpoint: set lineage %s: parent: %w", shard, err)
		}
		list = append(list, &types.AttributeValueMemberS{Value: p})
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String("SET #parents = :parents"),
		ExpressionAttributeNames:  map[string]string{"#parents": attrParents},
		ExpressionAttributeValues: map[string]types.AttributeValue{":parents": &types.AttributeValueMemberL{Value: list}},
	})
	if err != nil {
		return fmt.Errorf("checkpoint: set lineage %s: %w", shard, err)
	}
	return nil
}

// MarkClosed records that the shard was closed by a reshard and its ending sequence number.
// Repeating it with the same endingSeq is a no-op; a different endingSeq than the one stored
// returns an error wrapping ErrConflict (a shard's ending sequence never changes).
func (s *Store) MarkClosed(ctx context.Context, shard recordid.Shard, endingSeq string) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("checkpoint: mark closed %s: %w", shard, err)
	}
	if err := seqnum.Validate(endingSeq); err != nil {
		return fmt.Errorf("checkpoint: mark closed %s: ending sequence: %w", shard, err)
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 key(shard),
		UpdateExpression:                    aws.String("SET #closed = :true, #end = :end"),
		ConditionExpression:                 aws.String("attribute_not_exists(#end) OR #end = :end"),
		ExpressionAttributeNames:            map[string]string{"#closed": attrClosed, "#end": attrEndingSeq},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":true": &types.AttributeValueMemberBOOL{Value: true}, ":end": &types.AttributeValueMemberS{Value: endingSeq}},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var conflict *types.ConditionalCheckFailedException
	if errors.As(err, &conflict) {
		stored := "a different value"
		if v, ok := conflict.Item[attrEndingSeq].(*types.AttributeValueMemberS); ok {
			stored = v.Value
		}
		return fmt.Errorf("checkpoint: mark closed %s at %s: %w: ending sequence already recorded as %s", shard, endingSeq, ErrConflict, stored)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: mark closed %s at %s: %w", shard, endingSeq, err)
	}
	return nil
}

// AddCounters adds c to the shard's counters in one UpdateItem (DynamoDB ADD, atomic under
// concurrent writers). Zero fields are left out; all zero makes no call. Counters only grow:
// a negative field is rejected.
func (s *Store) AddCounters(ctx context.Context, shard recordid.Shard, c Counters) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("checkpoint: add counters %s: %w", shard, err)
	}
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	var adds []string
	for i, f := range c.fields() {
		if *f.v < 0 {
			return fmt.Errorf("checkpoint: add counters %s: %s is negative (%d); counters only grow", shard, f.attr, *f.v)
		}
		if *f.v == 0 {
			continue
		}
		n, v := "#c"+strconv.Itoa(i), ":c"+strconv.Itoa(i)
		names[n] = f.attr
		values[v] = &types.AttributeValueMemberN{Value: strconv.FormatInt(*f.v, 10)}
		adds = append(adds, n+" "+v)
	}
	if len(adds) == 0 {
		return nil
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String("ADD " + strings.Join(adds, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if err != nil {
		return fmt.Errorf("checkpoint: add counters %s: %w", shard, err)
	}
	return nil
}

type counterField struct {
	attr string
	v    *int64
}

func (c *Counters) fields() []counterField {
	return []counterField{
		{attrCheckpointWrites, &c.CheckpointWrites},
		{attrRacesLost, &c.RacesLost},
		{attrGapsDetected, &c.GapsDetected},
		{attrGapsReplayed, &c.GapsReplayed},
		{attrParked, &c.Parked},
		{attrLostToRetention, &c.LostToRetention},
		{attrExpiredUnverified, &c.ExpiredUnverified},
		{attrFiltered, &c.Filtered},
	}
}

func key(shard recordid.Shard) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: shard.Group + recordid.Separator + shard.Stream},
		schema.SortKey:      &types.AttributeValueMemberS{Value: shard.ShardID},
	}
}

func limit(n int32) *int32 {
	if n <= 0 {
		return nil
	}
	return aws.Int32(n)
}

func (s *Store) timestamp() string { return s.now().UTC().Format(time.RFC3339Nano) }
