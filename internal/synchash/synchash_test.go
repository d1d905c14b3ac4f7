package synchash

import "testing"

func TestOrderIndependentAndRemovable(t *testing.T) {
	a := FromIDs([]string{"sha256:aa", "sha256:bb", "sha256:cc"})
	b := FromIDs([]string{"sha256:cc", "sha256:aa", "sha256:bb"})
	if *a != *b || a.Whole() != b.Whole() {
		t.Fatal("the order of the IDs changed the hash")
	}
	if a.Whole().Count != 3 {
		t.Fatalf("count %d, want 3", a.Whole().Count)
	}
	b.Add("sha256:dd")
	if a.Whole() == b.Whole() || len(a.Differ(b)) != 1 || a.Differ(b)[0] != Bucket("sha256:dd") {
		t.Fatalf("one more ID: differ %v", a.Differ(b))
	}
	b.Remove("sha256:dd")
	for _, id := range []string{"sha256:aa", "sha256:bb", "sha256:cc"} {
		b.Remove(id)
	}
	if !b.Empty() {
		t.Fatal("removing every ID left a non-empty table")
	}
}
