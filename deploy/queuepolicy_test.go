package deploy

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestQueuePoliciesAcceptOnlyTheSenders: every queue a role may send to (the parked, target,
// failure and verify queues) has a queue policy that denies sqs:SendMessage to every principal
// but the roles granted it (wantGrants, which TestIAMLeastPrivilege ties to the roles): a
// principal with SQS rights of its own cannot forge a parked record, a forwarded record, an
// on-failure range or a shard's verification work.
// Every SAM template of the repository is held to it (an example has no target queue).
func TestQueuePoliciesAcceptOnlyTheSenders(t *testing.T) {
	t.Parallel()
	forEachTemplate(t, checkQueuePolicies)
}

func checkQueuePolicies(t *testing.T, path string, c *cfn) {
	senders := map[string][]string{} // queue -> roles that send to it
	for role, g := range wantGrants(c, path) {
		for _, target := range g["sqs:SendMessage"] {
			queue := strings.TrimSuffix(target, ".Arn")
			senders[queue] = append(senders[queue], role+".Arn")
		}
	}
	queues := slices.DeleteFunc([]string{"FailureQueue", "ParkedQueue", "TargetQueue", "VerifyQueue"}, func(q string) bool { return get(c.root, "Resources", q) == nil })
	if !slices.Equal(slices.Sorted(maps.Keys(senders)), queues) {
		t.Fatalf("queues sent to: %v", slices.Sorted(maps.Keys(senders)))
	}
	policed := map[string][]string{} // queue -> principals not denied
	for _, id := range c.resourcesOfType("AWS::SQS::QueuePolicy") {
		queues := targets(c.prop(id, "Queues"))
		if len(queues) != 1 {
			t.Errorf("%s: queues %v, want one queue per policy", id, queues)
			continue
		}
		q := queues[0]
		for _, s := range get(c.prop(id, "PolicyDocument"), "Statement").Content {
			if s.Tag == "!If" { // the failure bucket's notifications (TestFailureBucket checks it)
				if q != "FailureQueue" {
					t.Errorf("%s: a conditional statement on %s, which takes no S3 notifications", id, q)
				}
				continue
			}
			sid := scalar(get(s, "Sid"))
			if scalar(get(s, "Effect")) != "Deny" || scalar(get(s, "Principal")) != "*" {
				t.Errorf("%s %s: want a Deny for Principal \"*\" (the roles' own policies allow them)", id, sid)
				continue
			}
			if a := stringList(get(s, "Action")); !slices.Equal(a, []string{"sqs:SendMessage"}) {
				t.Errorf("%s %s: actions %v, want sqs:SendMessage", id, sid, a)
			}
			if r := targets(get(s, "Resource")); !slices.Equal(r, []string{q + ".Arn"}) {
				t.Errorf("%s %s: resource %v, want %s.Arn", id, sid, r, q)
			}
			cond := get(s, "Condition")
			if cond == nil || len(cond.Content) != 2 || cond.Content[0].Value != "ArnNotEquals" {
				t.Errorf("%s %s: want exactly one condition, ArnNotEquals on aws:PrincipalArn", id, sid)
				continue
			}
			allowed := get(cond, "ArnNotEquals", "aws:PrincipalArn")
			keys := len(cond.Content[1].Content) / 2
			// The failure queue also exempts requests S3 sends for the failure bucket
			// (aws:SourceArn is set only on service-to-service requests).
			bucketExempt := q == "FailureQueue" && keys == 2 && get(cond, "ArnNotEquals", "aws:SourceArn") != nil
			if allowed == nil || (keys != 1 && !bucketExempt) {
				t.Errorf("%s %s: ArnNotEquals must test aws:PrincipalArn only (and aws:SourceArn of the failure bucket on the failure queue)", id, sid)
				continue
			}
			policed[q] = append(policed[q], targets(allowed)...)
		}
	}
	for q, want := range senders {
		slices.Sort(want)
		got, ok := policed[q]
		if !ok {
			t.Errorf("%s has no queue policy: any principal with sqs:SendMessage can send to it", q)
			continue
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s accepts SendMessage from %v, want exactly the roles granted it %v", q, got, want)
		}
	}
	// The queues SQS itself moves messages to, and the parked queue's readers, need no sender.
	for q := range policed {
		if _, ok := senders[q]; !ok {
			t.Errorf("policy on %s, which no role sends to", q)
		}
	}
}
