package scale

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// WriteTables writes the results as markdown tables (which read well on a
// terminal too).
func (r *Results) WriteTables(w io.Writer) {
	if len(r.Rollout) > 0 {
		fmt.Fprintf(w, "Rollout: every node pulls the same image at once, each node a contentv2 store (ContainerdMode, the product's deadlines: every coordination call containerd waits on bounded at %s, the coordinator then treated as down for %s) over one shared root on tmpfs, fetching each blob as containerd does (Info, then Writer retried while it answers unavailable, Status, which a follower waits in, then Commit; the holder downloads, a pause and the blob's bytes written, and commits). A wake-up runs from the holder's unlock (sent) until a waiter the coordinator had queued reads its outcome from its event stream (or has it from /lock/status when its stream came up after it); the wake-ups are split by that, with their counts; its parts (p99 each) are the holder's unlock request, the fan-out (from the unlock's answer to the waiter's read) and the simulator's own handling after the read (lockclient's dispatch and the scheduling of all the nodes' goroutines in one process; not in the wake-up). A lock request sent before the unlock but read by the coordinator after it is answered skip at once: that is its own latency, shown apart. What the nodes did: coordination calls that ended without an answer (each makes its store treat the coordinator as down), Writers answered unavailable (containerd waits and opens again), writes and references that went ahead uncoordinated, fetches that failed and were tried again, and the stores' own counters.\n\n",
			dur(contentv2.DefaultCoordinationTimeout), dur(contentv2.DefaultRefRetryInterval))
		table(w, []string{"nodes", "wall (last download done)", "coordinator CPU per node-blob", "wake-up p50 / p99", "wake-up p50 / p99 on the stream; by /lock/status (count each)", "wake-up parts p99: unlock / fan-out / simulator", "skip answered at once after the unlock p50 / p99 (requests)", "node done p50 / p99", "unfinished", "downloads per blob (duplicates)", "errors: time-out / 503 / 429 / other", "what the nodes did: calls without an answer / writers retried / uncoordinated / fetches retried", "the stores' counters", "peak RSS", "peak descriptors", "peak streams", "requests by kind", "sent by the coordinator", "longest without a session answer", "load average"},
			func(row func(...string)) {
				for _, x := range r.Rollout {
					row(x.NodesLabel(), fmt.Sprintf("%s (%s)", dur(x.Wall), dur(x.Downloaded)), dur(x.CPUPerNodeBlob()), pair(x.WakeSamples > 0, x.WakeP50, x.WakeP99),
						fmt.Sprintf("%s (%d); %s (%d)", pair(x.StreamedSamples > 0, x.StreamedP50, x.StreamedP99), x.StreamedSamples, pair(x.CheckedSamples > 0, x.CheckedP50, x.CheckedP99), x.CheckedSamples),
						fmt.Sprintf("%s / %s / %s", dur(x.UnlockP99), dur(x.FanoutP99), dur(x.DispatchP99)),
						fmt.Sprintf("%s (%d)", pair(x.LateSamples > 0, x.LateP50, x.LateP99), x.LateSamples),
						pair(x.Unfinished < x.Nodes, x.DoneP50, x.DoneP99), strconv.Itoa(x.Unfinished), fmt.Sprintf("%s (%d)", downloads(x.Downloads), x.Duplicates()),
						errs(x.Errors), fmt.Sprintf("%d / %d / %.0f / %d", x.Acts.FailedCalls, x.Acts.WriterRetries, x.Acts.Uncoordinated(), x.Retries), x.Acts.String(),
						mb(x.PeakRSS), strconv.Itoa(x.PeakFiles), strconv.FormatInt(x.PeakStreams, 10),
						x.Requests.String(), mb(x.BytesSent), dur(x.MaxGap), x.Load)
				}
			})
	}
	if len(r.Steady) > 0 {
		fmt.Fprintf(w, "Steady: synced nodes only renew their sessions (every TTL/3).\n\n")
		table(w, []string{"nodes", "period", "coordinator CPU (share of one core)", "peak RSS", "peak descriptors", "errors: time-out / 503 / 429 / other", "sent by the coordinator", "longest without a session answer", "load average"},
			func(row func(...string)) {
				for _, x := range r.Steady {
					row(strconv.Itoa(x.Nodes), dur(x.Period), fmt.Sprintf("%.1f%%", 100*x.CoreShare()), mb(x.PeakRSS),
						strconv.Itoa(x.PeakFiles), errs(x.Errors), mb(x.BytesSent), dur(x.MaxGap), x.Load)
				}
			})
	}
	if len(r.Restart) > 0 {
		fmt.Fprintf(w, "Restart: nodes × references each (a pool of 2×R blobs, each referenced by about half the nodes) synced; the coordinator is killed (SIGKILL) and started again on its data directory; every node notices the new epoch at its next renewal and syncs its journal (contentv2's session logic, through contentv2/remote).\n\n")
		table(w, []string{"nodes × references", "first sync (setup)", "coordinator CPU of the setup", "down (kill → answering)", "all synced again after answering", "not synced", "coordinator CPU (new process)", "peak RSS (new process)", "peak RssAnon / RssFile (sampled)", "peak descriptors", "errors: time-out / 503 / 429 / other", "sent by the coordinator (per node)", "longest without a session answer", "load average"},
			func(row func(...string)) {
				for _, x := range r.Restart {
					row(x.RestartSize.String(), dur(x.Setup), dur(x.SetupCPU), dur(x.Down), dur(x.Resync), strconv.Itoa(x.Unsynced), dur(x.CPU), mb(x.PeakRSS), mb(x.PeakAnon)+" / "+mb(x.PeakFile),
						strconv.Itoa(x.PeakFiles), errs(x.Errors), fmt.Sprintf("%s (%s)", mb(x.BytesSent), kb(x.BytesSent/int64(max(1, x.Nodes)))),
						dur(x.MaxGap), x.Load)
				}
			})
	}
	r.writeFailed(w)
}

