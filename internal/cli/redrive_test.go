package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

type redriveJSON struct {
	Received    int `json:"received"`
	Processed   int `json:"processed"`
	ParkedAgain int `json:"parked_again"`
	Left        int `json:"left"`
}

func TestRedrive(t *testing.T) {
	s := newOpsStack(t)
	s.parkedMaxBytes = 1500 // the large record's payload goes to the payload bucket
	s.put([]byte(`{"id":"small-0"}`), bytes.Repeat([]byte("L"), 3000), []byte(`{"id":"small-2"}`))
	if res := s.run(0, 3, true, 1, false); res.Parked != 3 || res.ParkedByRef != 0 {
		t.Fatalf("parking: %+v", res)
	}
	if msgs := s.parked(); len(msgs) != 3 || countInS3(msgs) != 1 {
		t.Fatalf("parked %+v, want 3 messages, the large one naming its object", msgs)
	} else {
		for _, m := range msgs {
			s.requeue(m)
		}
	}
	redrive := func(target string, extra ...string) (redriveJSON, string, int) {
		stdout, stderr, code := gapless(t, append(append([]string{"redrive", "--json", "--max-attempts", "2", "--target-queue", target, "--payload-bucket", s.bucket}, extra...), s.args()...)...)
		return decodeJSON[redriveJSON](t, stdout), stderr, code
	}

	t.Run("fixed: processed and deleted", func(t *testing.T) {
		r, stderr, code := redrive(s.targetURL)
		if code != 0 || r.Received != 3 || r.Processed != 3 {
			t.Fatalf("exit %d %+v\n%s", code, r, stderr)
		}
		if !strings.Contains(stderr, s.id(1).String()+": processed after 1 attempt(s)") {
			t.Errorf("no progress line for the record parked in S3: %q", stderr)
		}
		got := s.forwarded()
		for i := range 3 {
			if got[s.id(i).String()] != string(s.datas[i]) {
				t.Errorf("record %d forwarded as %q", i, got[s.id(i).String()])
			}
		}
		if left := s.parked(); len(left) != 0 {
			t.Errorf("parked queue still holds %d messages", len(left))
		}
	})

	t.Run("still failing: parked again with a fresh budget", func(t *testing.T) {
		s.put([]byte(`{"id":"still-bad"}`))
		if res := s.run(3, 4, true, 1, false); res.Parked != 1 {
			t.Fatalf("parking: %+v", res)
		}
		bogus := s.targetURL + "-does-not-exist"
		for round := 1; round <= 2; round++ {
			r, stderr, code := redrive(bogus)
			if code != 0 || r.ParkedAgain != 1 || r.Processed != 0 || r.Left != 0 { // its new message may come back in the same session: skipped
				t.Fatalf("round %d: exit %d %+v\n%s", round, code, r, stderr)
			}
			if !strings.Contains(stderr, "parked-again after 2 attempt(s)") {
				t.Errorf("round %d: %q", round, stderr)
			}
			msgs := s.parked()
			if len(msgs) != 1 || msgs[0].RecordID != s.id(3).String() || msgs[0].Source != pipeline.SourceRedrive || msgs[0].Attempts != 2 || string(msgs[0].Data) != `{"id":"still-bad"}` {
				t.Fatalf("round %d: parked queue %+v, want the one record parked anew by redrive after 2 attempts", round, msgs)
			}
			// Put it back for the next round, as the redrive left it.
			s.requeue(msgs[0])
		}
	})
}

func countInS3(msgs []park.Message) int {
	n := 0
	for _, m := range msgs {
		if m.PayloadS3 != nil {
			n++
		}
	}
	return n
}
