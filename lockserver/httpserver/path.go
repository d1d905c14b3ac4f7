package httpserver

import (
	"bytes"
	"net/url"
)

// canonicalPath reports whether the request path as sent (raw) is the
// path fasthttp routes on (normalized), apart from percent-encoding.
// fasthttp always decodes and normalizes paths: "/lock%2fcancel" and
// "/lock/../lock/cancel" would both be served as "/lock/cancel", which a
// path-filtering proxy in front would not expect. A path with an encoded
// '/', a dot segment, a doubled '/' or a bad escape is not canonical, and
// routes nowhere (404).
func canonicalPath(raw, normalized []byte) bool {
	if bytes.IndexByte(raw, '%') < 0 {
		return bytes.Equal(raw, normalized)
	}
	if bytes.Contains(bytes.ToLower(raw), []byte("%2f")) {
		return false
	}
	decoded, err := url.PathUnescape(string(raw))
	return err == nil && decoded == string(normalized)
}
