package httpserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestRefsListForms (docs/design.md §10.3): GET /refs/list answers the JSON
// it always did to a request that does not ask for the lines form (an older
// client), byte for byte in shape; with form=lines it answers the same page
// in the lines form; any other form gets JSON. Both forms page the same.
func TestRefsListForms(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "node-a", "node-b")
	ctx := context.Background()
	status, body := get(t, ts.url, "/refs/list", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	require.JSONEq(t, `{"entries":null}`, string(body), "no reference: the old shape")
	status, body = get(t, ts.url, "/refs/list", url.Values{api.RefsListFormParam: {api.RefsListFormLines}})
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, "\n", string(body), "no reference: an empty Next and no line")

	const sets = 5
	for i := range sets {
		for _, n := range []string{"node-b", "node-a"}[:1+i%2] {
			_, err := ts.Coordinator.AddRef(ctx, fmt.Sprintf("sha256:%064d", i), n)
			require.NoError(t, err)
		}
	}

	resp, err := http.Get(ts.url + "/refs/list?" + url.Values{"limit": {"2"}}.Encode())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	status, body = get(t, ts.url, "/refs/list", url.Values{"limit": {"2"}})
	require.Equal(t, http.StatusOK, status, string(body))
	require.JSONEq(t, fmt.Sprintf(`{"entries":[`+
		`{"resource_id":"sha256:%064d","nodes":["node-b"]},`+
		`{"resource_id":"sha256:%064d","nodes":["node-a","node-b"]}],`+
		`"next":"sha256:%064d"}`, 0, 1, 1), string(body), "the old shape")

	for _, form := range []string{"", "json", "LINES"} {
		status, body := get(t, ts.url, "/refs/list", url.Values{"limit": {"2"}, api.RefsListFormParam: {form}})
		require.Equal(t, http.StatusOK, status, string(body))
		page := decodeAs[api.RefsListResponse](t, body)
		require.Len(t, page.Entries, 2, "form %q: JSON", form)
	}

	walk := func(form string) (pages []api.RefsListResponse) {
		after := ""
		for range sets + 1 {
			q := url.Values{"after": {after}, "limit": {"2"}}
			if form != "" {
				q.Set(api.RefsListFormParam, form)
			}
			resp, err := http.Get(ts.url + "/refs/list?" + q.Encode())
			require.NoError(t, err)
			var page api.RefsListResponse
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			if form == api.RefsListFormLines {
				require.Equal(t, api.RefsLinesMediaType, resp.Header.Get("Content-Type"))
				var d api.RefsLinesDecoder
				page, err = d.Decode(body)
				require.NoError(t, err, string(body))
			} else {
				page = decodeAs[api.RefsListResponse](t, body)
			}
			pages = append(pages, page)
			if page.Next == "" {
				return pages
			}
			after = page.Next
		}
		t.Fatalf("form %q: the walk does not end", form)
		return nil
	}
	jsonPages, linesPages := walk(""), walk(api.RefsListFormLines)
	require.Len(t, jsonPages, 3)
	require.Equal(t, jsonPages, linesPages, "the same pages in both forms")

	status, body = get(t, ts.url, "/refs/list", url.Values{"limit": {"1"}, api.RefsListFormParam: {api.RefsListFormLines}})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, fmt.Sprintf("sha256:%064d\nsha256:%064d\tnode-b\n", 0, 0), string(body), "the lines form as documented")
}
