package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"

	"github.com/sharedcontent/sharedcontent/internal/prefetch"
)

// barEvery is how often the progress bar is redrawn at most.
const barEvery = 100 * time.Millisecond

// progress shows a prefetch's progress on out: a bar (bytes, blobs, rate)
// redrawn in place on a terminal, else one line per blob finished. Its
// event method is prefetch.Options.Progress, called one event at a time.
type progress struct {
	out   io.Writer
	tty   bool
	start time.Time
	drawn time.Time // when the bar was last drawn

	bytes       int64 // written so far
	total       int64 // sizes of the blobs started so far
	blobs, done int
}

func newProgress(out io.Writer) *progress {
	return &progress{out: out, tty: isTerminal(out), start: time.Now()}
}

func (p *progress) event(e prefetch.Event) {
	switch e.Kind {
	case prefetch.Started:
		p.blobs++
		p.total += e.Desc.Size
	case prefetch.Wrote:
		p.bytes += e.Bytes
	case prefetch.Done:
		p.done++
		if !p.tty {
			how := "present, referenced"
			if e.Blob.Fetched {
				how = fmt.Sprintf("downloaded in %s", e.Blob.Took.Round(time.Millisecond))
			}
			fmt.Fprintf(p.out, "%s %s %s: %s\n", e.Blob.Digest, kindOf(e.Blob.MediaType), bytesOf(e.Blob.Size), how)
			return
		}
	}
	if p.tty && (e.Kind == prefetch.Done || time.Since(p.drawn) >= barEvery) {
		p.draw()
	}
}

// draw redraws the bar in place.
func (p *progress) draw() {
	p.drawn = time.Now()
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = int(min(p.bytes, p.total) * width / p.total)
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	fmt.Fprintf(p.out, "\r[%s] %s / %s  %d/%d blobs  %s/s ", bar, bytesOf(p.bytes), bytesOf(p.total), p.done, p.blobs, bytesOf(p.rate()))
}

// rate is the bytes written per second so far.
func (p *progress) rate() int64 {
	s := time.Since(p.start).Seconds()
	if s <= 0 {
		return 0
	}
	return int64(float64(p.bytes) / s)
}

// finish ends the bar's line.
func (p *progress) finish() {
	if p.tty && p.blobs > 0 {
		p.draw()
		fmt.Fprintln(p.out)
	}
}

// kindOf names a blob's media type for people.
func kindOf(mediaType string) string {
	switch {
	case images.IsIndexType(mediaType):
		return "index"
	case images.IsManifestType(mediaType):
		return "manifest"
	case images.IsKnownConfig(mediaType):
		return "config"
	case images.IsLayerType(mediaType):
		return "layer"
	}
	return mediaType
}
