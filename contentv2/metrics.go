package contentv2

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	uncoordinated *prometheus.CounterVec
	writes        *prometheus.CounterVec
	follows       *prometheus.CounterVec
	deletes       *prometheus.CounterVec
	waits         prometheus.Counter
	synced        prometheus.Gauge
	syncs         prometheus.Counter
	reaped        *prometheus.CounterVec
	reapPasses    *prometheus.CounterVec
	reapable      prometheus.Gauge
	missingBlobs  prometheus.Gauge
	sharedBytes   prometheus.Counter
	skipRefs      prometheus.Counter
	// Sessions (session.go).
	renewalSent     prometheus.Gauge
	failOpenSince   prometheus.Gauge
	failOpenDelay   prometheus.Gauge
	sessionRefusals *prometheus.CounterVec
	forgotten       prometheus.Counter
	forgottenGone   prometheus.Counter
	// Storage (writer.go).
	discarded *prometheus.CounterVec
	// Downloads and their followers (docs/design.md §5.10).
	downloads        prometheus.Gauge
	downloadBytes    prometheus.Gauge
	followersWaiting prometheus.Gauge
	followerWaits    *prometheus.HistogramVec
	// The shared root (rootwatch.go).
	rootReady   prometheus.Gauge
	rootUnready *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		uncoordinated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_uncoordinated_total",
			Help: "Operations that met an unreachable coordinator: writes and refs went ahead (fail-open), deletes were skipped (fail-closed).",
		}, []string{"op"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_writers_total",
			Help: "Writer calls by outcome: acquired (this node downloads), follower (another node holds it; the writer waits for it), busy (another node holds it, size unknown), skipped (another node finished it), exists (library mode), local (no digest), uncoordinated.",
		}, []string{"result"}),
		follows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_follows_total",
			Help: "Followers by outcome: shared (the holder succeeded; the blob is used without downloading), handed (the holder failed; this node downloads), uncoordinated (downloaded without the coordinator).",
		}, []string{"result"}),
		deletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_deletes_total",
			Help: "Delete calls by outcome: deleted, in_use (kept for other nodes), unsynced (kept until every member is synced), locked, skipped, revoked (lock lost before the removal), restored (the unlock was not confirmed: the blob was put back), unreachable, stalled (the shared root was not answering: kept), root_unready (the shared root did not check out: refused), ref_dropped (of those two, the ones whose reference of this node was dropped at the coordinator, the file left for the reaper).",
		}, []string{"result"}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_coordinator_waits_total",
			Help: "Writes and uses answered 'unavailable' (containerd retries) because the coordinator could not be reached while this node's session might still be live.",
		}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_synced",
			Help: "1 while the coordinator has this node's whole journal; while 0, no node's GC deletes anything.",
		}),
		syncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_syncs_total",
			Help: "Full syncs of the node journal to the coordinator.",
		}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_reaper_reclaimed_total",
			Help: "What the reaper removed, by kind: orphan (blob nobody references), dangling (reference to a missing blob), ingest (of a forgotten node), marker (of a forgotten node), trash (entry of a delete that succeeded), trash_restored (entry put back: no successful delete of it), member (expired: gone by both measures).",
		}, []string{"kind"}),
		reapPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_reaper_passes_total",
			Help: "Reaper passes by result: ran (this node held the reap lock and finished the pass), skipped (another node held the lock, or this node is not a designated reaper), paused (the shared root was not verified or not answering), failed (any other error; the log says which).",
		}, []string{"result"}),
		reapable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_reaper_reclaimable_bytes",
			Help: "Bytes of blobs nobody references, found by the last reaper pass (reclaimed once older than the grace).",
		}),
		missingBlobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_missing_blobs",
			Help: "Blobs this node references (its journal) that its view of the shared root did not hold at the reaper's last check. Its own references to them are dropped once missing for the grace, unless more than a tenth are missing at once: then the root is suspect and nothing is dropped.",
		}),
		sharedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_shared_bytes_total",
			Help: "Bytes of blobs this node started using without downloading them: found in the shared directory, downloaded by another node (or by this one before its journal was lost). The registry bytes this node saved.",
		}),
		skipRefs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_skip_refs_total",
			Help: "References of this node that the coordinator recorded with the skip ending a follower's wait, as the follower asked (no POST /refs/add sent for them).",
		}),
		renewalSent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_session_renewal_sent_timestamp_seconds",
			Help: "When this node last sent a session renewal (or the last chunk of a sync), answered or not: a node cut off uses blobs unregistered only sharedcontent_store_fail_open_delay_seconds after it.",
		}),
		failOpenSince: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_fail_open_since_timestamp_seconds",
			Help: "When this node started using blobs without the coordinator (fail-open) since it last heard from it; 0 while it does not.",
		}),
		failOpenDelay: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_fail_open_delay_seconds",
			Help: "How long after its last session renewal a node cut off from the coordinator waits before it uses blobs unregistered: TTL/3 + TTL + TTL/10 + 2 s, with the larger of the configured and the announced session TTL.",
		}),
		sessionRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_session_refusals_total",
			Help: "Session calls the coordinator refused, by reason: late (a renewal or sync arrived too late to count; the node opened a new session), duplicate_node (another live instance uses this node ID: fix --node-id), root_claimed (the cluster has a shared root, and this node's is not it: mount the shared storage), no_session (a reference or a pull's release refused because the coordinator held no live session of this node: it opened the session again and retried).",
		}, []string{"reason"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_forgotten_total",
			Help: "Times the coordinator had forgotten this node (its references dropped) although its journal says it was a member: the node re-registered the blobs that still exist.",
		}),
		forgottenGone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sharedcontent_store_forgotten_lost_blobs_total",
			Help: "Blobs this node's journal recorded that were gone from the shared root when it came back after being forgotten (dropped from the journal; the log lists them).",
		}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_store_ingests_discarded_total",
			Help: "Ingests removed because writing them failed (write: a write failed, e.g. the shared filesystem is full; commit: committing it failed; open: opening it failed half-way): the next pull downloads the blob from the start.",
		}, []string{"op"}),
		downloads: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_downloads_in_flight",
			Help: "Blobs this node is downloading now (an ingest open for a digest, under its pull lock or uncoordinated). Per node, not per blob: `sharedcontentctl top` lists the blobs.",
		}),
		downloadBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_download_bytes_in_flight",
			Help: "Bytes written so far to the downloads this node has in flight.",
		}),
		followersWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_store_followers_waiting",
			Help: "Writers of this node waiting now for a blob another node downloads (followers).",
		}),
		followerWaits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sharedcontent_store_follower_wait_seconds",
			Help:    "How long followers waited for another node's download, by outcome: shared (the holder succeeded; used without downloading), handed (the holder failed; this node took over the download), uncoordinated (the coordinator was unreachable; this node downloads without it, fail-open), timeout (the pull's deadline passed), canceled (the pull was canceled, or the writer closed or aborted), failed (any other error).",
			Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"outcome"}),
		rootReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sharedcontent_root_ready",
			Help: "1 while the shared root is verified (exists, is a mount point if it was one, has the identity this node started on, is writable, answers a probe in time); 0 while this node refuses writes and deletes and pauses its reaper.",
		}),
		rootUnready: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sharedcontent_root_unready_total",
			Help: "Times the shared root turned unready, by reason: missing, not_mounted, no_identity (its .sharedcontent/cluster.json is gone), identity (another root), read_only, hung (a probe did not answer in time), error.",
		}, []string{"reason"}),
	}
	// Every result and reason exists from the start, at 0: an alert on
	// their increase sees the first one (a series born at 1 shows none).
	for _, r := range reapResults {
		m.reapPasses.WithLabelValues(r)
	}
	for _, r := range rootReasons {
		m.rootUnready.WithLabelValues(r)
	}
	for _, o := range waitOutcomes {
		m.followerWaits.WithLabelValues(o)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.uncoordinated, m.writes, m.follows, m.deletes, m.waits, m.synced, m.syncs, m.reaped, m.reapPasses, m.reapable, m.missingBlobs, m.sharedBytes, m.skipRefs,
			m.renewalSent, m.failOpenSince, m.failOpenDelay, m.sessionRefusals, m.forgotten, m.forgottenGone, m.discarded,
			m.rootReady, m.rootUnready, m.downloads, m.downloadBytes, m.followersWaiting, m.followerWaits} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
