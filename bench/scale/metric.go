package scale

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

var metricClient = &http.Client{Timeout: 5 * time.Second}

// Metric returns the sum of the samples of the metric name (exactly that
// name, with any labels) in the coordinator's /metrics at url.
func Metric(url, name string) (float64, error) {
	resp, err := metricClient.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, nil
}
