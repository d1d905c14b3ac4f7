package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRefsLinesRoundTrip: a page written in the lines form reads back the
// same, including fields that must be quoted (a tab, a newline, a leading
// double quote), a set without nodes and the last page's empty Next.
func TestRefsLinesRoundTrip(t *testing.T) {
	for _, page := range []RefsListResponse{
		{Entries: []RefsEntry{}},
		{Next: "sha256:b", Entries: []RefsEntry{
			{ResourceID: "sha256:a", Nodes: []string{"node-1", "node 2"}},
			{ResourceID: "sha256:b", Nodes: []string{"node-1"}},
		}},
		{Entries: []RefsEntry{
			{ResourceID: "tab\there", Nodes: []string{"new\nline", `"quoted"`, "ünïcode"}},
			{ResourceID: `"`, Nodes: []string{}},
			{ResourceID: "del\x7f", Nodes: []string{"a\\b"}},
		}},
		{Next: "a\tb", Entries: []RefsEntry{{ResourceID: "a\tb", Nodes: []string{"x"}}}},
	} {
		data := AppendRefsLines(nil, page)
		var d RefsLinesDecoder
		got, err := d.Decode(data)
		require.NoError(t, err, "%q", data)
		require.Equal(t, page, got, "%q", data)
	}
}

// TestRefsLinesText: the lines form is what docs/design.md §10.3 says: Next,
// then a line per set, fields separated by tabs.
func TestRefsLinesText(t *testing.T) {
	page := RefsListResponse{Next: "sha256:b", Entries: []RefsEntry{
		{ResourceID: "sha256:a", Nodes: []string{"n1", "n2"}},
		{ResourceID: "sha256:b", Nodes: []string{"n2"}},
	}}
	require.Equal(t, "sha256:b\nsha256:a\tn1\tn2\nsha256:b\tn2\n", string(AppendRefsLines(nil, page)))
}

// TestRefsLinesShareNodes: a decoder gives equal node IDs one string, so
// a page of many sets of few nodes costs no string per node.
func TestRefsLinesShareNodes(t *testing.T) {
	data := []byte("\na\tn1\tn2\nb\tn1\nc\tn2\n")
	var d RefsLinesDecoder
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := d.Decode(data); err != nil {
			t.Fatal(err)
		}
	})
	// The entries, the node lists' one array and three resource IDs.
	require.LessOrEqual(t, allocs, 5.0)
}

// TestRefsLinesBad: a malformed page is an error, never a wrong page.
func TestRefsLinesBad(t *testing.T) {
	for _, bad := range []string{
		"",                   // no first line
		"next",               // no end of the first line
		"\nsha256:a\tn1",     // last line without its end
		"\n\tn1\n",           // a set without a resource ID
		"\n\"sha256:a\tn1\n", // a quoted field without its end
		"\nsha256:\xff\n",    // not UTF-8
		"\"\xff\n",           // a bad quoted Next
	} {
		var d RefsLinesDecoder
		_, err := d.Decode([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

// TestRefsListJSONShape: the JSON answer, which every client that does not
// ask for the lines form gets, keeps its field names.
func TestRefsListJSONShape(t *testing.T) {
	b, err := json.Marshal(RefsListResponse{Next: "b", Entries: []RefsEntry{{ResourceID: "a", Nodes: []string{"n"}}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"entries":[{"resource_id":"a","nodes":["n"]}],"next":"b"}`, string(b))
}
