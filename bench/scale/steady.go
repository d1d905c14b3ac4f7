package scale

import "time"

// SteadyResult is a period in which N synced nodes only renew their
// sessions.
type SteadyResult struct {
	Nodes     int
	Period    time.Duration
	CPU       time.Duration
	PeakRSS   int64
	PeakFiles int
	Errors    Errors
	BytesSent int64
	MaxGap    time.Duration
	Load      string
}

// CoreShare is the coordinator's CPU as a share of one core.
func (r SteadyResult) CoreShare() float64 { return float64(r.CPU) / float64(r.Period) }

// steady runs the fleet's session loops for cfg.SteadyFor.
func steady(cfg Config, nodes int) (SteadyResult, error) {
	res := SteadyResult{Nodes: nodes, Period: cfg.SteadyFor}
	env, err := setUp(cfg, nodes, nil)
	if err != nil {
		return res, err
	}
	defer env.tearDown()
	m := env.begin()
	time.Sleep(cfg.SteadyFor)
	env.end(m)
	res.CPU, res.PeakRSS, res.PeakFiles = m.cpu, m.peakRSS, m.peakFiles
	res.Errors, res.BytesSent, res.MaxGap, res.Load = m.errors, m.bytes, m.maxGap, m.load
	return res, m.err
}
