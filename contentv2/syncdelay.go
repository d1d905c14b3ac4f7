package contentv2

import (
	"math/rand/v2"
	"time"
)

// Syncs after a coordinator restart are spread (docs/design.md
// §10.4): every node learns of the restart within one renewal
// period of the others, and would sync at once, all together. Instead
// each waits a random part of its renewal interval (TTL/3) before it
// syncs; its session is renewed meanwhile (only deletes wait for it),
// and the busy coordinator's 429s cover the rest.

// deferSync reports whether the sync that the session answer received
// at now asks for waits: after a coordinator restart, until a random
// point of the next renewal interval. The session loop's next round comes
// then (nextRound).
func (s *store) deferSync(now time.Time) bool {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.restarted {
		s.restarted = false
		s.syncAt = now.Add(rand.N(max(s.coordTTL()/3, time.Millisecond)))
	}
	if now.Before(s.syncAt) {
		return true
	}
	s.syncAt = time.Time{}
	return false
}

// nextRound is how long the session loop waits for its next round: the
// renewal interval, or less when a deferred sync is due sooner.
func (s *store) nextRound() time.Duration {
	d := s.sessionInterval()
	s.smu.Lock()
	defer s.smu.Unlock()
	if !s.syncAt.IsZero() {
		d = min(d, max(time.Until(s.syncAt), time.Millisecond))
	}
	return d
}