// writeFailed lists the scenarios that could not run.
func (r *Results) writeFailed(w io.Writer) {
	if len(r.Failed) == 0 {
		return
	}
	fmt.Fprintf(w, "Not run to the end:\n\n")
	for _, f := range r.Failed {
		fmt.Fprintf(w, "- %s\n", f)
	}
	fmt.Fprintln(w)
}

func table(w io.Writer, head []string, rows func(row func(...string))) {
	line := func(cells []string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }
	line(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	rows(func(cells ...string) { line(cells) })
	fmt.Fprintln(w)
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "−" + dur(-d)
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// pair shows two quantiles, or "-" without samples.
func pair(ok bool, a, b time.Duration) string {
	if !ok {
		return "-"
	}
	return dur(a) + " / " + dur(b)
}

// durIf shows d, or "-" without samples.
func durIf(ok bool, d time.Duration) string {
	if !ok {
		return "-"
	}
	return dur(d)
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func kb(n int64) string { return fmt.Sprintf("%.1f KB", float64(n)/1e3) }

// errs shows e; the other errors with how many were connections refused
// and cut, when there were any.
func errs(e Errors) string {
	s := fmt.Sprintf("%d / %d / %d / %d", e.Timeouts, e.Unavailable, e.TooMany, e.Other)
	if e.Refused+e.Cut > 0 {
		s += fmt.Sprintf(" (refused %d, cut %d)", e.Refused, e.Cut)
	}
	return s
}

// downloads shows the per-blob counts compactly: "1 each" when all are 1.
func downloads(d []int64) string {
	all1 := true
	var s []string
	for _, x := range d {
		all1 = all1 && x == 1
		s = append(s, strconv.FormatInt(x, 10))
	}
	if all1 {
		return "1 each"
	}
	return strings.Join(s, ",")
}
