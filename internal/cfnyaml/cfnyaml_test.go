package cfnyaml

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func node(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// TestIntrinsicForms: the short and the long form of each intrinsic read the same.
func TestIntrinsicForms(t *testing.T) {
	for _, c := range []struct{ src, fn, ref, getAtt, scalar string }{
		{"!Ref P", "Ref", "P", "", ""},
		{"{Ref: P}", "Ref", "P", "", ""},
		{"!GetAtt Q.Arn", "Fn::GetAtt", "", "Q.Arn", ""},
		{"!GetAtt [Q, Arn]", "Fn::GetAtt", "", "Q.Arn", ""},
		{"{Fn::GetAtt: [Q, Arn]}", "Fn::GetAtt", "", "Q.Arn", ""},
		{"!Condition C", "Condition", "", "", ""},
		{"plain", "", "", "", "plain"},
		{"!!str 5", "", "", "", "5"},
	} {
		n := node(t, "v: "+c.src)
		v := Get(n, "v")
		fn, _ := Intrinsic(v)
		if fn != c.fn || Ref(v) != c.ref || GetAtt(v) != c.getAtt || Scalar(v) != c.scalar {
			t.Errorf("%s: fn %q ref %q getAtt %q scalar %q", c.src, fn, Ref(v), GetAtt(v), Scalar(v))
		}
	}
	n := node(t, "a: {b: {c: x}}\nd: 1")
	if Scalar(Get(n, "a", "b", "c")) != "x" || Get(n, "a", "x") != nil || Get(n, "d", "e") != nil {
		t.Errorf("Get")
	}
	if k := Keys(n); len(k) != 2 || k[0] != "a" || k[1] != "d" {
		t.Errorf("Keys %v", k)
	}
}
