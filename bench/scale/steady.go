package scale

import (
	"fmt"
	"time"
)

// SteadyResult is a period in which N synced nodes only renew their
// sessions.
type SteadyResult struct {
	Nodes  int
	Period time.Duration
	Usage
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
	stopProfile := profile(cfg, fmt.Sprintf("steady-%d", nodes), env.coord.pid())
	time.Sleep(cfg.SteadyFor)
	stopProfile()
	env.end(m)
	res.Usage = m.Usage
	return res, m.err
}
