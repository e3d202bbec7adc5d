package sim

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestEvalCondCountLoss: the condition checkpoint.Store.CountLoss writes (a span counted once:
// the watermark unchanged and the span not yet in the set) is evaluated as DynamoDB does.
// Without contains the model refused it with a ValidationException, so no span was ever
// counted in a run and the "loss not counted" invariant broke on the model, not the product.
func TestEvalCondCountLoss(t *testing.T) {
	const cond = "#wm = :wm AND (attribute_not_exists(#spans) OR NOT contains(#spans, :span))"
	names := map[string]string{"#wm": "watermark", "#spans": "lostSpans"}
	values := map[string]types.AttributeValue{
		":wm":   &types.AttributeValueMemberS{Value: "100"},
		":span": &types.AttributeValueMemberS{Value: "100-200"},
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	for _, c := range []struct {
		name string
		item map[string]types.AttributeValue
		want bool
	}{
		{"no spans yet", map[string]types.AttributeValue{"watermark": s("100")}, true},
		{"another span counted", map[string]types.AttributeValue{"watermark": s("100"), "lostSpans": &types.AttributeValueMemberSS{Value: []string{"50-90"}}}, true},
		{"this span counted", map[string]types.AttributeValue{"watermark": s("100"), "lostSpans": &types.AttributeValueMemberSS{Value: []string{"50-90", "100-200"}}}, false},
		{"watermark moved", map[string]types.AttributeValue{"watermark": s("150")}, false},
		{"substring of a string", map[string]types.AttributeValue{"watermark": s("100"), "lostSpans": s("x100-200x")}, false},
		{"element of a list", map[string]types.AttributeValue{"watermark": s("100"), "lostSpans": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("100-200")}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := evalCond(cond, names, values, c.item)
			if err != nil || got != c.want {
				t.Fatalf("evalCond = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestBehindLater(t *testing.T) {
	for _, tc := range []struct {
		heldBehind string
		want       bool
	}{
		{"shardId-000000000002:49590000000000000000000000000000000057236313634949300224:0", true},
		{"shardId-000000000002:49590000000000000000000000000000000016893645397075427328:0", false},
		{"shardId-000000000001:49590000000000000000000000000000000057236313634949300224:0", false},
		{"", false},
	} {
		if got := behindLater("shardId-000000000002", "49590000000000000000000000000000000026893645397075427328", tc.heldBehind); got != tc.want {
			t.Errorf("behindLater(%q) = %v, want %v", tc.heldBehind, got, tc.want)
		}
	}
}
