package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// GET /refs/list answers JSON (a RefsListResponse) unless the request asks
// for the lines form with RefsListFormParam=RefsListFormLines (docs/design.md
// §10.3): the same page, as RefsLinesMediaType, which costs a client no
// reflection and no object per field to read. A coordinator older than the
// lines form ignores the parameter and answers JSON, so a client tells the
// two apart by the answer's Content-Type (DecodeRefsList).
//
// The lines form is UTF-8 text. Its first line is the page's Next (empty
// on the last page); each following line is one reference set: the
// resource ID, then its nodes in order, each preceded by a tab. Every line
// ends with a newline. A field that holds a control character or starts
// with a double quote (no valid ID does: IDs have no control characters)
// is written as a JSON string.
const (
	RefsListFormParam  = "form"
	RefsListFormLines  = "lines"
	RefsLinesMediaType = "text/vnd.sharedcontent.refs-lines; charset=utf-8"
)

// MaxRefsPage is the most reference sets one GET /refs/list page holds; a
// larger limit is cut to it. DefaultRefsPage is the page of a request
// without a limit.
const (
	MaxRefsPage     = 10000
	DefaultRefsPage = 1000
)

// AppendRefsLines appends page in the lines form to dst.
func AppendRefsLines(dst []byte, page RefsListResponse) []byte {
	// Grown once: the size of the page unquoted.
	n := len(page.Next) + 1
	for _, e := range page.Entries {
		n += len(e.ResourceID) + 1
		for _, node := range e.Nodes {
			n += len(node) + 1
		}
	}
	dst = slices.Grow(dst, n)
	dst = appendLinesField(dst, page.Next)
	dst = append(dst, '\n')
	for _, e := range page.Entries {
		dst = appendLinesField(dst, e.ResourceID)
		for _, n := range e.Nodes {
			dst = append(dst, '\t')
			dst = appendLinesField(dst, n)
		}
		dst = append(dst, '\n')
	}
	return dst
}

// appendLinesField appends s, as a JSON string when it must be quoted.
func appendLinesField(dst []byte, s string) []byte {
	if !needsQuote(s) {
		return append(dst, s...)
	}
	q, _ := json.Marshal(s) // a string always encodes
	return append(dst, q...)
}

func needsQuote(s string) bool {
	if s != "" && s[0] == '"' {
		return true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// RefsLinesDecoder reads pages of the lines form. It shares the strings of
// node IDs between the entries it decodes (a cluster has few nodes and
// each appears in many sets), up to a bound. The zero value is ready; a
// decoder is not safe for concurrent use.
type RefsLinesDecoder struct {
	nodes map[string]string
}

// maxInternedNodes bounds the node IDs a RefsLinesDecoder shares.
const maxInternedNodes = 1 << 16

// Decode parses one page of the lines form. The entries' strings and Nodes
// slices are the caller's to keep.
func (d *RefsLinesDecoder) Decode(data []byte) (RefsListResponse, error) {
	var out RefsListResponse
	line, rest, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return out, fmt.Errorf("refs lines: no first line")
	}
	next, err := d.field(line, false)
	if err != nil {
		return out, err
	}
	out.Next = next
	lines := bytes.Count(rest, []byte{'\n'})
	if len(rest) > 0 && rest[len(rest)-1] != '\n' {
		return out, fmt.Errorf("refs lines: the last line has no end")
	}
	out.Entries = make([]RefsEntry, 0, lines)
	// One backing array for the page's node lists (a tab per node).
	all := make([]string, 0, bytes.Count(rest, []byte{'\t'}))
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		id, fields, _ := bytes.Cut(line, []byte{'\t'})
		var e RefsEntry
		if e.ResourceID, err = d.field(id, false); err != nil {
			return out, err
		}
		if e.ResourceID == "" {
			return out, fmt.Errorf("refs lines: an entry without a resource ID")
		}
		start := len(all)
		for len(fields) > 0 {
			var f []byte
			f, fields, _ = bytes.Cut(fields, []byte{'\t'})
			n, err := d.field(f, true)
			if err != nil {
				return out, err
			}
			all = append(all, n)
		}
		e.Nodes = all[start:len(all):len(all)]
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

// field returns one field as a string, unquoting a JSON string; a node's
// string is shared.
func (d *RefsLinesDecoder) field(b []byte, node bool) (string, error) {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return "", fmt.Errorf("refs lines: field %.40q: %w", b, err)
		}
		return s, nil
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("refs lines: field %.40q is not UTF-8", b)
	}
	if !node {
		return string(b), nil
	}
	if s, ok := d.nodes[string(b)]; ok { // no allocation
		return s, nil
	}
	s := string(b)
	if d.nodes == nil {
		d.nodes = map[string]string{}
	}
	if len(d.nodes) < maxInternedNodes {
		d.nodes[s] = s
	}
	return s, nil
}
