package gapless

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestRecordRoundTrip: what the pipeline holds reaches Process unchanged and back (the default
// Process behind WithProcessWrapper sees the record the pipeline gave).
func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	in := pipeline.Record{ID: recordid.ID{ShardID: "shardId-000000000007", Seq: "49590338271490256608559692538361571095921575989136588818", Sub: 3},
		PartitionKey: "customer-9", Data: []byte{0, 1, 2}, ArrivalTime: time.Unix(1_700_000_000, 0)}
	pub := fromPipeline(in)
	if pub.ID() != in.ID.String() {
		t.Errorf("ID() = %q, the ledger's id is %q", pub.ID(), in.ID.String())
	}
	if back := toPipeline(pub); !reflect.DeepEqual(back, in) {
		t.Errorf("round trip: %+v, want %+v", back, in)
	}
}

// TestDocNamesEveryVariable: the package documentation (the user's manual) lists every
// environment variable internal/config reads.
func TestDocNamesEveryVariable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("internal/config/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^\s*(?:const\s+)?Env\w+\s*=\s*"(\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 10 {
		t.Fatalf("found %d variables in internal/config", len(names))
	}
	for _, m := range names {
		if !strings.Contains(string(doc), "//\t"+m[1]+" ") {
			t.Errorf("doc.go's Configuration section does not list %s", m[1])
		}
	}
}
