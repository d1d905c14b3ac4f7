package lockclient

import (
	"context"
	"mime"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// bodyDecoder is an answer that reads its body itself instead of as JSON
// (httpTransport.do), by its Content-Type.
type bodyDecoder interface {
	decodeBody(contentType string, data []byte) error
}

// refsPage is a page of GET /refs/list, asked for in the lines form
// (docs/design.md §10.3). A coordinator older than that form answers
// JSON, which is read as before.
type refsPage struct {
	api.RefsListResponse
}

func (p *refsPage) decodeBody(contentType string, data []byte) error {
	if mt, _, _ := mime.ParseMediaType(contentType); mt == linesMediaType {
		var d api.RefsLinesDecoder
		resp, err := d.Decode(data)
		p.RefsListResponse = resp
		return err
	}
	return jsonv2.Unmarshal(data, &p.RefsListResponse)
}

// linesMediaType is api.RefsLinesMediaType without its parameters.
var linesMediaType, _, _ = mime.ParseMediaType(api.RefsLinesMediaType)

// walkPage is how many reference sets WalkRefs asks for at once (a
// variable for tests).
var walkPage = api.MaxRefsPage

// WalkRefs calls fn with every reference set of the coordinator, in
// resource ID order, reading GET /refs/list a page of api.MaxRefsPage at a
// time; a walk holds two pages, never every set (docs/design.md §10.3):
// the next page is read while fn runs over this one. fn may keep the
// entry. Transient errors are retried per page; an error of fn ends the
// walk and is returned.
func (c *Client) WalkRefs(ctx context.Context, fn func(api.RefsEntry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	page, err := c.RefsList(ctx, "", walkPage)
	for err == nil {
		var next chan fetched
		if page.Next != "" {
			next = make(chan fetched, 1)
			go func(after string) {
				p, err := c.RefsList(ctx, after, walkPage)
				next <- fetched{p, err}
			}(page.Next)
		}
		for _, e := range page.Entries {
			if err := fn(e); err != nil {
				if next != nil {
					cancel()
					<-next
				}
				return err
			}
		}
		if next == nil {
			return nil
		}
		f := <-next
		page, err = f.page, f.err
	}
	return err
}

// fetched is a page WalkRefs read ahead.
type fetched struct {
	page api.RefsListResponse
	err  error
}
