package demo

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
)

// capacityMeter is a reverse proxy in front of the DynamoDB emulator, behind the fault proxy
// (function → faultproxy → capacityMeter → emulator), so it sees exactly the requests that
// reached the service. It sizes every request from its JSON body with internal/local/ddbmeter's
// rules (ddbmeter itself is SDK middleware and cannot see another process's calls): the wire
// bodies are decoded into the SDK's typed inputs and outputs and handed to ddbmeter.Usage.
// Consumed capacity is not read from responses: the emulators do not report it faithfully.
type capacityMeter struct {
	lb *faultproxy.Loopback

	mu  sync.Mutex
	ops map[string]*ddbmeter.OpStats
}

// startCapacityMeter listens on a free 127.0.0.1 port and forwards to target.
func startCapacityMeter(target string) (*capacityMeter, error) {
	lb, err := faultproxy.ListenLoopback(target)
	if err != nil {
		return nil, fmt.Errorf("demo: meter: %w", err)
	}
	m := &capacityMeter{lb: lb, ops: map[string]*ddbmeter.OpStats{}}
	lb.Serve(m)
	return m, nil
}

func (m *capacityMeter) URL() string { return m.lb.URL() }

func (m *capacityMeter) Close() { _ = m.lb.Close() }

// Snapshot returns the counters by operation name ("PutItem", "Query", …) and their total.
func (m *capacityMeter) Snapshot() ddbmeter.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := ddbmeter.Snapshot{Ops: make(map[string]ddbmeter.OpStats, len(m.ops))}
	for op, o := range m.ops {
		s.Ops[op] = *o
	}
	s.Total = sumOps(s.Ops)
	return s
}

func sumOps(ops map[string]ddbmeter.OpStats) ddbmeter.OpStats {
	var t ddbmeter.OpStats
	names := make([]string, 0, len(ops))
	for n := range ops {
		names = append(names, n)
	}
	sort.Strings(names) // float sums in a fixed order
	for _, n := range names {
		o := ops[n]
		t.Calls += o.Calls
		t.Attempts += o.Attempts
		t.Errors += o.Errors
		t.ItemsRead += o.ItemsRead
		t.ItemsWritten += o.ItemsWritten
		t.BytesRead += o.BytesRead
		t.BytesWritten += o.BytesWritten
		t.ReadUnits += o.ReadUnits
		t.WriteUnits += o.WriteUnits
	}
	return t
}

func (m *capacityMeter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "meter: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := m.lb.Forward(r, body)
	if err != nil {
		http.Error(w, "meter: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, "meter: read response: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)

	plain := respBody
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(bytes.NewReader(respBody)); err == nil {
			if b, err := io.ReadAll(zr); err == nil {
				plain = b
			}
		}
	}
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	m.record(op, body, resp.StatusCode, plain)
}

func (m *capacityMeter) record(op string, reqBody []byte, status int, respBody []byte) {
	if op == "" {
		op = "(none)"
	}
	u := requestUsage(op, reqBody, status, respBody)
	u.Attempts = 1
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.ops[op]
	if s == nil {
		s = &ddbmeter.OpStats{}
		m.ops[op] = s
	}
	s.Attempts += u.Attempts
	s.Calls += u.Calls
	s.Errors += u.Errors
	s.ItemsRead += u.ItemsRead
	s.ItemsWritten += u.ItemsWritten
	s.BytesRead += u.BytesRead
	s.BytesWritten += u.BytesWritten
	s.ReadUnits += u.ReadUnits
	s.WriteUnits += u.WriteUnits
}

// requestUsage sizes one HTTP exchange. A 200 is a completed call; a 400 whose error type is
// ConditionalCheckFailedException still consumed write capacity (ddbmeter.Usage counts it);
// any other error consumed nothing. Bodies that do not decode count as a call without units.
func requestUsage(op string, reqBody []byte, status int, respBody []byte) ddbmeter.OpStats {
	var callErr error
	switch {
	case status == http.StatusOK:
	case status == http.StatusBadRequest && errorType(respBody) == "ConditionalCheckFailedException":
		callErr = &types.ConditionalCheckFailedException{}
	default:
		return ddbmeter.OpStats{Calls: 1, Errors: 1}
	}
	in, out, err := typedCall(op, reqBody, respBody, callErr == nil)
	if err != nil || in == nil {
		return ddbmeter.OpStats{Calls: 1}
	}
	u := ddbmeter.Usage(in, out, callErr)
	u.Calls = 1
	if callErr != nil {
		u.Errors = 1
	}
	return u
}

