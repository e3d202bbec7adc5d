package reconcile

import "testing"

func TestSameFunction(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:lambda:eu-west-1:111122223333:function:gapless-consumer"
	for _, tt := range []struct {
		want, got string
		same      bool
	}{
		{"", "anything", true},
		{arn, arn, true},
		{arn, arn + ":$LATEST", true},
		{arn, arn + ":live", true},
		{arn + ":live", arn, true},
		{"gapless-consumer", arn, true},
		{"gapless-consumer", arn + ":7", true},
		{arn, "arn:aws:lambda:eu-west-1:999999999999:function:gapless-consumer", false},
		{arn, "arn:aws:lambda:us-east-1:111122223333:function:gapless-consumer", false},
		{arn, "arn:aws:lambda:eu-west-1:111122223333:function:gapless-consumer-2", false},
		{"gapless-consumer", "arn:aws:lambda:eu-west-1:111122223333:function:other", false},
		{"gapless-consumer", "gapless-consumer", false}, // a message names an ARN
		{arn, "", false},
		{arn, "arn:aws:sqs:eu-west-1:111122223333:function:gapless-consumer", false},
	} {
		if got := sameFunction(tt.want, tt.got); got != tt.same {
			t.Errorf("sameFunction(%q, %q) = %v, want %v", tt.want, tt.got, got, tt.same)
		}
	}
}