// errorType is the unqualified "__type" of a JSON error body.
func errorType(body []byte) string {
	var e struct {
		Type string `json:"__type"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if i := strings.LastIndexByte(e.Type, '#'); i >= 0 {
		return e.Type[i+1:]
	}
	return e.Type
}

// wireItem is an item as the JSON protocol carries it: attribute name → {"S": …} etc.
type wireItem map[string]json.RawMessage

// typedCall decodes a request (and, when ok, its response) into the SDK's typed values for the
// operations ddbmeter.Usage sizes. Other operations return a nil input.
func typedCall(op string, reqBody, respBody []byte, ok bool) (in, out any, err error) {
	switch op {
	case "PutItem":
		var w struct{ Item wireItem }
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		item, err := decodeItem(w.Item)
		return &dynamodb.PutItemInput{Item: item}, nil, err
	case "UpdateItem":
		var w struct {
			Key                       wireItem
			ExpressionAttributeValues wireItem
			ExpressionAttributeNames  map[string]string
		}
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		key, err1 := decodeItem(w.Key)
		vals, err2 := decodeItem(w.ExpressionAttributeValues)
		in := &dynamodb.UpdateItemInput{Key: key, ExpressionAttributeValues: vals, ExpressionAttributeNames: w.ExpressionAttributeNames}
		var o *dynamodb.UpdateItemOutput
		if ok {
			var wo struct{ Attributes wireItem }
			if json.Unmarshal(respBody, &wo) == nil && len(wo.Attributes) > 0 {
				attrs, err := decodeItem(wo.Attributes)
				if err == nil {
					o = &dynamodb.UpdateItemOutput{Attributes: attrs}
				}
			}
		}
		return in, o, errors.Join(err1, err2)
	case "DeleteItem":
		var w struct{ Key wireItem }
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		key, err := decodeItem(w.Key)
		return &dynamodb.DeleteItemInput{Key: key}, nil, err
	case "BatchWriteItem":
		var w struct {
			RequestItems map[string][]wireWrite
		}
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		reqs, err := decodeWrites(w.RequestItems)
		if err != nil {
			return nil, nil, err
		}
		var o *dynamodb.BatchWriteItemOutput
		if ok {
			var wo struct {
				UnprocessedItems map[string][]wireWrite
			}
			if json.Unmarshal(respBody, &wo) == nil {
				un, err := decodeWrites(wo.UnprocessedItems)
				if err == nil {
					o = &dynamodb.BatchWriteItemOutput{UnprocessedItems: un}
				}
			}
		}
		return &dynamodb.BatchWriteItemInput{RequestItems: reqs}, o, nil
	case "TransactWriteItems":
		var w struct {
			TransactItems []struct {
				Put            *struct{ Item wireItem }
				Update         *struct{ Key, ExpressionAttributeValues wireItem }
				Delete         *struct{ Key wireItem }
				ConditionCheck *struct{ Key wireItem }
			}
		}
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		in := &dynamodb.TransactWriteItemsInput{}
		var errs []error
		for _, ti := range w.TransactItems {
			var t types.TransactWriteItem
			switch {
			case ti.Put != nil:
				it, err := decodeItem(ti.Put.Item)
				errs = append(errs, err)
				t.Put = &types.Put{Item: it}
			case ti.Update != nil:
				k, err1 := decodeItem(ti.Update.Key)
				v, err2 := decodeItem(ti.Update.ExpressionAttributeValues)
				errs = append(errs, err1, err2)
				t.Update = &types.Update{Key: k, ExpressionAttributeValues: v}
			case ti.Delete != nil:
				k, err := decodeItem(ti.Delete.Key)
				errs = append(errs, err)
				t.Delete = &types.Delete{Key: k}
			case ti.ConditionCheck != nil:
				k, err := decodeItem(ti.ConditionCheck.Key)
				errs = append(errs, err)
				t.ConditionCheck = &types.ConditionCheck{Key: k}
			}
			in.TransactItems = append(in.TransactItems, t)
		}
		return in, nil, errors.Join(errs...)
	case "GetItem":
		var w struct{ ConsistentRead *bool }
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		var o *dynamodb.GetItemOutput
		if ok {
			var wo struct{ Item wireItem }
			if err := json.Unmarshal(respBody, &wo); err != nil {
				return nil, nil, err
			}
			o = &dynamodb.GetItemOutput{}
			if wo.Item != nil {
				it, err := decodeItem(wo.Item)
				if err != nil {
					return nil, nil, err
				}
				o.Item = it
			}
		}
		return &dynamodb.GetItemInput{ConsistentRead: w.ConsistentRead}, o, nil
	case "Query", "Scan":
		var w struct{ ConsistentRead *bool }
		if err := json.Unmarshal(reqBody, &w); err != nil {
			return nil, nil, err
		}
		var items []map[string]types.AttributeValue
		if ok {
			var wo struct{ Items []wireItem }
			if err := json.Unmarshal(respBody, &wo); err != nil {
				return nil, nil, err
			}
			for _, wi := range wo.Items {
				it, err := decodeItem(wi)
				if err != nil {
					return nil, nil, err
				}
				items = append(items, it)
			}
		}
		if op == "Query" {
			return &dynamodb.QueryInput{ConsistentRead: w.ConsistentRead}, &dynamodb.QueryOutput{Items: items}, nil
		}
		return &dynamodb.ScanInput{ConsistentRead: w.ConsistentRead}, &dynamodb.ScanOutput{Items: items}, nil
	}
	return nil, nil, nil
}

type wireWrite struct {
	PutRequest    *struct{ Item wireItem }
	DeleteRequest *struct{ Key wireItem }
}

func decodeWrites(in map[string][]wireWrite) (map[string][]types.WriteRequest, error) {
	out := make(map[string][]types.WriteRequest, len(in))
	for table, ws := range in {
		for _, w := range ws {
			var r types.WriteRequest
			switch {
			case w.PutRequest != nil:
				it, err := decodeItem(w.PutRequest.Item)
				if err != nil {
					return nil, err
				}
				r.PutRequest = &types.PutRequest{Item: it}
			case w.DeleteRequest != nil:
				k, err := decodeItem(w.DeleteRequest.Key)
				if err != nil {
					return nil, err
				}
				r.DeleteRequest = &types.DeleteRequest{Key: k}
			}
			out[table] = append(out[table], r)
		}
	}
	return out, nil
}

func decodeItem(w wireItem) (map[string]types.AttributeValue, error) {
	if w == nil {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(w))
	for name, raw := range w {
		v, err := decodeValue(raw)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// errValue is returned for a JSON attribute value that is not one of DynamoDB's data types.
var errValue = errors.New("demo: not a DynamoDB attribute value")

// decodeValue decodes one attribute value of the DynamoDB JSON protocol ({"S":"…"}, {"N":"…"},
// {"B":"<base64>"}, {"BOOL":…}, {"NULL":true}, {"SS":[…]}, {"NS":[…]}, {"BS":[…]},
// {"L":[…]}, {"M":{…}}; "Data types" in the DynamoDB API reference, AttributeValue).
func decodeValue(raw json.RawMessage) (types.AttributeValue, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 1 {
		return nil, errValue
	}
	for typ, v := range m {
		switch typ {
		case "S":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, errValue
			}
			return &types.AttributeValueMemberS{Value: s}, nil
		case "N":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, errValue
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "B":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, errValue
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, errValue
			}
			return &types.AttributeValueMemberB{Value: b}, nil
		case "BOOL":
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, errValue
			}
			return &types.AttributeValueMemberBOOL{Value: b}, nil
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "SS", "NS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return nil, errValue
			}
			if typ == "SS" {
				return &types.AttributeValueMemberSS{Value: ss}, nil
			}
			return &types.AttributeValueMemberNS{Value: ss}, nil
		case "BS":
			var ss []string
			if err := json.Unmarshal(v, &ss); err != nil {
				return nil, errValue
			}
			bs := make([][]byte, len(ss))
			for i, s := range ss {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, errValue
				}
				bs[i] = b
			}
			return &types.AttributeValueMemberBS{Value: bs}, nil
		case "L":
			var raws []json.RawMessage
			if err := json.Unmarshal(v, &raws); err != nil {
				return nil, errValue
			}
			l := make([]types.AttributeValue, len(raws))
			for i, r := range raws {
				e, err := decodeValue(r)
				if err != nil {
					return nil, err
				}
				l[i] = e
			}
			return &types.AttributeValueMemberL{Value: l}, nil
		case "M":
			var w wireItem
			if err := json.Unmarshal(v, &w); err != nil {
				return nil, errValue
			}
			mm, err := decodeItem(w)
			if err != nil {
				return nil, err
			}
			if mm == nil {
				mm = map[string]types.AttributeValue{}
			}
			return &types.AttributeValueMemberM{Value: mm}, nil
		}
	}
	return nil, errValue
}
